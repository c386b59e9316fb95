// Gradients (VJPs) of src/ops/conv.cpp against central finite differences in float64: input,
// weight and bias gradients of Conv and ConvTranspose over pads, strides, dilations, groups,
// auto_pad modes, output_padding and output_shape, in 1-D, 2-D and 3-D; and the ai.graft gradient
// ops Conv's VJP emits (ConvGradInput, ConvGradWeight) against hand-computed values and as
// adjoints of the forward reference Conv.
#include <map>

#include "op_test_util.hpp"
#include "ops/grad.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"
#include "support/thread_pool.hpp"

namespace graft::testing {
namespace {

using Ints = std::vector<int64_t>;

NDArray rnd(Shape s, uint64_t seed) { return randomArray(DataType::Double, std::move(s), seed); }

OpCase conv(Shape xs, Shape ws, bool bias, ir::Attributes a, const std::string& type = "Conv") {
  const ir::AttrValue* grp = a.find("group");
  int64_t m = type == "Conv" ? ws[0] : ws[1] * (grp ? std::get<int64_t>(*grp) : 1);
  std::vector<NDArray> in = {rnd(xs, 1), rnd(ws, 2)};
  if (bias) in.push_back(rnd({m}, 3));
  return {type, in, std::move(a)};
}

::testing::AssertionResult check(const OpCase& c) {
  std::vector<int> wrt = {0, 1};
  if (c.inputs.size() > 2) wrt.push_back(2);
  return gradCheck(c, wrt);
}

TEST(Conv, GradientPlain) {
  EXPECT_TRUE(check(conv({2, 3, 5, 5}, {4, 3, 3, 3}, true, {})));
  EXPECT_TRUE(check(conv({2, 3, 5, 4}, {2, 3, 2, 3}, false, attrs({{"pads", Ints{1, 0, 1, 2}}}))));
}

TEST(Conv, GradientStridesAndRowsNoWindowReaches) {
  // 6 rows, kernel 3, stride 2: the last row is never read (its gradient is 0).
  EXPECT_TRUE(check(conv({2, 2, 6, 7}, {3, 2, 3, 3}, true, attrs({{"strides", Ints{2, 2}}}))));
  EXPECT_TRUE(
      check(conv({1, 2, 7, 8}, {2, 2, 3, 2}, true, attrs({{"strides", Ints{3, 2}}, {"pads", Ints{1, 0, 0, 1}}}))));
}

TEST(Conv, GradientDilations) {
  EXPECT_TRUE(check(conv({2, 2, 7, 6}, {3, 2, 2, 3}, true, attrs({{"dilations", Ints{2, 1}}}))));
  EXPECT_TRUE(check(conv({1, 2, 9, 9}, {2, 2, 3, 2}, false,
                         attrs({{"dilations", Ints{2, 3}}, {"strides", Ints{2, 1}}, {"pads", Ints{1, 2, 0, 1}}}))));
}

TEST(Conv, GradientGroups) {
  EXPECT_TRUE(
      check(conv({2, 4, 5, 5}, {6, 2, 3, 3}, true, attrs({{"group", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}}))));
  // Depthwise, strided.
  EXPECT_TRUE(check(conv({2, 3, 6, 5}, {3, 1, 3, 3}, true, attrs({{"group", int64_t{3}}, {"strides", Ints{2, 2}}}))));
  // Channel multiplier 2 with dilation.
  EXPECT_TRUE(
      check(conv({1, 2, 6, 6}, {4, 1, 2, 2}, false, attrs({{"group", int64_t{2}}, {"dilations", Ints{2, 2}}}))));
}

TEST(Conv, GradientAutoPad) {
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER", "VALID"})
    for (int64_t s : {1, 2}) {
      OpCase c =
          conv({2, 2, 5, 6}, {3, 2, 3, 2}, true, attrs({{"auto_pad", std::string(mode)}, {"strides", Ints{s, s}}}));
      EXPECT_TRUE(check(c)) << mode << " stride " << s;
    }
}

TEST(Conv, Gradient1DAnd3D) {
  EXPECT_TRUE(check(conv({2, 3, 9}, {2, 3, 3}, true, attrs({{"strides", Ints{2}}, {"pads", Ints{2, 1}}}))));
  EXPECT_TRUE(check(conv({1, 2, 4, 5, 4}, {2, 2, 2, 3, 2}, true,
                         attrs({{"strides", Ints{1, 2, 1}}, {"pads", Ints{1, 0, 0, 0, 1, 1}}}))));
}

TEST(ConvTranspose, GradientPlain) {
  EXPECT_TRUE(check(conv({2, 3, 3, 4}, {3, 2, 3, 3}, true, {}, "ConvTranspose")));
  EXPECT_TRUE(check(conv({1, 2, 4, 3}, {2, 3, 2, 3}, false, attrs({{"pads", Ints{1, 0, 0, 2}}}), "ConvTranspose")));
}

TEST(ConvTranspose, GradientStridesOutputPaddingDilations) {
  EXPECT_TRUE(check(conv({2, 2, 3, 3}, {2, 3, 3, 3}, true,
                         attrs({{"strides", Ints{2, 2}}, {"output_padding", Ints{1, 0}}, {"pads", Ints{1, 1, 0, 1}}}),
                         "ConvTranspose")));
  // output_padding at least the stride: rows of Y that no input position writes.
  EXPECT_TRUE(check(conv({1, 2, 3, 2}, {2, 2, 2, 2}, false,
                         attrs({{"strides", Ints{2, 1}}, {"output_padding", Ints{3, 1}}}), "ConvTranspose")));
  EXPECT_TRUE(check(conv({1, 2, 3, 3}, {2, 2, 2, 3}, true, attrs({{"strides", Ints{2, 3}}, {"dilations", Ints{2, 2}}}),
                         "ConvTranspose")));
}

TEST(ConvTranspose, GradientGroups) {
  EXPECT_TRUE(check(conv({2, 4, 3, 3}, {4, 3, 2, 2}, true, attrs({{"group", int64_t{2}}, {"strides", Ints{2, 2}}}),
                         "ConvTranspose")));
  EXPECT_TRUE(check(conv({1, 3, 4, 3}, {3, 1, 3, 3}, false, attrs({{"group", int64_t{3}}, {"pads", Ints{1, 1, 1, 1}}}),
                         "ConvTranspose")));
}

TEST(ConvTranspose, GradientAutoPadAndOutputShape) {
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    OpCase c = conv({1, 2, 3, 4}, {2, 2, 3, 2}, true, attrs({{"auto_pad", std::string(mode)}, {"strides", Ints{2, 2}}}),
                    "ConvTranspose");
    EXPECT_TRUE(check(c)) << mode;
  }
  // output_shape larger than the input covers (negative total padding) and smaller.
  EXPECT_TRUE(check(conv({1, 2, 3, 3}, {2, 2, 2, 2}, true,
                         attrs({{"output_shape", Ints{9, 5}}, {"strides", Ints{2, 2}}}), "ConvTranspose")));
  EXPECT_TRUE(check(
      conv({1, 2, 3, 3}, {2, 2, 3, 3}, true,
           attrs({{"output_shape", Ints{4, 6}}, {"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}}),
           "ConvTranspose")));
}

TEST(ConvTranspose, Gradient1DAnd3D) {
  EXPECT_TRUE(
      check(conv({2, 2, 4}, {2, 3, 3}, true, attrs({{"strides", Ints{3}}, {"pads", Ints{1, 2}}}), "ConvTranspose")));
  EXPECT_TRUE(
      check(conv({1, 2, 2, 3, 2}, {2, 2, 2, 2, 2}, true, attrs({{"strides", Ints{2, 1, 2}}}), "ConvTranspose")));
}

// The VJP graph of a float Conv/ConvTranspose (inputs fed at run time) on a backend: the
// gradients of X, W and B for a random dY.
std::vector<NDArray> gradientsOn(const OpCase& c, backends::Backend& backend) {
  auto g = singleNodeGraph(c, std::vector<bool>(c.inputs.size(), false));
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  ir::Node* n = g->nodes()[0];
  ir::Tensor* dy = g->addTensor("dy", n->output(0)->type(), ir::TensorKind::Input);
  g->addInput(dy);
  ops::GradBuilder gb(*g, *n, {dy}, std::vector<bool>(c.inputs.size(), true));
  ops::Registry::instance().find(*n)->vjp(gb);
  g->setOutputs(gb.dxs());
  Shape ys = n->output(0)->info().shape();
  passes::runPipeline(*g, {"infer-shapes", "dce"}, ctx);  // removes the forward node
  support::ThreadPool pool(backend.numThreads());
  auto exe = plan::compile(*g, backend, pool);
  std::vector<ops::Value> in;
  for (const auto& a : c.inputs) in.push_back(ops::Value::fromTensor(a));
  in.push_back(ops::Value::fromTensor(randomArray(DataType::Float, ys, 7)));
  std::vector<NDArray> res;
  for (auto& v : exe->run(std::move(in))) res.push_back(v.tensor);
  return res;
}

::testing::AssertionResult cpuMatchesReference(OpCase c) {
  for (size_t i = 0; i < c.inputs.size(); ++i) c.inputs[i] = randomArray(DataType::Float, c.inputs[i].shape(), 20 + i);
  auto cpu = backends::makeCpuBackend(2);
  auto ref = backends::makeReferenceBackend();
  auto got = gradientsOn(c, *cpu), want = gradientsOn(c, *ref);
  for (size_t i = 0; i < want.size(); ++i) {
    auto r = allClose(got[i], want[i], 1e-4, 1e-4);
    if (!r) return r << " (gradient of input " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

// The backward convolutions (dX as ConvTranspose, dW as a Conv with a large kernel, swapped
// strides and dilations, grouped) through the cpu backend's oneDNN kernels.
TEST(Conv, GradientOnCpuBackendMatchesReference) {
  EXPECT_TRUE(cpuMatchesReference(conv({4, 8, 12, 12}, {16, 8, 3, 3}, true, attrs({{"pads", Ints{1, 1, 1, 1}}}))));
  EXPECT_TRUE(
      cpuMatchesReference(conv({2, 8, 13, 11}, {8, 4, 3, 3}, true,
                               attrs({{"strides", Ints{2, 2}}, {"group", int64_t{2}}, {"pads", Ints{1, 0, 0, 1}}}))));
  EXPECT_TRUE(cpuMatchesReference(
      conv({2, 6, 12, 12}, {6, 1, 3, 3}, false, attrs({{"group", int64_t{6}}, {"dilations", Ints{2, 2}}}))));
  EXPECT_TRUE(cpuMatchesReference(
      conv({2, 4, 16}, {8, 4, 5}, true, attrs({{"auto_pad", std::string("SAME_LOWER")}, {"strides", Ints{3}}}))));
}

TEST(ConvTranspose, GradientOnCpuBackendMatchesReference) {
  EXPECT_TRUE(cpuMatchesReference(conv(
      {2, 8, 6, 6}, {8, 4, 3, 3}, true,
      attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"output_padding", Ints{1, 1}}}), "ConvTranspose")));
  EXPECT_TRUE(cpuMatchesReference(conv({2, 4, 5, 7}, {4, 2, 3, 2}, false,
                                       attrs({{"group", int64_t{2}}, {"dilations", Ints{2, 1}}}), "ConvTranspose")));
}

// The gradients of c (inputs X, W, B) for dY with X's and dY's batch dimension symbolic in the
// graph: the VJP must build nothing that depends on N (its reshapes copy it).
::testing::AssertionResult symbolicBatchMatchesStatic(const OpCase& c, const NDArray& dy) {
  std::vector<NDArray> want = vjpOf(c, {0, 1, 2}, {dy});
  ir::Graph g("symbolic");
  auto input = [&](const std::string& id, const Shape& s, bool symbolic) {
    std::vector<Dim> dims(s.begin(), s.end());
    if (symbolic) dims[0] = Dim("N");
    ir::Tensor* t =
        g.addTensor(id, ir::ValueType::tensor(TensorInfo(DataType::Double, std::move(dims))), ir::TensorKind::Input);
    g.addInput(t);
    return t;
  };
  ir::Tensor* x = input("x", c.inputs[0].shape(), true);
  ir::Tensor* w = input("w", c.inputs[1].shape(), false);
  ir::Tensor* b = input("b", c.inputs[2].shape(), false);
  ir::Tensor* dyt = input("dy", dy.shape(), true);
  ir::Node* n = g.addNode(c.type, "", {x, w, b}, {"y"}, c.attrs);
  ops::inferNode(*n, false);
  ops::GradBuilder gb(g, *n, {dyt}, {true, true, true});
  ops::Registry::instance().find(*n)->vjp(gb);
  g.setOutputs(gb.dxs());
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes", "dce"}, ctx);
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  auto exe = plan::compile(g, *backend, pool);
  std::vector<ops::Value> in;
  for (const NDArray& a : {c.inputs[0], c.inputs[1], c.inputs[2], dy}) in.push_back(ops::Value::fromTensor(a));
  auto got = exe->run(std::move(in));
  for (size_t i = 0; i < want.size(); ++i) {
    auto r = allClose(got.at(i).tensor, want[i], 1e-12, 1e-12);
    if (!r) return r << " (gradient of input " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(Conv, GradientWithSymbolicBatch) {
  for (int64_t group : {1, 2}) {
    OpCase c = conv({2, 4, 5, 5}, {6, 4 / group, 3, 3}, true,
                    attrs({{"pads", Ints{1, 1, 1, 1}}, {"group", group}, {"strides", Ints{2, 1}}}));
    EXPECT_TRUE(symbolicBatchMatchesStatic(c, rnd({2, 6, 3, 5}, 9))) << "group " << group;
  }
}

TEST(ConvTranspose, GradientWithSymbolicBatch) {
  for (int64_t group : {1, 2}) {
    OpCase c =
        conv({2, 4, 3, 3}, {4, 3, 3, 3}, true, attrs({{"group", group}, {"strides", Ints{2, 2}}}), "ConvTranspose");
    EXPECT_TRUE(symbolicBatchMatchesStatic(c, rnd({2, 3 * group, 7, 7}, 9))) << "group " << group;
  }
}

TEST(Conv, GradientNeedsKnownSpatialShapes) {
  ir::Graph g("symbolic");
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Double, std::vector<Dim>{2, 4, Dim("H"), 5})),
                  ir::TensorKind::Input);
  ir::Tensor* w =
      g.addTensor("w", ir::ValueType::tensor(TensorInfo(DataType::Double, Shape{6, 4, 3, 3})), ir::TensorKind::Input);
  g.addInput(x);
  g.addInput(w);
  ir::Node* n = g.addNode("Conv", "", {x, w}, {"y"}, {}, "conv");
  ops::inferNode(*n, false);
  ops::GradBuilder gb(g, *n, {nullptr}, {true, true});
  try {
    ops::Registry::instance().find(*n)->vjp(gb);
    ADD_FAILURE() << "expected graft::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

// ---- ai.graft ConvGradInput / ConvGradWeight (what Conv's VJP emits) ---------------------------

OpCase gradInputCase(NDArray dy, NDArray w, Ints spatial, ir::Attributes a = {}) {
  a.set("kernel_shape", Ints(w.shape().begin() + 2, w.shape().end()));
  a.set("input_spatial", spatial);
  return {"ConvGradInput", {std::move(dy), std::move(w)}, std::move(a), 1, "ai.graft"};
}

OpCase gradWeightCase(NDArray x, NDArray dy, Ints kernel, ir::Attributes a = {}, int outputs = 2) {
  a.set("kernel_shape", kernel);
  return {"ConvGradWeight", {std::move(x), std::move(dy)}, std::move(a), outputs, "ai.graft"};
}

double dot(const NDArray& a, const NDArray& b) {
  auto x = toDoubles(a), y = toDoubles(b);
  EXPECT_EQ(x.size(), y.size());
  double s = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) s += x[i] * y[i];
  return s;
}

// The forward geometries the adjoint tests run: pads, strides with rows no window reaches,
// dilations, groups (depthwise with a channel multiplier), auto_pad, 1-D and 3-D.
struct Geometry {
  Shape x, w;
  ir::Attributes a;
};
std::vector<Geometry> geometries() {
  return {
      {{2, 3, 5, 5}, {4, 3, 3, 3}, attrs({{"pads", Ints{1, 0, 1, 2}}})},
      {{1, 2, 7, 8}, {2, 2, 3, 2}, attrs({{"strides", Ints{3, 2}}, {"pads", Ints{1, 0, 0, 1}}})},
      {{1, 2, 9, 9}, {2, 2, 3, 2}, attrs({{"dilations", Ints{2, 3}}, {"strides", Ints{2, 1}}})},
      {{2, 3, 6, 5}, {6, 1, 3, 3}, attrs({{"group", int64_t{3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {{2, 2, 5, 6}, {3, 2, 3, 2}, attrs({{"auto_pad", std::string("SAME_LOWER")}, {"strides", Ints{2, 2}}})},
      {{2, 3, 9}, {2, 3, 3}, attrs({{"strides", Ints{2}}, {"pads", Ints{2, 1}}})},
      {{1, 2, 4, 5, 4}, {2, 2, 2, 3, 2}, attrs({{"strides", Ints{1, 2, 1}}, {"pads", Ints{1, 0, 0, 0, 1, 1}}})},
  };
}

TEST(Graft_ConvGradInput, HandComputed) {
  // dX[i] = sum_o dY[o] W[i - o]: [1*3, 1*4 + 2*3, 2*4].
  NDArray w = arr<float>({1, 1, 2}, {3, 4});
  EXPECT_TRUE(allClose(runReference(gradInputCase(arr<float>({1, 1, 2}, {1, 2}), w, {3})).at(0),
                       arr<float>({1, 1, 3}, {3, 10, 8})));
  // Stride 2 over 5 elements: windows at 0 and 2; element 4 is never read (its gradient is 0).
  EXPECT_TRUE(
      allClose(runReference(gradInputCase(arr<float>({1, 1, 2}, {1, 2}), w, {5}, attrs({{"strides", Ints{2}}}))).at(0),
               arr<float>({1, 1, 5}, {3, 4, 6, 8, 0})));
  // Pad 1 at the start: window o reads X[o - 1 + k].
  EXPECT_TRUE(allClose(
      runReference(gradInputCase(arr<float>({1, 1, 3}, {1, 2, 5}), w, {3}, attrs({{"pads", Ints{1, 0}}}))).at(0),
      arr<float>({1, 1, 3}, {1 * 4 + 2 * 3, 2 * 4 + 5 * 3, 5 * 4})));
}

TEST(Graft_ConvGradInput, IsTheAdjointOfConv) {
  // <Conv(X, W), dY> = <X, ConvGradInput(dY, W)> for every X: checked against the forward
  // reference Conv, an independent computation.
  uint64_t seed = 40;
  for (const Geometry& g : geometries()) {
    NDArray x = rnd(g.x, ++seed), w = rnd(g.w, ++seed);
    NDArray y = runReference(OpCase{"Conv", {x, w}, g.a}).at(0);
    NDArray dy = rnd(y.shape(), ++seed);
    NDArray dx = runReference(gradInputCase(dy, w, Ints(g.x.begin() + 2, g.x.end()), g.a)).at(0);
    ASSERT_EQ(dx.shape(), g.x);
    EXPECT_NEAR(dot(y, dy), dot(x, dx), 1e-9) << shapeToString(g.x) << " by " << shapeToString(g.w);
  }
}

TEST(Graft_ConvGradInput, InfersShapesAndRejectsBadInput) {
  OpCase c = gradInputCase(rnd({2, 6, 3, 3}, 1), rnd({6, 1, 3, 3}, 2), {6, 5},
                           attrs({{"group", int64_t{3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  auto t = inferTypes(c);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].info.shape(), (Shape{2, 3, 6, 5}));
  OpCase bad = c;
  bad.inputs[0] = rnd({2, 6, 3, 4}, 1);  // the window gives 3 x 3
  EXPECT_THROW(runReference(bad), Error);
  EXPECT_THROW(inferTypes(bad), Error);
  bad = c;
  bad.attrs = attrs({{"group", int64_t{3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
  EXPECT_THROW(runReference(bad), Error);  // no input_spatial
  bad = c;
  bad.attrs.set("group", int64_t{0});
  EXPECT_THROW(runReference(bad), Error);
}

TEST(Graft_ConvGradWeight, HandComputed) {
  // dW[k] = sum_o dY[o] X[o + k] = [1*1 + 10*2, 1*2 + 10*3]; dB = 1 + 10.
  auto out = runReference(gradWeightCase(arr<float>({1, 1, 3}, {1, 2, 3}), arr<float>({1, 1, 2}, {1, 10}), {2}));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(allClose(out[0], arr<float>({1, 1, 2}, {21, 32})));
  EXPECT_TRUE(allClose(out[1], arr<float>({1}, {11})));
  // Two groups, batch 2: each output channel sees only its group's input channel.
  NDArray x = arr<float>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  NDArray dy = arr<float>({2, 2, 1}, {1, 2, 3, 4});
  out = runReference(gradWeightCase(x, dy, {2}, attrs({{"group", int64_t{2}}}), 1));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 1, 2}, {1 * 1 + 3 * 5, 1 * 2 + 3 * 6, 2 * 3 + 4 * 7, 2 * 4 + 4 * 8})));
}

TEST(Graft_ConvGradWeight, IsTheAdjointOfConv) {
  // <Conv(X, W), dY> = <W, dW> for every W, and dB sums dY over all but the channels.
  uint64_t seed = 60;
  for (const Geometry& g : geometries()) {
    NDArray x = rnd(g.x, ++seed), w = rnd(g.w, ++seed);
    NDArray y = runReference(OpCase{"Conv", {x, w}, g.a}).at(0);
    NDArray dy = rnd(y.shape(), ++seed);
    auto out = runReference(gradWeightCase(x, dy, Ints(g.w.begin() + 2, g.w.end()), g.a));
    ASSERT_EQ(out.at(0).shape(), g.w);
    EXPECT_NEAR(dot(y, dy), dot(w, out[0]), 1e-9) << shapeToString(g.x) << " by " << shapeToString(g.w);
    auto d = toDoubles(dy);
    int64_t M = y.dim(1), inner = y.numel() / (y.dim(0) * M);
    for (int64_t m = 0; m < M; ++m) {
      double want = 0;
      for (int64_t b = 0; b < y.dim(0); ++b)
        for (int64_t i = 0; i < inner; ++i) want += d[(b * M + m) * inner + i];
      EXPECT_NEAR(toDoubles(out.at(1))[m], want, 1e-12);
    }
  }
}

TEST(Graft_ConvGradWeight, InfersShapesAndRejectsBadInput) {
  OpCase c = gradWeightCase(rnd({2, 4, 5, 5}, 1), rnd({2, 6, 3, 5}, 2), {3, 3},
                            attrs({{"group", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 1}}}));
  auto t = inferTypes(c);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].info.shape(), (Shape{6, 2, 3, 3}));
  EXPECT_EQ(t[1].info.shape(), (Shape{6}));
  OpCase bad = c;
  bad.inputs[1] = rnd({2, 6, 3, 4}, 2);
  EXPECT_THROW(runReference(bad), Error);
  EXPECT_THROW(inferTypes(bad), Error);
  bad = c;
  bad.inputs[0] = rnd({2, 4, 5}, 1);  // rank 3 for a 2-D kernel
  EXPECT_THROW(runReference(bad), Error);
  EXPECT_THROW(inferTypes(bad), Error);
  bad = c;
  bad.inputs[0] = rnd({2, 5, 5, 5}, 1);  // 5 channels in 2 groups
  EXPECT_THROW(runReference(bad), Error);
  bad = c;
  bad.attrs = attrs({{"group", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 1}}});
  EXPECT_THROW(runReference(bad), Error);  // no kernel_shape
  bad = c;
  bad.inputs[1] = arr<float>({2, 6, 3, 5}, std::vector<float>(180, 1.f));  // float dY, double X
  EXPECT_THROW(runReference(bad), Error);
}

// Conv's VJP emits the gradient ops (one ConvGradWeight giving dW and dB), not forward
// convolutions over transposed tensors.
TEST(Conv, GradientUsesTheConvGradOps) {
  OpCase c = conv({2, 4, 5, 5}, {6, 2, 3, 3}, true, attrs({{"group", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}}));
  auto g = singleNodeGraph(c, std::vector<bool>(3, false));
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  ir::Node* n = g->nodes()[0];
  ir::Tensor* dy = g->addTensor("dy", n->output(0)->type(), ir::TensorKind::Input);
  ops::GradBuilder gb(*g, *n, {dy}, {true, true, true});
  ops::Registry::instance().find(*n)->vjp(gb);
  std::map<std::string, int> types;
  for (const ir::Node* m : g->nodes())
    if (m != n) ++types[m->type()];
  EXPECT_EQ(types, (std::map<std::string, int>{{"ConvGradInput", 1}, {"ConvGradWeight", 1}}));
}

}  // namespace
}  // namespace graft::testing
