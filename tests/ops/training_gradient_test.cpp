// Tests of ai.onnx.preview.training Gradient (registered in src/ops/training_ops.cpp, expanded
// by passes/expand_gradient.cpp): graphs holding a Gradient node go through the inference
// pipeline and the reference backend; the gradients are compared with derivatives worked out by
// hand and with central finite differences of the forward graph.
#include <cmath>

#include "graph_test_util.hpp"

namespace graft::testing {
namespace {

const char* kDomain = "ai.onnx.preview.training";

ir::Node* addGradient(ir::Graph& g, const std::vector<ir::Tensor*>& values, const std::vector<std::string>& outs,
                      const std::vector<std::string>& xs, const std::string& y,
                      const std::vector<std::string>& zs = {}) {
  g.otherOpsets[kDomain] = 1;
  ir::Attributes a;
  a.set("xs", xs);
  a.set("y", y);
  if (!zs.empty()) a.set("zs", zs);
  return g.addNode("Gradient", kDomain, values, outs, std::move(a), "grad");
}

void setOutputs(ir::Graph& g, const std::vector<std::string>& ids) {
  std::vector<ir::Tensor*> outs;
  for (const auto& id : ids) outs.push_back(&g.tensor(id));
  g.setOutputs(outs);
}

// Runs g (outputs set) through the sessions' inference pipeline and the reference backend.
std::vector<NDArray> compileAndRun(ir::Graph& g, const std::vector<NDArray>& inputs) {
  passes::PassContext ctx;
  passes::runPipeline(g, passes::commonPrefix(), ctx);
  ir::verifyGraph(g);
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  auto exe = plan::compile(g, *backend, pool);
  std::vector<ops::Value> in;
  for (const auto& a : inputs) in.push_back(tv(a));
  std::vector<NDArray> out;
  for (auto& v : exe->run(std::move(in))) out.push_back(v.tensor);
  return out;
}

size_t countNodes(const ir::Graph& g, const std::string& type) {
  size_t k = 0;
  for (const ir::Node* n : g.nodes()) k += n->type() == type;
  return k;
}

// d = (a + b) * a, as ONNX's simple/test_gradient_of_add_and_mul has it.
std::unique_ptr<ir::Graph> addMulGraph(Shape sa, Shape sb) {
  auto g = std::make_unique<ir::Graph>("addmul");
  ir::Tensor* a = addInput(*g, "a", tensorType(DataType::Double, sa));
  ir::Tensor* b = addInput(*g, "b", tensorType(DataType::Double, sb));
  ir::Tensor* c = addOp(*g, "Add", {a, b}, {"c"})->output(0);
  addOp(*g, "Mul", {c, a}, {"d"});
  return g;
}

TEST(Training_Gradient, OutputTypesAreThoseOfTheValuesOfXs) {
  ir::Attributes a;
  a.set("xs", std::vector<std::string>{"a", "b"});
  a.set("y", std::string("c"));
  auto types = inferTypes(OpCase{
      "Gradient", {arr<float>({2, 3}, std::vector<float>(6, 1)), arr<double>({4}, {1, 2, 3, 4})}, a, 2, kDomain});
  ASSERT_EQ(types.size(), 2u);
  EXPECT_EQ(types[0], tensorType(DataType::Float, {2, 3}));
  EXPECT_EQ(types[1], tensorType(DataType::Double, {4}));
}

TEST(Training_Gradient, OfAddSumsOverBroadcastDimensions) {
  ir::Graph g("add");
  ir::Tensor* a = addInput(g, "a", tensorType(DataType::Float, {2, 3}));
  ir::Tensor* b = addInput(g, "b", tensorType(DataType::Float, {3}));
  addOp(g, "Add", {a, b}, {"c"});
  addGradient(g, {a, b}, {"dc_da", "dc_db"}, {"a", "b"}, "c");
  setOutputs(g, {"c", "dc_da", "dc_db"});
  auto out = compileAndRun(g, {arr<float>({2, 3}, {1, 2, 3, 4, 5, 6}), arr<float>({3}, {10, 20, 30})});
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 3}, {11, 22, 33, 14, 25, 36})));
  // d sum(a + b) / da = 1 everywhere; b was added to both rows, so each of its elements counts twice.
  EXPECT_TRUE(allClose(out[1], arr<float>({2, 3}, {1, 1, 1, 1, 1, 1})));
  EXPECT_TRUE(allClose(out[2], arr<float>({3}, {2, 2, 2})));
}

TEST(Training_Gradient, OfAddAndMulMatchesTheDerivativeByHand) {
  auto g = addMulGraph({4}, {4});
  addGradient(*g, {&g->tensor("a"), &g->tensor("b")}, {"dd_da", "dd_db"}, {"a", "b"}, "d");
  setOutputs(*g, {"d", "dd_da", "dd_db"});
  NDArray a = randomArray(DataType::Double, {4}, 1), b = randomArray(DataType::Double, {4}, 2);
  auto out = compileAndRun(*g, {a, b});
  std::vector<double> av = toDoubles(a), bv = toDoubles(b), dda(4), ddb(4);
  for (size_t i = 0; i < 4; ++i) {
    dda[i] = 2 * av[i] + bv[i];  // d((a + b) a)/da
    ddb[i] = av[i];
  }
  EXPECT_TRUE(allClose(out[1], arr<double>({4}, dda), 1e-12));
  EXPECT_TRUE(allClose(out[2], arr<double>({4}, ddb), 1e-12));
}

TEST(Training_Gradient, ReusesTheForwardNodesWhenItsInputsAreXsThemselves) {
  auto g = addMulGraph({3}, {3});
  addGradient(*g, {&g->tensor("a"), &g->tensor("b")}, {"dd_da", "dd_db"}, {"a", "b"}, "d");
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes", "expand-gradient"}, ctx);
  EXPECT_EQ(countNodes(*g, "Gradient"), 0u);
  EXPECT_EQ(countNodes(*g, "Add"), 1u);  // the backward pass reads the graph's own c
}

TEST(Training_Gradient, IsEvaluatedAtItsInputValues) {
  // The gradient of d with respect to a, at a = a2 and b = b2 (ONNX's "H_1" example), while the
  // graph's own d is still computed from a and b.
  auto g = addMulGraph({3}, {3});
  ir::Tensor* a2 = addInput(*g, "a2", tensorType(DataType::Double, {3}));
  ir::Tensor* b2 = addInput(*g, "b2", tensorType(DataType::Double, {3}));
  addGradient(*g, {a2, b2}, {"dd_da"}, {"a"}, "d", {"b"});
  setOutputs(*g, {"d", "dd_da"});
  auto out = compileAndRun(*g, {arr<double>({3}, {1, 2, 3}), arr<double>({3}, {4, 5, 6}),
                                arr<double>({3}, {-1, 0.5, 2}), arr<double>({3}, {10, 20, 30})});
  EXPECT_TRUE(allClose(out[0], arr<double>({3}, {5, 14, 27}), 1e-12));
  EXPECT_TRUE(allClose(out[1], arr<double>({3}, {2 * -1 + 10, 2 * 0.5 + 20, 2 * 2 + 30}), 1e-12));
  EXPECT_EQ(countNodes(*g, "Add"), 2u);  // the forward part was copied for the other values
}

TEST(Training_Gradient, HoldsZsFixed) {
  // y = x * z with z in zs: dy/dx = z, and z gets no output.
  ir::Graph g("xz");
  ir::Tensor* x = addInput(g, "x", tensorType(DataType::Float, {2}));
  ir::Tensor* z = addInput(g, "z", tensorType(DataType::Float, {2}));
  addOp(g, "Mul", {x, z}, {"y"});
  addGradient(g, {x, z}, {"dy_dx"}, {"x"}, "y", {"z"});
  setOutputs(g, {"dy_dx"});
  auto out = compileAndRun(g, {arr<float>({2}, {3, 4}), arr<float>({2}, {-2, 7})});
  EXPECT_TRUE(allClose(out[0], arr<float>({2}, {-2, 7})));
}

TEST(Training_Gradient, IsZeroForXsThatYDoesNotDependOn) {
  ir::Graph g("indep");
  ir::Tensor* a = addInput(g, "a", tensorType(DataType::Float, {2}));
  ir::Tensor* b = addInput(g, "b", tensorType(DataType::Float, {2}));
  addOp(g, "Mul", {b, b}, {"y"});
  addGradient(g, {a, b}, {"dy_da", "dy_db"}, {"a", "b"}, "y");
  setOutputs(g, {"dy_da", "dy_db"});
  auto out = compileAndRun(g, {arr<float>({2}, {3, 4}), arr<float>({2}, {1.5f, -2})});
  EXPECT_TRUE(allClose(out[0], arr<float>({2}, {0, 0})));
  EXPECT_TRUE(allClose(out[1], arr<float>({2}, {3, -4})));
}

TEST(Training_Gradient, OfYItselfIsOnes) {
  ir::Graph g("self");
  ir::Tensor* x = addInput(g, "x", tensorType(DataType::Double, {2, 2}));
  addGradient(g, {x}, {"dx"}, {"x"}, "x");
  setOutputs(g, {"dx"});
  auto out = compileAndRun(g, {arr<double>({2, 2}, {1, 2, 3, 4})});
  EXPECT_TRUE(allClose(out[0], arr<double>({2, 2}, {1, 1, 1, 1})));
}

TEST(Training_Gradient, OfYOfUnknownShape) {
  // The ones the backward pass starts from are shaped like y at run time.
  ir::Graph g("unknown");
  ir::Tensor* x = addInput(g, "x", tensorType(DataType::Float));
  ir::Tensor* b = addInput(g, "b", tensorType(DataType::Float));
  addOp(g, "Mul", {x, b}, {"y"});
  addGradient(g, {x, b}, {"dx", "db"}, {"x", "b"}, "y");
  setOutputs(g, {"dx", "db"});
  auto out = compileAndRun(g, {arr<float>({2, 2}, {1, 2, 3, 4}), arr<float>({2}, {-1, 3})});
  EXPECT_TRUE(allClose(out[0], arr<float>({2, 2}, {-1, 3, -1, 3})));
  EXPECT_TRUE(allClose(out[1], arr<float>({2}, {4, 6})));
}

TEST(Training_Gradient, MatchesFiniteDifferencesOfANonlinearGraph) {
  // y = tanh(x @ w) * x[:, :1] (non-scalar, summed by Gradient), w an initializer in xs.
  auto build = [](bool withGradient) {
    auto g = std::make_unique<ir::Graph>("mlp");
    ir::Tensor* x = addInput(*g, "x", tensorType(DataType::Double, {2, 3}));
    ir::Tensor* w = g->addInitializer("w", arr<double>({3, 2}, {0.3, -0.2, 0.5, 0.1, -0.4, 0.7}));
    ir::Tensor* h = addOp(*g, "MatMul", {x, w}, {"h"})->output(0);
    ir::Tensor* t = addOp(*g, "Tanh", {h}, {"t"})->output(0);
    ir::Tensor* col = addOp(*g, "Slice",
                            {x, addConst(*g, "s0", arr<int64_t>({1}, {0})), addConst(*g, "s1", arr<int64_t>({1}, {1})),
                             addConst(*g, "ax", arr<int64_t>({1}, {1}))},
                            {"col"})
                          ->output(0);
    addOp(*g, "Mul", {t, col}, {"y"});
    if (withGradient) {
      addGradient(*g, {x, w}, {"dx", "dw"}, {"x", "w"}, "y");
      setOutputs(*g, {"dx", "dw"});
    } else {
      setOutputs(*g, {"y"});
    }
    return g;
  };
  std::vector<double> xv = {0.5, -1.0, 0.25, 1.5, 0.75, -0.5};
  auto sumY = [&](const std::vector<double>& x, double dw, int wIndex) {
    auto g = build(false);
    if (wIndex >= 0) g->tensor("w").mutableData()->data<double>()[wIndex] += dw;
    double s = 0;
    for (double v : toDoubles(compileAndRun(*g, {arr<double>({2, 3}, x)})[0])) s += v;
    return s;
  };
  auto g = build(true);
  auto out = compileAndRun(*g, {arr<double>({2, 3}, xv)});
  const double eps = 1e-6;
  std::vector<double> dx(6), dw(6);
  for (int i = 0; i < 6; ++i) {
    auto up = xv, down = xv;
    up[i] += eps;
    down[i] -= eps;
    dx[i] = (sumY(up, 0, -1) - sumY(down, 0, -1)) / (2 * eps);
    dw[i] = (sumY(xv, eps, i) - sumY(xv, -eps, i)) / (2 * eps);
  }
  EXPECT_TRUE(allClose(out[0], arr<double>({2, 3}, dx), 1e-6, 1e-8));
  EXPECT_TRUE(allClose(out[1], arr<double>({3, 2}, dw), 1e-6, 1e-8));
}

TEST(Training_Gradient, SecondDerivativeThroughAnotherGradient) {
  // y = x^3; g1 = dy/dx = 3x^2; g2 = d(g1)/dx = 6x. g2's node comes first: the pass expands g1 first.
  ir::Graph g("second");
  ir::Tensor* x = addInput(g, "x", tensorType(DataType::Double, {3}));
  ir::Tensor* x2 = addOp(g, "Mul", {x, x}, {"x2"})->output(0);
  addOp(g, "Mul", {x2, x}, {"y"});
  addGradient(g, {x}, {"g2"}, {"x"}, "g1");
  addGradient(g, {x}, {"g1"}, {"x"}, "y");
  setOutputs(g, {"g1", "g2"});
  auto out = compileAndRun(g, {arr<double>({3}, {1, -2, 0.5})});
  EXPECT_TRUE(allClose(out[0], arr<double>({3}, {3, 12, 0.75}), 1e-12));
  EXPECT_TRUE(allClose(out[1], arr<double>({3}, {6, -12, 3}), 1e-12));
}

TEST(Training_Gradient, RejectsBadAttributesAndInputs) {
  auto expectError = [](const std::function<void(ir::Graph&)>& addNode, const std::string& fragment) {
    auto g = addMulGraph({2}, {2});
    addNode(*g);
    setOutputs(*g, {"d"});
    passes::PassContext ctx;
    try {
      passes::runPipeline(*g, {"infer-shapes", "expand-gradient"}, ctx);
      ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'grad'"), std::string::npos) << e.what();  // names the node
    }
  };
  auto t = [](ir::Graph& g, const char* id) { return &g.tensor(id); };
  expectError([&](ir::Graph& g) { addGradient(g, {t(g, "a")}, {"o"}, {"nope"}, "d"); }, "'nope'");
  expectError([&](ir::Graph& g) { addGradient(g, {t(g, "a")}, {"o"}, {"a"}, "nope"); }, "'nope'");
  expectError([&](ir::Graph& g) { addGradient(g, {t(g, "a")}, {"o"}, {"a", "b"}, "d"); }, "expected 2 inputs");
  expectError([&](ir::Graph& g) { addGradient(g, {t(g, "a"), t(g, "a")}, {"o"}, {"a", "a"}, "d"); }, "more than once");
  // c is computed from a: not an independent variable.
  expectError([&](ir::Graph& g) { addGradient(g, {t(g, "a"), t(g, "c")}, {"o"}, {"a", "c"}, "d"); }, "independent");
  // The value of a must have a's type.
  expectError(
      [&](ir::Graph& g) {
        ir::Tensor* f = addInput(g, "f", tensorType(DataType::Float, {2}));
        addGradient(g, {f}, {"o"}, {"a"}, "d");
      },
      "DOUBLE");
  // Integers have no gradient.
  expectError(
      [&](ir::Graph& g) {
        ir::Tensor* i = addInput(g, "i", tensorType(DataType::Int64, {2}));
        addOp(g, "Cast", {i}, {"fi"}, attrs({{"to", int64_t{11}}}));
        addGradient(g, {i}, {"o"}, {"i"}, "fi");
      },
      "floating-point");
  // y computed from the node's own output.
  expectError(
      [&](ir::Graph& g) {
        ir::Tensor* o = addGradient(g, {t(g, "a")}, {"o"}, {"a"}, "e")->output(0);
        addOp(g, "Mul", {o, t(g, "a")}, {"e"});
      },
      "own outputs");
}

TEST(Training_Gradient, UnexpandedNodeDoesNotCompile) {
  auto g = addMulGraph({2}, {2});
  addGradient(*g, {&g->tensor("a"), &g->tensor("b")}, {"da", "db"}, {"a", "b"}, "d");
  setOutputs(*g, {"da"});
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  EXPECT_THROW(plan::compile(*g, *backend, pool), Error);
}

}  // namespace
}  // namespace graft::testing
