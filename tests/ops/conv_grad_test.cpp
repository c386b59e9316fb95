// Gradients (VJPs) of src/ops/conv.cpp against central finite differences in float64: input,
// weight and bias gradients of Conv and ConvTranspose over pads, strides, dilations, groups,
// auto_pad modes, output_padding and output_shape, in 1-D, 2-D and 3-D.
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

}  // namespace
}  // namespace graft::testing
