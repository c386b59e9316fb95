// A suite of its own for each pass that was only tested through whole pipelines (infer-shapes,
// fold-constants, dce, constant-weights, fold-batchnorm, fuse-conv, fuse-matmul, cpu-layout), the
// suite of lstm-save-gates, and
// PassCoverage.EveryRegisteredPassHasATestSuite, which fails when a registered pass has none.
#include <algorithm>
#include <cctype>
#include <set>

#include "autodiff/autodiff.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/reorder_stats.hpp"
#include "ops/registry.hpp"
#include "pass_test_util.hpp"
#include "support/cpu_features.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends::cpu::onednn {
// In onednn_conv.cpp: the channel block (16) of a Conv that runs on oneDNN's Winograd kernel, or 0.
int convWinogradBlock(const ir::Node& n);
}  // namespace graft::backends::cpu::onednn

namespace graft::passes::testing {
namespace {

void run(ir::Graph& g, const std::vector<std::string>& ids, bool constantWeights = false) {
  PassContext ctx;
  ctx.verifyEachPass = true;
  ctx.weightsAreConstant = constantWeights;
  runPipeline(g, ids, ctx);
}

// The suite name of a pass id: "fuse-elementwise" -> "fuseelementwise", compared without case.
std::string squash(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '-' && c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

TEST(PassCoverage, EveryRegisteredPassHasATestSuite) {
  // Suites whose name is not the pass id's: the pass's behaviour is what they are named after.
  const std::map<std::string, std::string> named = {{"expand-gradient", "gradientop"},
                                                    {"training-mode", "trainingmodepass"}};
  std::set<std::string> suites;
  auto* ut = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < ut->total_test_suite_count(); ++i) suites.insert(squash(ut->GetTestSuite(i)->name()));
  std::vector<std::string> missing;
  for (const std::string& id : passIds()) {
    auto it = named.find(id);
    if (!suites.count(it != named.end() ? it->second : squash(id))) missing.push_back(id);
  }
  EXPECT_TRUE(missing.empty()) << "registered passes without a test suite of their own: "
                               << ::testing::PrintToString(missing);
}

TEST(InferShapes, BroadcastsAndTypesOutputs) {
  auto g = std::make_unique<ir::Graph>("t");
  ir::Tensor* a = g->addTensor("a", typeOf(DataType::Float, {2, 3}), ir::TensorKind::Input);
  ir::Tensor* b = g->addTensor("b", typeOf(DataType::Float, {3}), ir::TensorKind::Input);
  g->addInput(a);
  g->addInput(b);
  ir::Node* n = g->addNode("Add", "", {a, b}, {"y"}, {});
  g->setOutputs({n->output(0)});
  run(*g, {"infer-shapes"});
  EXPECT_EQ(n->output(0)->info().dataType(), DataType::Float);
  EXPECT_EQ(n->output(0)->info().shape(), (Shape{2, 3}));
}

TEST(FoldConstants, ConstantSubgraphsBecomeOneConstant) {
  GraphBuilder b;
  ir::Tensor* x = b.input({3});
  NDArray c1 = randomFloats({3}, 1), c2 = randomFloats({3}, 2);
  ir::Tensor* k = b.op("Mul", {b.constant(c1.clone()), b.constant(c2.clone())});
  b.outputs({b.op("Add", {x, k})});
  NDArray in = randomFloats({3}, 3);
  auto before = runGraph(*b.g, {in}, true);
  run(*b.g, {"fold-constants", "dce"});
  EXPECT_EQ(opCounts(*b.g)["Mul"], 0);
  EXPECT_EQ(opCounts(*b.g)["Add"], 1);
  EXPECT_TRUE(close(runGraph(*b.g, {in}, true)[0], before[0]));
}

TEST(Dce, RemovesWhatNoOutputNeeds) {
  GraphBuilder b;
  ir::Tensor* x = b.input({4});
  b.op("Exp", {x});  // read by nothing
  ir::Tensor* y = b.op("Neg", {x});
  b.outputs({y});
  ASSERT_EQ(b.g->numNodes(), 2u);
  run(*b.g, {"dce"});
  ASSERT_EQ(b.g->numNodes(), 1u);
  EXPECT_EQ(b.g->nodes()[0]->type(), "Neg");
}

TEST(ConstantWeights, VariablesBecomeConstantsOnlyWhenAsked) {
  for (bool constant : {false, true}) {
    GraphBuilder b;
    ir::Tensor* x = b.input({2, 4});
    ir::Tensor* w = b.g->addInitializer("w", randomFloats({4, 3}, 5), ir::TensorKind::Variable);
    b.outputs({b.op("MatMul", {x, w})});
    run(*b.g, {"constant-weights"}, constant);
    EXPECT_EQ(b.g->findTensor("w")->kind(), constant ? ir::TensorKind::Constant : ir::TensorKind::Variable);
  }
}

// Conv [1, C, S, S] -> K channels, 3x3, pad 1, with bias.
struct ConvGraph {
  int64_t c, k, size;
  GraphBuilder b;
  ir::Tensor* x;
  NDArray in;
  explicit ConvGraph(int64_t c = 3, int64_t k = 16, int64_t size = 8)
      : c(c), k(k), size(size), x(b.input({1, c, size, size})), in(randomFloats({1, c, size, size}, 11)) {}
  ir::Tensor* conv() {
    ir::Attributes a;
    a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    a.set("kernel_shape", std::vector<int64_t>{3, 3});
    return b.op("Conv", {x, b.constant(randomFloats({k, c, 3, 3}, 12)), b.constant(randomFloats({k}, 13))}, a);
  }
};

TEST(FoldBatchnorm, InferenceBatchNormAfterConvFoldsIntoItsWeights) {
  ConvGraph c;
  ir::Tensor* y = c.conv();
  ir::Tensor* bn = c.b.op("BatchNormalization",
                          {y, c.b.constant(randomFloats({16}, 21, 0.5, 2)), c.b.constant(randomFloats({16}, 22)),
                           c.b.constant(randomFloats({16}, 23)), c.b.constant(randomFloats({16}, 24, 0.5, 2))});
  c.b.outputs({bn});
  auto before = runGraph(*c.b.g, {c.in}, true);
  run(*c.b.g, {"fold-batchnorm", "dce"}, true);
  EXPECT_EQ(opCounts(*c.b.g)["BatchNormalization"], 0);
  EXPECT_EQ(opCounts(*c.b.g)["Conv"], 1);
  EXPECT_TRUE(close(runGraph(*c.b.g, {c.in}, true)[0], before[0], 1e-4, 1e-4));
}

TEST(FuseConv, ConvAndActivationBecomeFusedConv) {
  ConvGraph c;
  c.b.outputs({c.b.op("Relu", {c.conv()})});
  auto before = runGraph(*c.b.g, {c.in}, true);
  run(*c.b.g, {"fuse-conv", "dce"}, true);
  ASSERT_EQ(c.b.g->numNodes(), 1u);
  EXPECT_EQ(c.b.g->nodes()[0]->type(), "FusedConv");
  EXPECT_EQ(c.b.g->nodes()[0]->attrString("activation", ""), "Relu");
  EXPECT_TRUE(close(runGraph(*c.b.g, {c.in}, true)[0], before[0], 1e-4, 1e-4));
  EXPECT_TRUE(close(runGraph(*c.b.g, {c.in})[0], before[0], 1e-4, 1e-4));
}

// Concat(ins) along `axis` (channels by default).
ir::Tensor* concat(GraphBuilder& b, std::vector<ir::Tensor*> ins, int64_t axis = 1) {
  ir::Attributes a;
  a.set("axis", axis);
  return b.op("Concat", std::move(ins), a);
}

// A squeezenet fire module's end: two convolutions (1x1 and 3x3, 6 and 10 channels) concatenated
// along channels, read by a 1x1 convolution into 4 channels (then Relu), or by a 3x3 one with
// stride 2 and asymmetric padding (no bias): each becomes one Conv per Concat input, summed, and
// fuse-conv makes them FusedConvs with residual sums; the results stay.
// sum-of-pads-to-concat: the gradient of Slices that tile a tensor, each padded back to its shape
// and summed, is the Concat of the pieces in their order along the axis (bit for bit).
namespace {
ir::Tensor* zeroPad(GraphBuilder& b, ir::Tensor* t, std::vector<int64_t> pads, float value = 0.0f) {
  NDArray p(DataType::Int64, {static_cast<int64_t>(pads.size())});
  std::copy(pads.begin(), pads.end(), p.data<int64_t>());
  std::vector<ir::Tensor*> in{t, b.constant(p)};
  if (value != 0.0f) in.push_back(b.scalar(value));
  return b.op("Pad", in);
}
}  // namespace

TEST(SumOfPadsToConcat, PaddedPiecesThatTileAnAxisBecomeAConcat) {
  GraphBuilder b;
  // Three pieces of a [8, 3] along axis 0 in the order torch's gate reordering gives them:
  // rows 0-1, 6-7 and 2-5.
  ir::Tensor* a = b.input({2, 3});
  ir::Tensor* c = b.input({2, 3});
  ir::Tensor* d = b.input({4, 3});
  ir::Tensor* y = b.op("Sum", {zeroPad(b, a, {0, 0, 6, 0}), zeroPad(b, c, {6, 0, 0, 0}), zeroPad(b, d, {2, 0, 2, 0})});
  b.outputs({y});
  std::vector<NDArray> in{randomFloats({2, 3}, 1), randomFloats({2, 3}, 2), randomFloats({4, 3}, 3)};
  auto before = runGraph(*b.g, in, true);
  run(*b.g, {"sum-of-pads-to-concat", "dce"}, true);
  EXPECT_EQ(opCounts(*b.g)["Pad"], 0);
  EXPECT_EQ(opCounts(*b.g)["Sum"], 0);
  ASSERT_EQ(opCounts(*b.g)["Concat"], 1);
  for (const ir::Node* n : b.g->nodes())
    if (n->type() == "Concat") {
      EXPECT_EQ(n->attrInt("axis"), 0);
      EXPECT_EQ(n->inputs(), (std::vector<ir::Tensor*>{a, d, c}));
    }
  auto after = runGraph(*b.g, in, true);
  EXPECT_EQ(std::memcmp(after[0].rawData(), before[0].rawData(), sizeof(float) * 24), 0);
  EXPECT_TRUE(close(runGraph(*b.g, in)[0], before[0], 0, 0));
}

TEST(SumOfPadsToConcat, SumsThatAreNotATilingStay) {
  struct Case {
    const char* what;
    std::vector<int64_t> pa, pc;  // the pads of a [2, 3] and of a [2, 3] into a [4, 3] (or not)
    float value = 0.0f;
    bool extraReader = false;
  };
  for (const Case& k :
       {Case{"overlap", {0, 0, 2, 0}, {1, 0, 1, 0}}, Case{"gap", {0, 0, 3, 0}, {3, 0, 0, 0}},
        Case{"two axes", {0, 0, 2, 1}, {2, 1, 0, 0}}, Case{"padding value 1", {0, 0, 2, 0}, {2, 0, 0, 0}, 1.0f},
        Case{"a padded piece read elsewhere", {0, 0, 2, 0}, {2, 0, 0, 0}, 0.0f, true}}) {
    SCOPED_TRACE(k.what);
    GraphBuilder b;
    ir::Tensor* a = b.input({2, 3});
    ir::Tensor* c = b.input({2, 3});
    ir::Tensor* pa = zeroPad(b, a, k.pa, k.value);
    ir::Tensor* y = b.op("Sum", {pa, zeroPad(b, c, k.pc)});
    std::vector<ir::Tensor*> outs{y};
    if (k.extraReader) outs.push_back(b.op("Relu", {pa}));
    b.outputs(outs);
    run(*b.g, {"sum-of-pads-to-concat", "dce"}, true);
    EXPECT_EQ(opCounts(*b.g)["Sum"], 1);
    EXPECT_EQ(opCounts(*b.g)["Concat"], 0);
  }
}

TEST(SplitConcatConv, AConvOverAConcatBecomesOneConvPerInputSummed) {
  for (bool strided : {false, true}) {
    SCOPED_TRACE(strided ? "3x3 stride 2" : "1x1");
    GraphBuilder b;
    ir::Tensor* x = b.input({2, 5, 9, 9});
    auto conv = [&](ir::Tensor* in, int64_t m, int64_t c, int64_t k, uint64_t seed) {
      ir::Attributes a;
      a.set("pads", std::vector<int64_t>(4, k / 2));
      return b.op("Conv", {in, b.constant(randomFloats({m, c, k, k}, seed)), b.constant(randomFloats({m}, seed + 1))},
                  a);
    };
    ir::Tensor* e1 = b.op("Relu", {conv(x, 6, 5, 1, 31)});
    ir::Tensor* e3 = b.op("Relu", {conv(x, 10, 5, 3, 33)});
    ir::Tensor* cat = concat(b, {e1, e3});
    ir::Tensor* y;
    if (!strided) {
      y = b.op("Relu", {conv(cat, 4, 16, 1, 35)});
    } else {
      ir::Attributes a;
      a.set("pads", std::vector<int64_t>{0, 1, 1, 0});
      a.set("strides", std::vector<int64_t>{2, 2});
      y = b.op("Conv", {cat, b.constant(randomFloats({3, 16, 3, 3}, 37))}, a);
    }
    b.outputs({y});
    NDArray in = randomFloats({2, 5, 9, 9}, 39);
    auto before = runGraph(*b.g, {in}, true);
    run(*b.g, {"split-concat-conv", "dce"}, true);
    EXPECT_EQ(opCounts(*b.g)["Concat"], 0);
    EXPECT_EQ(opCounts(*b.g)["Conv"], 4);
    EXPECT_EQ(opCounts(*b.g)["Add"], 1);
    EXPECT_TRUE(close(runGraph(*b.g, {in}, true)[0], before[0], 1e-4, 1e-4));
    run(*b.g, {"fuse-conv", "dce"}, true);
    EXPECT_EQ(opCounts(*b.g)["Add"], 0);
    EXPECT_TRUE(close(runGraph(*b.g, {in}, true)[0], before[0], 1e-4, 1e-4));
    EXPECT_TRUE(close(runGraph(*b.g, {in})[0], before[0], 1e-4, 1e-4));
  }
}

// A MaxPool (3x3, stride 2, ceil_mode) between the Concat and the Conv moves above the Concat,
// one per input, and the Conv then splits: no Concat is left. An AveragePool whose output is the
// graph's moves too, and its Concat (of the pooled tensors) stays.
TEST(SplitConcatConv, PoolsBetweenTheConcatAndTheConvMoveAboveTheConcat) {
  for (bool average : {false, true}) {
    SCOPED_TRACE(average ? "AveragePool, graph output" : "MaxPool, then a Conv");
    GraphBuilder b;
    ir::Tensor* x1 = b.input({2, 6, 9, 9});
    ir::Tensor* x2 = b.input({2, 10, 9, 9});
    ir::Tensor* cat = concat(b, {x1, x2});
    ir::Attributes pa;
    pa.set("kernel_shape", std::vector<int64_t>{3, 3});
    pa.set("strides", std::vector<int64_t>{2, 2});
    pa.set("ceil_mode", int64_t{1});
    if (average) pa.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    ir::Tensor* pooled = b.op(average ? "AveragePool" : "MaxPool", {cat}, pa);
    ir::Tensor* y = pooled;
    if (!average)
      y = b.op("Conv", {pooled, b.constant(randomFloats({4, 16, 1, 1}, 43)), b.constant(randomFloats({4}, 44))});
    b.outputs({y});
    NDArray in1 = randomFloats({2, 6, 9, 9}, 45), in2 = randomFloats({2, 10, 9, 9}, 46);
    auto before = runGraph(*b.g, {in1, in2}, true);
    run(*b.g, {"split-concat-conv", "dce"}, true);
    EXPECT_EQ(opCounts(*b.g)[average ? "AveragePool" : "MaxPool"], 2);
    EXPECT_EQ(opCounts(*b.g)["Concat"], average ? 1 : 0);
    EXPECT_EQ(opCounts(*b.g)["Conv"], average ? 0 : 2);
    EXPECT_TRUE(close(runGraph(*b.g, {in1, in2}, true)[0], before[0], 1e-4, 1e-4));
    EXPECT_TRUE(close(runGraph(*b.g, {in1, in2})[0], before[0], 1e-4, 1e-4));
  }
}

// A Concat with an input from a convolution on oneDNN's Winograd kernel (forced on here; AVX-512
// hosts) stays, and so does the MaxPool after it: cpu-layout holds those in 16-channel blocks.
// Where oneDNN has no Winograd kernel (AVX2), the pass goes on as above.
TEST(SplitConcatConv, ConcatsOfWinogradConvolutionsStay) {
  backends::cpu::onednn::WinogradScope on(backends::cpu::onednn::WinogradMode::On);
  GraphBuilder b;
  ir::Tensor* x = b.input({1, 16, 14, 14});
  ir::Attributes a3;
  a3.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  ir::Tensor* c3 = b.op("Conv", {x, b.constant(randomFloats({16, 16, 3, 3}, 51))}, a3);
  ir::Tensor* e3 = b.op("Relu", {c3});  // as exported: the activation between the Conv and the Concat
  ir::Tensor* e1 = b.op("Conv", {x, b.constant(randomFloats({16, 16, 1, 1}, 52))});
  ir::Tensor* cat = concat(b, {e1, e3});
  ir::Attributes pa;
  pa.set("kernel_shape", std::vector<int64_t>{2, 2});
  pa.set("strides", std::vector<int64_t>{2, 2});
  ir::Tensor* pooled = b.op("MaxPool", {cat}, pa);
  b.outputs({b.op("Conv", {pooled, b.constant(randomFloats({4, 32, 1, 1}, 53))})});
  const bool winograd = backends::cpu::onednn::convWinogradBlock(*c3->producer()) != 0;
  SCOPED_TRACE(winograd ? "oneDNN has a Winograd kernel here" : "no Winograd kernel here");
  run(*b.g, {"split-concat-conv", "dce"}, true);
  EXPECT_EQ(opCounts(*b.g)["Concat"], winograd ? 1 : 0);
  EXPECT_EQ(opCounts(*b.g)["MaxPool"], winograd ? 1 : 2);
}

// Left alone: a Concat someone else reads too, a Concat along another axis, a grouped Conv, weights
// known only at run time, and a Conv whose output is larger than the Concat (the partial sums would
// cost more than the Concat saves).
TEST(SplitConcatConv, OtherReadersAxesGroupsAndLargeOutputsAreLeftAlone) {
  struct Case {
    const char* tag;
    int64_t axis, group, m;
    bool otherReader, constantWeights;
  };
  for (const Case& c : {Case{"other reader", 1, 1, 4, true, true}, Case{"axis 2", 2, 1, 4, false, true},
                        Case{"grouped", 1, 2, 4, false, true}, Case{"run-time weights", 1, 1, 4, false, false},
                        Case{"larger output", 1, 1, 64, false, true}}) {
    SCOPED_TRACE(c.tag);
    GraphBuilder b;
    ir::Tensor* x1 = b.input({1, 8, 6, 6});
    ir::Tensor* x2 = b.input({1, 8, 6, 6});
    ir::Tensor* cat = concat(b, {x1, x2}, c.axis);
    const int64_t C = c.axis == 1 ? 16 : 8;
    ir::Attributes a;
    a.set("group", c.group);
    ir::Tensor* w =
        c.constantWeights ? b.constant(randomFloats({c.m, C / c.group, 1, 1}, 41)) : b.input({c.m, C / c.group, 1, 1});
    std::vector<ir::Tensor*> outs{b.op("Conv", {cat, w}, a)};
    if (c.otherReader) outs.push_back(b.op("Relu", {cat}));
    b.outputs(outs);
    run(*b.g, {"split-concat-conv"}, true);
    EXPECT_EQ(opCounts(*b.g)["Concat"], 1);
    EXPECT_EQ(opCounts(*b.g)["Conv"], 1);
  }
}

TEST(FuseMatmul, MatMulBiasAndActivationBecomeFusedMatMul) {
  GraphBuilder b;
  ir::Tensor* x = b.input({4, 8});
  ir::Attributes alpha;
  alpha.set("alpha", 0.2f);
  ir::Tensor* y =
      b.op("Add", {b.op("MatMul", {x, b.constant(randomFloats({8, 5}, 31))}), b.constant(randomFloats({5}, 32))});
  b.outputs({b.op("LeakyRelu", {y}, alpha)});
  NDArray in = randomFloats({4, 8}, 33);
  auto before = runGraph(*b.g, {in}, true);
  run(*b.g, {"fuse-matmul", "dce"}, true);
  ASSERT_EQ(b.g->numNodes(), 1u);
  const ir::Node* n = b.g->nodes()[0];
  EXPECT_EQ(n->type(), "FusedMatMul");
  EXPECT_EQ(n->attrString("activation", ""), "LeakyRelu");
  EXPECT_FLOAT_EQ(n->attrFloat("activation_alpha", 0.f), 0.2f);
  EXPECT_TRUE(close(runGraph(*b.g, {in}, true)[0], before[0], 1e-5, 1e-5));
  EXPECT_TRUE(close(runGraph(*b.g, {in})[0], before[0], 1e-5, 1e-5));
}

TEST(CpuLayout, ConvOutputsStayChannelBlockedBetweenOneDnnOps) {
  // The direct convolution's layout (half-rate AVX-512 hosts would take this one on Winograd).
  backends::cpu::onednn::WinogradScope direct(backends::cpu::onednn::WinogradMode::Off);
  ConvGraph c(64, 64, 14);  // the convolution preferredChannelBlock() asks oneDNN about
  ir::Tensor* y = c.b.op("Relu", {c.conv()});
  ir::Attributes pool;
  pool.set("kernel_shape", std::vector<int64_t>{2, 2});
  pool.set("strides", std::vector<int64_t>{2, 2});
  c.b.outputs({c.b.op("MaxPool", {y}, pool)});
  auto before = runGraph(*c.b.g, {c.in}, true);
  run(*c.b.g, {"cpu-layout", "dce"}, true);
  auto ops = opCounts(*c.b.g);
  int layout = backends::cpu::onednn::activationLayout();
  if (layout == 0) {
    // oneDNN wants plain layouts on this CPU: the pass changes nothing.
    EXPECT_EQ(ops["FromBlocked"], 0);
  } else {
    EXPECT_EQ(ops["Conv"], 0);
    ASSERT_EQ(ops["FusedConv"], 1);
    for (const ir::Node* n : c.b.g->nodes()) {
      if (n->type() == "FusedConv") {
        EXPECT_EQ(n->attrInt("y_block", 0), backends::cpu::onednn::blockFor(layout, 64));
      }
    }
    EXPECT_EQ(ops["ChannelBlocked"], 1);  // the pool runs on blocked data
    EXPECT_EQ(ops["FromBlocked"], 1);     // one conversion, at the graph output
  }
  EXPECT_TRUE(close(runGraph(*c.b.g, {c.in})[0], before[0], 1e-4, 1e-4));
}

// A graph with a depthwise convolution runs channels last wherever the host's layout is not plain,
// also where oneDNN's convolutions pick 8-channel blocks (AVX2 hosts: the unit_tests_avx2 run);
// GRAFT_CPU_LAYOUT=blocked still forces the blocks.
TEST(CpuLayout, GraphsWithDepthwiseConvolutionsGoChannelsLast) {
  backends::cpu::onednn::WinogradScope direct(backends::cpu::onednn::WinogradMode::Off);
  if (backends::cpu::onednn::activationLayout() == 0) GTEST_SKIP() << "oneDNN wants plain layouts on this CPU";
  auto build = [](ConvGraph& c) {
    ir::Attributes dw;
    dw.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    dw.set("kernel_shape", std::vector<int64_t>{3, 3});
    dw.set("group", int64_t{64});
    ir::Tensor* y = c.b.op("Relu", {c.conv()});
    c.b.outputs(
        {c.b.op("Conv", {y, c.b.constant(randomFloats({64, 1, 3, 3}, 14)), c.b.constant(randomFloats({64}, 15))}, dw)});
  };
  auto blocks = [](const ir::Graph& g) {
    std::vector<int64_t> b;
    for (const ir::Node* n : g.nodes())
      if (n->type() == "FusedConv") b.push_back(n->attrInt("y_block", 0));
    return b;
  };
  ConvGraph c(64, 64, 14);
  build(c);
  auto before = runGraph(*c.b.g, {c.in}, true);
  run(*c.b.g, {"cpu-layout", "dce"}, true);
  EXPECT_EQ(blocks(*c.b.g), (std::vector<int64_t>{64, 64})) << ir::printGraph(*c.b.g);
  EXPECT_TRUE(close(runGraph(*c.b.g, {c.in})[0], before[0], 1e-4, 1e-4));

  setenv("GRAFT_CPU_LAYOUT", "blocked", 1);
  const int64_t forced = backends::cpu::onednn::activationLayout();
  ConvGraph d(64, 64, 14);
  build(d);
  run(*d.b.g, {"cpu-layout", "dce"}, true);
  unsetenv("GRAFT_CPU_LAYOUT");
  EXPECT_EQ(blocks(*d.b.g), (std::vector<int64_t>{forced, forced})) << ir::printGraph(*d.b.g);
}

// Channels-last (forced, as on AVX-512 hosts where oneDNN's brgemm convolutions pick NHWC): the
// blocked layout with block = the channel count, so the tensors are [N, 1, H, W, C].
TEST(CpuLayout, ChannelsLastIsTheBlockOfAllChannels) {
  backends::cpu::onednn::WinogradScope direct(backends::cpu::onednn::WinogradMode::Off);
  setenv("GRAFT_CPU_LAYOUT", "nhwc", 1);
  ConvGraph c(64, 48, 14);
  c.b.outputs({c.b.op("Relu", {c.conv()})});
  auto before = runGraph(*c.b.g, {c.in}, true);
  run(*c.b.g, {"cpu-layout", "dce"}, true);
  unsetenv("GRAFT_CPU_LAYOUT");
  auto ops = opCounts(*c.b.g);
  ASSERT_EQ(ops["FusedConv"], 1) << ir::printGraph(*c.b.g);
  for (const ir::Node* n : c.b.g->nodes())
    if (n->type() == "FusedConv") {
      EXPECT_EQ(n->attrInt("y_block", 0), 48);
      EXPECT_EQ(n->output(0)->info().shape(), (Shape{1, 1, 14, 14, 48}));
    }
  EXPECT_TRUE(close(runGraph(*c.b.g, {c.in})[0], before[0], 1e-4, 1e-4));
}

// A graph with a 3x3 convolution (64 -> 64 at 28x28) followed by a Relu and a 1x1 convolution,
// beside a 1x1 convolution of the same input (scheduled first); the two branches are added
// (the 3x3's branch first). Winograd takes the 3x3
// with GRAFT_CONV_WINOGRAD=on (its default rule wants 0.4 GFLOP: winograd_test.cpp runs one).
struct WinogradGraph {
  GraphBuilder b;
  ir::Tensor* x = b.input({1, 64, 56, 56});
  NDArray in = randomFloats({1, 64, 56, 56}, 41);
  ir::Tensor* conv(ir::Tensor* from, int64_t k, int64_t out, uint64_t seed) {
    ir::Attributes a;
    int64_t pad = k / 2, c = 64;
    a.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
    return b.op("Conv",
                {from, b.constant(randomFloats({out, c, k, k}, seed, -0.05f, 0.05f)),
                 b.constant(randomFloats({out}, seed + 1))},
                a);
  }
  WinogradGraph() {
    ir::Tensor* side = conv(x, 1, 64, 46);  // first: X's twin is channels last
    ir::Tensor* main = conv(b.op("Relu", {conv(x, 3, 64, 42)}), 1, 64, 44);
    b.outputs({b.op("Add", {main, side})});
  }
};

bool winogradHost() { return support::cpuFeatures().avx512f; }

// On AVX-512 hosts the Winograd convolution is marked for the kernel and reads and writes
// 16-channel blocks (X's channels-last twin converted: a Reblock); the 1x1 convolution after it
// keeps them; the Add converts its other operand to them (a second Reblock); the results are the
// reference's.
TEST(CpuLayout, WinogradConvolutionsAndWhatFollowsThemHoldSixteenChannelBlocks) {
  setenv("GRAFT_CPU_LAYOUT", "nhwc", 1);
  setenv("GRAFT_CONV_WINOGRAD", "on", 1);
  WinogradGraph w;
  auto before = runGraph(*w.b.g, {w.in}, true);
  run(*w.b.g, {"cpu-layout", "dce"}, true);
  unsetenv("GRAFT_CPU_LAYOUT");
  auto ops = opCounts(*w.b.g);
  ASSERT_EQ(ops["FusedConv"], 3) << ir::printGraph(*w.b.g);
  int marked = 0, in16 = 0;
  for (const ir::Node* n : w.b.g->nodes())
    if (n->type() == "FusedConv") {
      marked += n->attrInt("winograd", 0) == 1;
      in16 += n->attrInt("y_block", 0) == 16;
    }
  if (winogradHost()) {
    EXPECT_EQ(marked, 1) << ir::printGraph(*w.b.g);
    EXPECT_EQ(in16, 2) << ir::printGraph(*w.b.g);  // the Winograd convolution and the 1x1 after it
    EXPECT_EQ(ops["Reblock"], 2) << ir::printGraph(*w.b.g);
  } else {
    EXPECT_EQ(marked, 0) << "oneDNN has Winograd convolutions for AVX-512 only";
    EXPECT_EQ(ops["Reblock"], 0);
  }
  EXPECT_TRUE(close(runGraph(*w.b.g, {w.in})[0], before[0], 1e-4, 1e-4));
  unsetenv("GRAFT_CONV_WINOGRAD");
}

// Two squeezenet fire modules (squeeze 1x1 -> expand 1x1 beside expand 3x3 -> Concat), the
// first squeezing to 16 channels, the second to 32. With the 3x3s on Winograd (16-channel blocks),
// the 1x1 beside each writes those blocks too, so the Concats and the squeezes after them stay in
// them: no Reblock anywhere, one conversion in and one out. Results: the reference's.
TEST(CpuLayout, FireModulesAroundWinogradConvolutionsStayInSixteenChannelBlocks) {
  setenv("GRAFT_CPU_LAYOUT", "nhwc", 1);
  setenv("GRAFT_CONV_WINOGRAD", "on", 1);
  GraphBuilder b;
  ir::Tensor* x = b.input({2, 64, 28, 28});
  NDArray in = randomFloats({2, 64, 28, 28}, 51);
  uint64_t seed = 52;
  auto conv = [&](ir::Tensor* from, int64_t c, int64_t out, int64_t k) {
    ir::Attributes a;
    a.set("pads", std::vector<int64_t>(4, k / 2));
    seed += 2;
    return b.op("Relu", {b.op("Conv",
                              {from, b.constant(randomFloats({out, c, k, k}, seed, -0.1f, 0.1f)),
                               b.constant(randomFloats({out}, seed + 1))},
                              a)});
  };
  auto fire = [&](ir::Tensor* from, int64_t c, int64_t squeeze, int64_t expand) {
    ir::Tensor* s = conv(from, c, squeeze, 1);
    ir::Attributes axis;
    axis.set("axis", int64_t{1});
    return b.op("Concat", {conv(s, squeeze, expand, 1), conv(s, squeeze, expand, 3)}, axis);
  };
  b.outputs({fire(fire(x, 64, 16, 64), 128, 32, 64)});
  auto before = runGraph(*b.g, {in}, true);
  run(*b.g, {"fuse-conv", "cpu-layout", "dce"}, true);
  unsetenv("GRAFT_CONV_WINOGRAD");
  unsetenv("GRAFT_CPU_LAYOUT");
  auto ops = opCounts(*b.g);
  ASSERT_EQ(ops["FusedConv"], 6) << ir::printGraph(*b.g);
  if (winogradHost()) {
    int marked = 0;
    for (const ir::Node* n : b.g->nodes())
      if (n->type() == "FusedConv") {
        marked += n->attrInt("winograd", 0) == 1;
        EXPECT_EQ(n->attrInt("y_block", 0), 16) << n->describe();
      }
    EXPECT_EQ(marked, 2) << ir::printGraph(*b.g);
    EXPECT_EQ(ops["Reblock"], 0) << ir::printGraph(*b.g);
    EXPECT_EQ(ops["ToBlocked"], 1) << ir::printGraph(*b.g);
    EXPECT_EQ(ops["FromBlocked"], 1) << ir::printGraph(*b.g);
  } else {
    EXPECT_EQ(ops["Reblock"], 0) << "oneDNN has Winograd convolutions for AVX-512 only";
  }
  EXPECT_TRUE(close(runGraph(*b.g, {in})[0], before[0], 1e-4, 1e-4));
}

// The default rule (auto): a 3x3 convolution of 0.23 GFLOP (64 -> 64 at 56x56, batch 1) is left
// to the direct kernels on full-rate AVX-512 hosts; half-rate ones (Zen 4) take it
// (onednn::winogradGains).
TEST(CpuLayout, WinogradAutoTakesSmallConvolutionsOnHalfRateHostsOnly) {
  setenv("GRAFT_CPU_LAYOUT", "nhwc", 1);
  WinogradGraph w;
  run(*w.b.g, {"cpu-layout", "dce"}, true);
  unsetenv("GRAFT_CPU_LAYOUT");
  int marked = 0;
  for (const ir::Node* n : w.b.g->nodes()) marked += n->attrInt("winograd", 0) == 1;
  bool takes = winogradHost() && support::cpuFeatures().avx512HalfRate;
  EXPECT_EQ(marked, takes ? 1 : 0) << ir::printGraph(*w.b.g);
  EXPECT_EQ(opCounts(*w.b.g)["Reblock"], takes ? 2 : 0);
}

// GRAFT_CONV_WINOGRAD=off: no convolution is marked, nothing leaves the graph's layout.
TEST(CpuLayout, WinogradOffKeepsTheGraphsLayout) {
  setenv("GRAFT_CPU_LAYOUT", "nhwc", 1);
  setenv("GRAFT_CONV_WINOGRAD", "off", 1);
  WinogradGraph w;
  run(*w.b.g, {"cpu-layout", "dce"}, true);
  unsetenv("GRAFT_CONV_WINOGRAD");
  unsetenv("GRAFT_CPU_LAYOUT");
  for (const ir::Node* n : w.b.g->nodes()) EXPECT_EQ(n->attrInt("winograd", 0), 0) << n->describe();
  EXPECT_EQ(opCounts(*w.b.g)["Reblock"], 0);
}

// The bf16 backend's layout pass: the same layouts, no Winograd (its convolutions run bf16).
TEST(CpuLayoutBf16, MarksNoWinogradConvolutions) {
  setenv("GRAFT_CPU_LAYOUT", "nhwc", 1);
  setenv("GRAFT_CONV_WINOGRAD", "on", 1);
  WinogradGraph w;
  auto before = runGraph(*w.b.g, {w.in}, true);
  run(*w.b.g, {"cpu-layout-bf16", "dce"}, true);
  unsetenv("GRAFT_CPU_LAYOUT");
  auto ops = opCounts(*w.b.g);
  EXPECT_EQ(ops["FusedConv"], 3) << ir::printGraph(*w.b.g);
  EXPECT_EQ(ops["Reblock"], 0);
  for (const ir::Node* n : w.b.g->nodes()) {
    EXPECT_EQ(n->attrInt("winograd", 0), 0) << n->describe();
    if (n->type() == "FusedConv") {
      EXPECT_EQ(n->attrInt("y_block", 0), 64) << n->describe();
    }
  }
  unsetenv("GRAFT_CONV_WINOGRAD");
  EXPECT_TRUE(close(runGraph(*w.b.g, {w.in})[0], before[0], 1e-4, 1e-4));
}

TEST(CpuLayout, UnknownForcedLayoutIsAnErrorNamingTheVariable) {
  setenv("GRAFT_CPU_LAYOUT", "diagonal", 1);
  std::string msg;
  try {
    backends::cpu::onednn::activationLayout();
  } catch (const Error& e) {
    msg = e.what();
  }
  unsetenv("GRAFT_CPU_LAYOUT");
  EXPECT_NE(msg.find("GRAFT_CPU_LAYOUT: expected plain, blocked, nhwc or auto, got 'diagonal'"), std::string::npos)
      << msg;
}

// A training graph's LSTM (forward, X [T, N, I]) and the LSTMGrad its VJP builds, reading the
// forward's Y; outputs Y_h, dX, dW and dR.
struct LstmTrainingGraph {
  GraphBuilder b;
  ir::Node* lstm = nullptr;
  ir::Node* grad = nullptr;
  std::vector<NDArray> in;
  LstmTrainingGraph(int64_t N, bool recompute = false) {
    const int64_t T = 4, I = 5, H = 6;
    ir::Tensor* x = b.input({T, N, I});
    ir::Tensor* w = b.input({1, 4 * H, I});
    ir::Tensor* r = b.input({1, 4 * H, H});
    ir::Tensor* dy = b.input({T, 1, N, H});
    in = {randomFloats({T, N, I}, 1), randomFloats({1, 4 * H, I}, 2, -0.5f, 0.5f),
          randomFloats({1, 4 * H, H}, 3, -0.5f, 0.5f), randomFloats({T, 1, N, H}, 4)};
    ir::Attributes a;
    a.set("hidden_size", H);
    lstm = b.g->addNode("LSTM", "", {x, w, r}, {"y", "y_h"}, a, "lstm");
    lstm->recompute = recompute;
    b.g->otherOpsets[ops::kGraftDomain] = 1;
    std::vector<ir::Tensor*> gin{dy,      nullptr, nullptr, x,       w,       r,
                                 nullptr, nullptr, nullptr, nullptr, nullptr, lstm->output(0)};
    grad = b.g->addNode("LSTMGrad", ops::kGraftDomain, gin, {"dx", "dw", "dr"}, a, "lstm_grad");
    b.outputs({lstm->output(1), grad->output(0), grad->output(1), grad->output(2)});
  }
};

TEST(LstmSaveGates, TheGradientReadsTheForwardsGatesAndTheResultsStay) {
  LstmTrainingGraph t(8);
  auto before = runGraph(*t.b.g, t.in, true);
  run(*t.b.g, {"lstm-save-gates", "dce"});
  auto ops = opCounts(*t.b.g);
  EXPECT_EQ(ops["LSTM"], 0);
  ASSERT_EQ(ops["LSTMTrain"], 1) << ir::printGraph(*t.b.g);
  const ir::Node* train = t.grad->input(11)->producer();
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->type(), "LSTMTrain");
  EXPECT_EQ(train->name(), "lstm");
  ASSERT_EQ(t.grad->numInputs(), 13u);
  EXPECT_EQ(t.grad->input(12), train->output(3));
  EXPECT_EQ(train->output(3)->info().shape(), (Shape{1, 4, 8, 30}));  // [D, T, N, 5H]
  auto cpu = backends::makeCpuBackend(2);
  support::ThreadPool pool(cpu->numThreads());
  auto exe = plan::compile(*t.b.g, *cpu, pool);
  std::vector<ops::Value> values;
  for (const NDArray& a : t.in) values.push_back(ops::Value::fromTensor(a.clone()));
  auto after = exe->run(std::move(values));
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(close(after[i].tensor, before[i], 1e-4, 1e-5)) << "output " << i;
  // Both run graft's kernels (not the reference, not oneDNN's backward).
  std::map<std::string, std::string> kernels;
  for (const auto& k : exe->stepKernels()) kernels[k.opType] = k.kernel;
  EXPECT_EQ(kernels["LSTMTrain"], "vec_lstm_train");
  EXPECT_EQ(kernels["LSTMGrad"], "vec_lstm_grad");
}

TEST(LstmSaveGates, SmallBatchesAndRecomputedLstmsAreLeftAlone) {
  for (bool recompute : {false, true}) {
    LstmTrainingGraph t(recompute ? 8 : 2, recompute);
    PassContext ctx;
    EXPECT_FALSE(createPass("lstm-save-gates")->run(*t.b.g, ctx)) << (recompute ? "recompute" : "batch 2");
    EXPECT_EQ(opCounts(*t.b.g)["LSTM"], 1);
    EXPECT_EQ(t.grad->numInputs(), 12u);
  }
}

// A residual block's training graph: Conv -> BatchNormalization (training mode) -> Relu -> Conv
// -> BatchNormalization -> + x -> Relu, a weighted sum as loss, and the gradients of X, both
// weights and the first BatchNormalization's scale and bias (autodiff, as sessions build them).
struct ResidualTrainingGraph {
  GraphBuilder b;
  std::vector<NDArray> in;
  explicit ResidualTrainingGraph(int64_t N = 2, int64_t C = 32, int64_t S = 10) {
    ir::Tensor* x = b.input({N, C, S, S});
    ir::Tensor* w1 = b.input({C, C, 3, 3});
    ir::Tensor* w2 = b.input({C, C, 3, 3});
    ir::Tensor* scale = b.input({C});
    ir::Tensor* bias = b.input({C});
    in = {randomFloats({N, C, S, S}, 1), randomFloats({C, C, 3, 3}, 2, -0.2f, 0.2f),
          randomFloats({C, C, 3, 3}, 3, -0.2f, 0.2f), randomFloats({C}, 4, 0.5f, 1.5f), randomFloats({C}, 5)};
    ir::Attributes conv;
    conv.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    conv.set("kernel_shape", std::vector<int64_t>{3, 3});
    auto bn = [&](ir::Tensor* t, ir::Tensor* sc, ir::Tensor* sh) {
      ir::Attributes a;
      a.set("training_mode", int64_t{1});
      a.set("momentum", 0.f);
      std::string id = "bn" + std::to_string(b.next++);
      ir::Node* n =
          b.g->addNode("BatchNormalization", "",
                       {t, sc, sh, b.constant(randomFloats({C}, 6)), b.constant(randomFloats({C}, 7, 0.5f, 2))},
                       {id, id + "_mean", id + "_var"}, a);
      return n->output(0);
    };
    ir::Tensor* h = b.op("Relu", {bn(b.op("Conv", {x, w1}, conv), scale, bias)});
    ir::Tensor* y =
        bn(b.op("Conv", {h, w2}, conv), b.constant(randomFloats({C}, 8, 0.5f, 1.5f)), b.constant(randomFloats({C}, 9)));
    y = b.op("Relu", {b.op("Add", {y, x})});
    ir::Attributes sum;
    sum.set("reduction", std::string("Sum"));
    ir::Tensor* loss =
        b.op("IdentityLoss", {b.op("Mul", {y, b.constant(randomFloats({N, C, S, S}, 10))})}, sum, "ai.graphcore");
    b.outputs({loss});
    ir::Tensor* seed = b.constant(NDArray::scalar<float>(DataType::Float, 1.f));
    auto grads = autodiff::differentiate(*b.g, loss, {x, w1, w2, scale, bias}, seed);
    std::vector<ir::Tensor*> outs{loss};
    for (ir::Tensor* t : {x, w1, w2, scale, bias}) outs.push_back(grads.at(t));
    b.outputs(outs);
  }
};

// Forced channels last (the layout of AVX-512 hosts), the training graph's convolutions, batch
// norms, their gradients and the activation gradients between them run on [N, 1, H, W, C]
// arrays; the results equal the reference's, and a step runs fewer reorders than without it.
TEST(CpuLayoutTraining, TheBackwardPassStaysChannelsLastAndTheResultsStay) {
  ResidualTrainingGraph t;
  auto want = runGraph(*t.b.g, t.in, true);
  auto plain = ir::cloneGraph(*t.b.g);
  run(*plain, {"cse", "fuse-elementwise", "dce"});
  setenv("GRAFT_CPU_LAYOUT", "nhwc", 1);
  run(*t.b.g, {"cse", "cpu-layout-training", "fuse-elementwise", "dce"});
  unsetenv("GRAFT_CPU_LAYOUT");
  auto ops = opCounts(*t.b.g);
  EXPECT_EQ(ops["Conv"], 0) << ir::printGraph(*t.b.g);
  EXPECT_EQ(ops["FusedConv"], 2);
  EXPECT_EQ(ops["BatchNormalization"], 0);
  EXPECT_EQ(ops["BatchNormalizationGrad"], 0);
  std::map<std::string, int> wrapped;
  for (const ir::Node* n : t.b.g->nodes())
    if (n->type() == "ChannelBlocked") ++wrapped[n->attrString("op")];
  EXPECT_EQ(wrapped["BatchNormalization"], 2);
  EXPECT_EQ(wrapped["BatchNormalizationGrad"], 2);
  // The first conv's dX is X's gradient; the second's feeds the first block's backward.
  EXPECT_EQ(wrapped["ConvGradInput"] + ops["ConvGradInput"], 2);
  EXPECT_EQ(wrapped["ConvGradWeight"] + ops["ConvGradWeight"], 2);
  // oneDNN has channels-last backward kernels on AVX2 and AVX-512 hosts: every gradient conv is blocked.
  bool fast = support::cpuFeatures().avx2;
  if (fast) {
    EXPECT_EQ(wrapped["ConvGradInput"], 2);
    EXPECT_EQ(wrapped["ConvGradWeight"], 2);
  }
  for (const ir::Node* n : t.b.g->nodes()) {
    if (n->type() == "ChannelBlocked" && n->attrString("op") == "BatchNormalizationGrad") {
      EXPECT_EQ(n->input(0)->info().shape(), (Shape{2, 1, 10, 10, 32}));
    }
  }
  // The reference kernels of the rewritten graph, then the cpu backend's.
  for (bool reference : {true, false}) {
    SCOPED_TRACE(reference ? "reference" : "cpu");
    backends::cpu::resetReorderStats();
    auto got = runGraph(*t.b.g, t.in, reference);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(close(got[i], want[i], 2e-4, 2e-4)) << "output " << i;
  }
  backends::cpu::resetReorderStats();
  runGraph(*t.b.g, t.in);
  int64_t blocked = backends::cpu::reorderStats().count;
  backends::cpu::resetReorderStats();
  runGraph(*plain, t.in);
  int64_t before = backends::cpu::reorderStats().count;
  if (fast) {
    EXPECT_LT(blocked, before);
  }
  // The kernels: graft's channels-last batch norms, oneDNN's backward convolutions.
  auto cpu = backends::makeCpuBackend(2);
  support::ThreadPool pool(cpu->numThreads());
  auto exe = plan::compile(*t.b.g, *cpu, pool);
  std::set<std::string> kernels;
  for (const auto& k : exe->stepKernels()) kernels.insert(k.kernel);
  EXPECT_TRUE(kernels.count("vec_batchnorm_train_nhwc")) << ::testing::PrintToString(kernels);
  EXPECT_TRUE(kernels.count("vec_batchnorm_grad_nhwc")) << ::testing::PrintToString(kernels);
  if (fast) {
    EXPECT_TRUE(kernels.count("onednn_conv_bwd_data"));
    EXPECT_TRUE(kernels.count("onednn_conv_bwd_weights"));
  }
}

// SqueezeNet's fire module in training: a squeeze convolution, two expand convolutions whose
// outputs are concatenated, a global average pool and a weighted sum as loss; the gradients of
// X and every weight (autodiff, as sessions build them). The pooled output is flattened, as
// SqueezeNet's is.
struct FireTrainingGraph {
  GraphBuilder b;
  std::vector<NDArray> in;
  explicit FireTrainingGraph(int64_t N = 2, int64_t C = 16, int64_t S = 9) {
    ir::Tensor* x = b.input({N, C, S, S});
    ir::Tensor* ws = b.input({8, C, 1, 1});
    ir::Tensor* w1 = b.input({12, 8, 1, 1});
    ir::Tensor* w3 = b.input({20, 8, 3, 3});
    in = {randomFloats({N, C, S, S}, 1), randomFloats({8, C, 1, 1}, 2, -0.3f, 0.3f),
          randomFloats({12, 8, 1, 1}, 3, -0.3f, 0.3f), randomFloats({20, 8, 3, 3}, 4, -0.2f, 0.2f)};
    ir::Attributes pad;
    pad.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    ir::Tensor* s = b.op("Relu", {b.op("Conv", {x, ws})});
    ir::Tensor* e1 = b.op("Relu", {b.op("Conv", {s, w1})});
    ir::Tensor* e3 = b.op("Relu", {b.op("Conv", {s, w3}, pad)});
    ir::Attributes axis;
    axis.set("axis", int64_t{1});
    ir::Tensor* pooled = b.op("GlobalAveragePool", {b.op("Concat", {e1, e3}, axis)});
    ir::Attributes sum;
    sum.set("reduction", std::string("Sum"));
    ir::Tensor* loss =
        b.op("IdentityLoss", {b.op("Mul", {b.op("Flatten", {pooled}), b.constant(randomFloats({N, 32}, 5))})}, sum,
             "ai.graphcore");
    b.outputs({loss});
    ir::Tensor* seed = b.constant(NDArray::scalar<float>(DataType::Float, 1.f));
    auto grads = autodiff::differentiate(*b.g, loss, {x, ws, w1, w3}, seed);
    std::vector<ir::Tensor*> outs{loss};
    for (ir::Tensor* t : {x, ws, w1, w3}) outs.push_back(grads.at(t));
    b.outputs(outs);
  }
};

// Channels last forced: the Concat's gradient (a Split along channels), the pool's gradient (an
// Expand over the spatial axes) and so the Relu gradients' zeros stay channels last; the only
// conversions left are X's, the pooled output's and X's gradient's; the results stay the
// reference's.
TEST(CpuLayoutTraining, SplitExpandAndZerosOfTheBackwardPassStayChannelsLast) {
  FireTrainingGraph t;
  auto want = runGraph(*t.b.g, t.in, true);
  setenv("GRAFT_CPU_LAYOUT", "nhwc", 1);
  run(*t.b.g, {"cse", "cpu-layout-training", "dce", "fuse-elementwise", "dce"});
  unsetenv("GRAFT_CPU_LAYOUT");
  auto ops = opCounts(*t.b.g);
  EXPECT_EQ(ops["ToBlocked"], 1) << ir::printGraph(*t.b.g);
  EXPECT_EQ(ops["FromBlocked"], 2) << ir::printGraph(*t.b.g);
  EXPECT_EQ(ops["Split"], 1);
  for (const ir::Node* n : t.b.g->nodes()) {
    if (n->type() == "Split" || n->type() == "Expand" || n->type() == "ZerosLike") {
      EXPECT_EQ(n->output(0)->info().rank(), 5) << n->type() << " stays plain:\n" << ir::printGraph(*t.b.g);
    }
  }
  for (bool reference : {true, false}) {
    SCOPED_TRACE(reference ? "reference" : "cpu");
    auto got = runGraph(*t.b.g, t.in, reference);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(close(got[i], want[i], 2e-4, 2e-4)) << "output " << i;
  }
}

// fuse-sgd-outer: an SGDUpdate of a batch-1 weight gradient (a Gemm with K = 1) becomes one
// SGDOuterUpdate of the Gemm's operands, which takes the update's place (control dependencies
// included); other gradients keep their SGDUpdate.
struct SgdOuterGraph {
  GraphBuilder b;
  ir::Node* update = nullptr;
  ir::Node* before = nullptr;  // runs before the update (a control dependency)
  // K: the Gemm's inner size; transA: a is [K, I] read transposed; alpha; gradOut: the gradient
  // is also a graph output; momentum: with a velocity.
  // named: the gradient reaches the update through an Identity (as sessions name gradients).
  explicit SgdOuterGraph(int64_t K = 1, bool transA = false, float alpha = 1.f, bool gradOut = false,
                         bool momentum = false, bool named = false) {
    ir::Tensor* w = b.input({4, 5});
    ir::Tensor* a = b.input(transA ? Shape{K, 4} : Shape{4, K});
    ir::Tensor* x = b.input({K, 5});
    ir::Attributes ga;
    ga.set("transA", int64_t{transA});
    ga.set("alpha", alpha);
    ir::Tensor* grad = b.op("Gemm", {a, x}, ga);
    ir::Tensor* other = b.op("Relu", {x});
    before = other->producer();
    std::vector<ir::Tensor*> in{w, named ? b.op("Identity", {grad}) : grad};
    for (float v : {0.1f, 0.01f, momentum ? 0.9f : 0.f, 0.f, 1.f, 1.f}) in.push_back(b.scalar(v));
    if (momentum) in.push_back(b.input({4, 5}));
    b.g->otherOpsets[ops::kGraftDomain] = 1;
    ir::Attributes ua;
    ua.set("nesterov", int64_t{0});
    update = b.g->addNode("SGDUpdate", ops::kGraftDomain, in, {}, ua, "update_w");
    update->addRunsAfter(before);
    std::vector<ir::Tensor*> outs{other};
    if (gradOut) outs.push_back(grad);
    b.outputs(outs);
  }
};

TEST(FuseSgdOuter, Batch1WeightGradientsAreFormedByTheUpdate) {
  for (bool transA : {false, true})
    for (bool momentum : {false, true})
      for (bool named : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "transA " << transA << " momentum " << momentum << " named " << named);
        SgdOuterGraph t(1, transA, 1.f, false, momentum, named);
        ir::Node* gemm = t.update->input(1)->producer();
        if (named) gemm = gemm->input(0)->producer();
        ir::Tensor* a = gemm->input(0);
        ir::Tensor* x = gemm->input(1);
        PassContext ctx;
        EXPECT_TRUE(createPass("fuse-sgd-outer")->run(*t.b.g, ctx));
        auto ops = opCounts(*t.b.g);
        EXPECT_EQ(ops["Gemm"], 0) << ir::printGraph(*t.b.g);
        EXPECT_EQ(ops["Identity"], 0);
        EXPECT_EQ(ops["SGDUpdate"], 0);
        ASSERT_EQ(ops["SGDOuterUpdate"], 1);
        for (const ir::Node* n : t.b.g->nodes()) {
          if (n->type() != "SGDOuterUpdate") continue;
          EXPECT_EQ(n->name(), "update_w");
          EXPECT_EQ(n->input(1), a);
          EXPECT_EQ(n->input(2), x);
          EXPECT_EQ(n->numInputs(), momentum ? 10u : 9u);
          ASSERT_EQ(n->runsAfter().size(), 1u);
          EXPECT_EQ(n->runsAfter()[0], t.before);
        }
        ir::verifyGraph(*t.b.g);
      }
  // A gradient over more than one row, scaled, or read by someone else stays.
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    SgdOuterGraph t(variant == 0 ? 2 : 1, false, variant == 1 ? 0.5f : 1.f, variant == 2);
    PassContext ctx;
    EXPECT_FALSE(createPass("fuse-sgd-outer")->run(*t.b.g, ctx));
    EXPECT_EQ(opCounts(*t.b.g)["SGDUpdate"], 1);
  }
}

// Where inference keeps channel blocks (AVX2 hosts: nChw8c), training graphs still go channels
// last: the block of all channels has no padding channels for the backward pass to keep zero.
TEST(CpuLayoutTraining, TrainingIsChannelsLastWhereverInferenceIsBlocked) {
  setenv("GRAFT_CPU_LAYOUT", "auto", 1);
  int inference = backends::cpu::onednn::activationLayout(), training = backends::cpu::onednn::trainingLayout();
  unsetenv("GRAFT_CPU_LAYOUT");
  if (inference == 0)
    EXPECT_EQ(training, 0);
  else
    EXPECT_EQ(training, backends::cpu::onednn::kChannelsLast) << "inference layout " << inference;
  setenv("GRAFT_CPU_LAYOUT", "plain", 1);
  EXPECT_EQ(backends::cpu::onednn::trainingLayout(), 0);
  setenv("GRAFT_CPU_LAYOUT", "nhwc", 1);
  EXPECT_EQ(backends::cpu::onednn::trainingLayout(), backends::cpu::onednn::kChannelsLast);
  unsetenv("GRAFT_CPU_LAYOUT");
}

// GRAFT_CPU_LAYOUT=blocked (channel blocks forced) leaves training graphs plain.
TEST(CpuLayoutTraining, ChannelBlocksOtherThanChannelsLastAreLeftAlone) {
  ResidualTrainingGraph t;
  setenv("GRAFT_CPU_LAYOUT", "blocked", 1);
  PassContext ctx;
  bool changed = createPass("cpu-layout-training")->run(*t.b.g, ctx);
  unsetenv("GRAFT_CPU_LAYOUT");
  EXPECT_FALSE(changed);
  EXPECT_EQ(opCounts(*t.b.g)["ChannelBlocked"], 0);
}

}  // namespace
}  // namespace graft::passes::testing
