// Tests of src/ops/random.cpp. Seeded results are compared with numpy's RandomState, which
// defines them in ONNX's reference implementation; expected values were computed with numpy.
#include <cmath>

#include "graph_test_util.hpp"
#include "ops/registry.hpp"

namespace graft::testing {
namespace {

using DT = DataType;

NDArray run1(const std::string& type, std::vector<NDArray> in, ir::Attributes a) {
  return runReference({type, std::move(in), std::move(a)}).at(0);
}

// A one-node graph compiled once, to run the same kernel several times.
std::unique_ptr<plan::Executable> compileOne(const OpCase& c) {
  auto g = singleNodeGraph(c);
  std::unique_ptr<plan::Executable> exe;
  std::vector<ops::Value> in;
  for (const auto& a : c.inputs) in.push_back(tv(a));
  runGraph(*g, std::move(in), &exe);
  static std::vector<std::unique_ptr<ir::Graph>> keep;  // the plan points into its graph
  keep.push_back(std::move(g));
  return exe;
}

TEST(RandomUniform, SeededValuesMatchNumpy) {
  // numpy.random.RandomState(5).rand(2, 3) * 4 - 2
  auto y = run1("RandomUniform", {},
                attrs({{"shape", std::vector<int64_t>{2, 3}}, {"seed", 5.0f}, {"low", -2.0f}, {"high", 2.0f}}));
  EXPECT_TRUE(
      allClose(y, arr<float>({2, 3}, {-1.1120273f, 1.4829292f, -1.1731234f, 1.6744437f, -0.046355247f, 0.44697547f})));
  auto d =
      run1("RandomUniform", {}, attrs({{"shape", std::vector<int64_t>{6}}, {"seed", 5.0f}, {"dtype", int64_t{11}}}));
  EXPECT_TRUE(allClose(d,
                       arr<double>({6}, {0.22199317108973948, 0.8707323061773764, 0.20671915533942642,
                                         0.9186109079379216, 0.48841118879482914, 0.6117438629026457}),
                       1e-15, 0));
}

TEST(RandomUniform, SeededIsReproducibleUnseededIsNot) {
  auto seeded = compileOne({"RandomUniform", {}, attrs({{"shape", std::vector<int64_t>{16}}, {"seed", 1.0f}})});
  auto a = seeded->run({}).at(0).tensor, b = seeded->run({}).at(0).tensor;
  EXPECT_TRUE(allClose(a, b, 0, 0));
  auto unseeded =
      compileOne({"RandomUniform", {}, attrs({{"shape", std::vector<int64_t>{16}}, {"low", 3.0f}, {"high", 4.0f}})});
  auto c = unseeded->run({}).at(0).tensor, d = unseeded->run({}).at(0).tensor;
  EXPECT_FALSE(allClose(c, d, 0, 0));
  for (double v : toDoubles(c)) EXPECT_TRUE(v >= 3.0 && v < 4.0) << v;
}

TEST(RandomUniform, RejectsBadAttributes) {
  EXPECT_THROW(run1("RandomUniform", {}, attrs({{"shape", std::vector<int64_t>{2}}, {"dtype", int64_t{6}}})), Error);
  EXPECT_THROW(run1("RandomUniform", {}, attrs({{"shape", std::vector<int64_t>{-2}}})), Error);
  EXPECT_THROW(run1("RandomUniform", {}, attrs({{"shape", std::vector<int64_t>{2}}, {"seed", NAN}})), Error);
}

TEST(RandomNormal, SeededValuesMatchNumpy) {
  // numpy.random.RandomState(7).randn(5)
  std::vector<double> z = {1.690525703800356, -0.4659373705408328, 0.0328201636785844, 0.40751628299650783,
                           -0.7889230286257386};
  auto y =
      run1("RandomNormal", {}, attrs({{"shape", std::vector<int64_t>{5}}, {"seed", 7.0f}, {"dtype", int64_t{11}}}));
  EXPECT_TRUE(allClose(y, arr<double>({5}, z), 1e-14, 0));
  auto s = run1("RandomNormal", {},
                attrs({{"shape", std::vector<int64_t>{5}}, {"seed", 7.0f}, {"mean", 1.0f}, {"scale", 2.0f}}));
  std::vector<float> want;
  for (double v : z) want.push_back(static_cast<float>(1 + 2 * v));
  EXPECT_TRUE(allClose(s, arr<float>({5}, want)));
}

TEST(RandomNormal, UnseededHasRoughlyTheRequestedMoments) {
  auto y = run1("RandomNormal", {}, attrs({{"shape", std::vector<int64_t>{20000}}, {"mean", 3.0f}, {"scale", 0.5f}}));
  double sum = 0, sq = 0;
  for (double v : toDoubles(y)) sum += v, sq += v * v;
  double mean = sum / 20000, var = sq / 20000 - mean * mean;
  EXPECT_NEAR(mean, 3.0, 0.02);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.02);
}

TEST(RandomUniformLike, TakesShapeAndTypeFromTheInput) {
  auto y = run1("RandomUniformLike", {NDArray(DT::Float16, {2, 2})}, {});
  EXPECT_EQ(y.dtype(), DT::Float16);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  for (double v : toDoubles(y)) EXPECT_TRUE(v >= 0 && v <= 1) << v;
  auto d = run1("RandomUniformLike", {NDArray(DT::Int32, {6})}, attrs({{"dtype", int64_t{11}}, {"seed", 5.0f}}));
  EXPECT_NEAR(toDoubles(d)[1], 0.8707323061773764, 1e-15);
  EXPECT_THROW(run1("RandomUniformLike", {NDArray(DT::Int32, {2})}, {}), Error);
}

TEST(RandomNormalLike, SeededMatchesRandomNormal) {
  auto a = run1("RandomNormalLike", {NDArray(DT::Double, {5})}, attrs({{"seed", 7.0f}}));
  auto b =
      run1("RandomNormal", {}, attrs({{"shape", std::vector<int64_t>{5}}, {"seed", 7.0f}, {"dtype", int64_t{11}}}));
  EXPECT_TRUE(allClose(a, b, 0, 0));
}

TEST(Bernoulli, SeededValuesMatchNumpyBinomial) {
  // numpy.random.RandomState(3).binomial(1, p)
  auto p = arr<float>({8}, {0.1f, 0.9f, 0.5f, 0.0f, 1.0f, 0.3f, 0.7f, 0.2f});
  auto y = run1("Bernoulli", {p}, attrs({{"seed", 3.0f}}));
  EXPECT_TRUE(allClose(y, arr<float>({8}, {0, 1, 0, 0, 1, 1, 1, 0})));
  auto b = run1("Bernoulli", {p}, attrs({{"seed", 3.0f}, {"dtype", int64_t{9}}}));
  EXPECT_TRUE(allClose(b, arr<bool>({8}, {false, true, false, false, true, true, true, false})));
}

TEST(Bernoulli, RejectsProbabilitiesOutsideZeroOne) {
  EXPECT_THROW(run1("Bernoulli", {arr<double>({2}, {0.5, 1.5})}, {}), Error);
  EXPECT_THROW(run1("Bernoulli", {arr<double>({1}, {NAN})}, {}), Error);
}

TEST(Multinomial, SamplesOnlyClassesWithWeight) {
  auto logp = arr<float>({2, 3}, {0, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 5});
  auto y = run1("Multinomial", {logp}, attrs({{"sample_size", int64_t{4}}, {"dtype", int64_t{7}}}));
  EXPECT_TRUE(allClose(y, arr<int64_t>({2, 4}, {0, 0, 0, 0, 2, 2, 2, 2})));
}

TEST(Multinomial, FrequenciesFollowTheProbabilities) {
  auto logp = arr<double>({1, 2}, {std::log(0.2), std::log(0.8)});
  auto y = run1("Multinomial", {logp}, attrs({{"sample_size", int64_t{4000}}, {"seed", 2.0f}}));
  EXPECT_EQ(y.dtype(), DT::Int32);
  double ones = 0;
  for (double v : toDoubles(y)) ones += v;
  EXPECT_NEAR(ones / 4000, 0.8, 0.03);
}

TEST(Multinomial, RejectsBadInputs) {
  EXPECT_THROW(run1("Multinomial", {arr<float>({2}, {0, 0})}, {}), Error);
  EXPECT_THROW(run1("Multinomial", {arr<float>({1, 2}, {-INFINITY, -INFINITY})}, {}), Error);
  EXPECT_THROW(run1("Multinomial", {arr<float>({1, 2}, {NAN, 0})}, {}), Error);
  EXPECT_THROW(run1("Multinomial", {arr<float>({1, 2}, {0, 0})}, attrs({{"dtype", int64_t{1}}})), Error);
}

TEST(Dropout, InferenceModeIsIdentityWithAFullMask) {
  auto x = arr<float>({2, 2}, {1, 2, 3, 4});
  auto out = runReference({"Dropout", {x, scalar<float>(0.9f)}, {}, 2});
  EXPECT_TRUE(allClose(out.at(0), x));
  EXPECT_TRUE(allClose(out.at(1), arr<bool>({2, 2}, {true, true, true, true})));
  out = runReference({"Dropout", {x, scalar<float>(0.9f), scalar<bool>(false)}, {}, 1});
  EXPECT_TRUE(allClose(out.at(0), x));
}

TEST(Dropout, TrainingDropsWithTheSeededMaskAndScales) {
  // mask = numpy.random.RandomState(11).uniform(0, 1, (2, 4)) >= 0.4
  auto x = arr<float>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto out = runReference({"Dropout", {x, scalar<float>(0.4f), scalar<bool>(true)}, attrs({{"seed", int64_t{11}}}), 2});
  std::vector<bool> keep = {false, false, true, true, true, true, false, true};
  std::vector<float> want;
  for (int i = 0; i < 8; ++i) want.push_back(keep[i] ? static_cast<float>(i + 1) / 0.6f : 0.0f);
  EXPECT_TRUE(allClose(out.at(0), arr<float>({2, 4}, want)));
  EXPECT_TRUE(allClose(out.at(1), arr<bool>({2, 4}, keep)));
}

TEST(Dropout, GradientIsIdentityInInferenceAndMaskedInTraining) {
  auto x = randomArray(DT::Double, {3, 4}, 1);
  EXPECT_TRUE(gradCheck({"Dropout", {x}, {}, 1}, {0}));
  EXPECT_TRUE(gradCheck({"Dropout", {x, scalar<double>(0.3)}, {}, 2}, {0}));
  // Seeded, so every evaluation of the forward pass draws the same mask.
  EXPECT_TRUE(
      gradCheck({"Dropout", {x, scalar<double>(0.3), scalar<bool>(true)}, attrs({{"seed", int64_t{4}}}), 2}, {0}));
  EXPECT_TRUE(
      gradCheck({"Dropout", {x, scalar<double>(0.3), scalar<bool>(false)}, attrs({{"seed", int64_t{4}}}), 2}, {0}));
}

TEST(Dropout, RejectsARatioOutsideZeroOneInTraining) {
  auto x = arr<float>({2}, {1, 2});
  EXPECT_THROW(runReference({"Dropout", {x, scalar<float>(1.0f), scalar<bool>(true)}, {}, 1}), Error);
  EXPECT_THROW(runReference({"Dropout", {x, scalar<float>(-0.1f), scalar<bool>(true)}, {}, 1}), Error);
  EXPECT_THROW(runReference({"Dropout", {x, arr<float>({2}, {0.1f, 0.2f}), scalar<bool>(true)}, {}, 1}), Error);
}

TEST(Dropout, RandomOpsAreNondeterministicAndNeverFolded) {
  for (const char* op : {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial",
                         "Bernoulli", "Dropout"}) {
    const auto* def = ops::Registry::instance().find("", op);
    ASSERT_TRUE(def) << op;
    EXPECT_TRUE(def->traits.nondeterministic) << op;
  }
  auto g =
      singleNodeGraph({"RandomUniformLike", {arr<float>({2}, {0, 0})}, attrs({{"seed", 1.0f}})}, /*constInputs=*/true);
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes", "fold-constants"}, ctx);
  EXPECT_EQ(g->numNodes(), 1u);
  // Not evaluated, but a *Like of a statically shaped input becomes its generator (PopART's IR
  // shows RandomUniform there too): the input's shape and type become attributes.
  const ir::Node* n = g->nodes().front();
  EXPECT_EQ(n->type(), "RandomUniform");
  EXPECT_EQ(n->attrInts("shape"), (std::vector<int64_t>{2}));
  EXPECT_EQ(n->attrInt("dtype"), static_cast<int64_t>(DataType::Float));
  EXPECT_EQ(n->attrFloat("seed"), 1.0f);
  EXPECT_EQ(n->numInputs(), 0u);
}

}  // namespace
}  // namespace graft::testing
