#include "op_test_util.hpp"

#include <cmath>

#include "autodiff/autodiff.hpp"
#include "backends/backend.hpp"
#include "onnx/schema_infer.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"

namespace graft::testing {

std::unique_ptr<ir::Graph> singleNodeGraph(const OpCase& c, bool constInputs) {
  return singleNodeGraph(c, std::vector<bool>(c.inputs.size(), constInputs));
}

std::unique_ptr<ir::Graph> singleNodeGraph(const OpCase& c, const std::vector<bool>& constInputs) {
  auto g = std::make_unique<ir::Graph>("test_" + c.type);
  if (!c.domain.empty()) g->otherOpsets[c.domain] = 1;
  if (c.opset > 0) g->setOpsetVersion(c.opset);
  std::vector<ir::Tensor*> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const NDArray& a = c.inputs[i];
    if (!a.valid()) {
      ins.push_back(nullptr);
      continue;
    }
    std::string id = "in" + std::to_string(i);
    ir::Tensor* t;
    if (constInputs.at(i)) {
      t = g->addInitializer(id, a, ir::TensorKind::Constant);
    } else {
      t = g->addTensor(id, ir::ValueType::tensor(TensorInfo(a.dtype(), a.shape())), ir::TensorKind::Input);
      g->addInput(t);
    }
    ins.push_back(t);
  }
  std::vector<std::string> outs;
  for (int i = 0; i < c.numOutputs; ++i) outs.push_back("out" + std::to_string(i));
  ir::Node* n = g->addNode(c.type, c.domain, ins, outs, c.attrs, "node");
  for (ir::Tensor* t : n->outputs()) g->addOutput(t);
  return g;
}

std::vector<NDArray> runReference(const OpCase& c) {
  auto g = singleNodeGraph(c);
  std::vector<ops::Value> in;
  for (const auto& a : c.inputs) in.push_back(a.valid() ? ops::Value::fromTensor(a) : ops::Value{});
  auto outs = ops::evaluateNode(*g->nodes()[0], in, ops::serialPool());
  std::vector<NDArray> res;
  for (auto& v : outs) res.push_back(v.isTensor() ? v.tensor : NDArray{});
  return res;
}

std::vector<NDArray> runOnBackend(const OpCase& c, backends::Backend& backend) {
  auto g = singleNodeGraph(c);
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  support::ThreadPool pool(backend.numThreads());
  auto exe = plan::compile(*g, backend, pool);
  std::vector<ops::Value> in;
  for (const auto& a : c.inputs)
    if (a.valid()) in.push_back(ops::Value::fromTensor(a));
  auto outs = exe->run(std::move(in));
  std::vector<NDArray> res;
  for (auto& v : outs) res.push_back(v.isTensor() ? v.tensor : NDArray{});
  return res;
}

std::vector<ir::ValueType> inferTypes(const OpCase& c) {
  auto g = singleNodeGraph(c);
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  std::vector<ir::ValueType> out;
  for (ir::Tensor* t : g->outputs()) out.push_back(t->type());
  return out;
}

NDArray randomArray(DataType dt, Shape shape, uint64_t seed, double lo, double hi) {
  NDArray a(dt, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  ops::dispatch<ops::kNumericBool>(dt, "randomArray", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < a.numel(); ++i) {
      double v = u(rng);
      if constexpr (std::is_same_v<T, bool>) a.data<T>()[i] = v > (lo + hi) / 2;
      else if constexpr (std::is_integral_v<T>) a.data<T>()[i] = static_cast<T>(std::llround(v));
      else a.data<T>()[i] = static_cast<T>(static_cast<ops::ComputeType<T>>(v));
    }
  });
  return a;
}

std::vector<double> toDoubles(const NDArray& a) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  ops::dispatch<ops::kNumericBool>(a.dtype(), "toDoubles", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < a.numel(); ++i) v[i] = static_cast<double>(static_cast<ops::ComputeType<T>>(a.data<T>()[i]));
  });
  return v;
}

::testing::AssertionResult allClose(const NDArray& got, const NDArray& want, double rtol, double atol) {
  if (!got.valid()) return ::testing::AssertionFailure() << "result is missing";
  if (got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtypeName(got.dtype()) << " != expected " << dtypeName(want.dtype());
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shapeToString(got.shape()) << " != expected "
                                         << shapeToString(want.shape());
  if (got.dtype() == DataType::String) {
    for (int64_t i = 0; i < got.numel(); ++i)
      if (got.data<std::string>()[i] != want.data<std::string>()[i])
        return ::testing::AssertionFailure() << "element " << i << " is '" << got.data<std::string>()[i] << "', expected '"
                                             << want.data<std::string>()[i] << "'";
    return ::testing::AssertionSuccess();
  }
  auto a = toDoubles(got), b = toDoubles(want);
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] || std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i]);
    if (!ok) return ::testing::AssertionFailure() << "element " << i << " is " << a[i] << ", expected " << b[i];
  }
  return ::testing::AssertionSuccess();
}

namespace {

// The single-node graph of c with loss = sum_i IdentityLoss(out_i * r_i, Sum).
struct GradGraph {
  std::unique_ptr<ir::Graph> g;
  ir::Tensor* loss = nullptr;
};

GradGraph buildLossGraph(const OpCase& c, const std::vector<bool>& constant) {
  GradGraph gg;
  gg.g = singleNodeGraph(c, constant);
  ir::Graph& g = *gg.g;
  g.otherOpsets["ai.graphcore"] = 1;
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  ir::Node* node = g.nodes()[0];
  // Outputs whose shapes depend on inputs fed at run time: take them from a reference run.
  bool allStatic = true;
  for (ir::Tensor* out : node->outputs())
    if (out && out->type().isTensor() && !out->info().isStatic()) allStatic = false;
  if (!allStatic) {
    std::vector<NDArray> ref = runReference(c);
    for (size_t i = 0; i < node->numOutputs(); ++i)
      if (ir::Tensor* out = node->output(i); out && i < ref.size() && ref[i].valid())
        out->setType(ir::ValueType::tensor(TensorInfo(ref[i].dtype(), ref[i].shape())));
  }
  std::vector<ir::Tensor*> terms;
  uint64_t seed = 1000;
  for (ir::Tensor* out : node->outputs()) {
    if (!out || !isFloatingPoint(out->info().dataType())) continue;
    if (!out->info().isStatic()) throw Error("gradCheck: output '" + out->id() + "' has no static shape");
    NDArray r = randomArray(out->info().dataType(), out->info().shape(), seed++, -1.0, 1.0);
    ir::Tensor* rt = g.addInitializer(g.uniqueId("r"), r, ir::TensorKind::Constant);
    ir::Node* mul = g.addNode("Mul", "", {out, rt}, {g.uniqueId("weighted")});
    ops::inferNode(*mul, false);
    ir::Attributes a;
    a.set("reduction", std::string("Sum"));
    ir::Node* l = g.addNode("IdentityLoss", "ai.graphcore", {mul->output(0)}, {g.uniqueId("term")}, a);
    ops::inferNode(*l, false);
    terms.push_back(l->output(0));
  }
  if (terms.empty()) throw Error("gradCheck: the op has no floating-point output");
  if (terms.size() == 1) {
    gg.loss = terms[0];
  } else {
    ir::Node* s = g.addNode("Sum", "", terms, {"loss"});
    ops::inferNode(*s, false);
    gg.loss = s->output(0);
  }
  return gg;
}

std::vector<NDArray> runGraph(ir::Graph& g, const std::vector<NDArray>& inputs) {
  auto backend = backends::makeReferenceBackend();
  support::ThreadPool pool(1);
  auto exe = plan::compile(g, *backend, pool);
  std::vector<ops::Value> in;
  for (const auto& a : inputs)
    if (a.valid()) in.push_back(ops::Value::fromTensor(a));
  std::vector<NDArray> res;
  for (auto& v : exe->run(std::move(in))) res.push_back(v.tensor);
  return res;
}

}  // namespace

namespace {

::testing::AssertionResult gradCheckImpl(const OpCase& c, const std::vector<int>& wrt, double rtol, double atol,
                                         double eps, bool allInputsFed) {
  for (int i : wrt)
    if (c.inputs.at(i).dtype() != DataType::Double)
      return ::testing::AssertionFailure() << "gradCheck: input " << i << " must be DOUBLE";
  std::vector<bool> constant(c.inputs.size(), !allInputsFed);
  for (int i : wrt) constant[i] = false;
  // Graph inputs in the order singleNodeGraph declares them; slot[k]: the fed position of wrt[k].
  std::vector<NDArray> fed;
  std::vector<size_t> slot(wrt.size());
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (constant[i] || !c.inputs[i].valid()) continue;
    for (size_t k = 0; k < wrt.size(); ++k)
      if (wrt[k] == static_cast<int>(i)) slot[k] = fed.size();
    fed.push_back(c.inputs[i]);
  }
  // Analytic gradients.
  GradGraph gg = buildLossGraph(c, constant);
  ir::Graph& g = *gg.g;
  std::vector<ir::Tensor*> wrtTensors;
  for (int i : wrt) wrtTensors.push_back(g.nodes()[0]->input(i));
  NDArray one(gg.loss->info().dataType(), {});
  one.data<double>()[0] = 1.0;
  ir::Tensor* seed = g.addInitializer("seed", one, ir::TensorKind::Constant);
  auto grads = autodiff::differentiate(g, gg.loss, wrtTensors, seed);
  std::vector<ir::Tensor*> outs;
  for (ir::Tensor* t : wrtTensors) {
    if (!grads.at(t)) return ::testing::AssertionFailure() << "no gradient reached input '" << t->id() << "'";
    outs.push_back(grads.at(t));
  }
  g.setOutputs(outs);
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes", "dce"}, ctx);
  std::vector<NDArray> analytic = runGraph(g, fed);

  // Numeric gradients from a forward-only loss graph.
  GradGraph fg = buildLossGraph(c, constant);
  fg.g->setOutputs({fg.loss});
  auto lossAt = [&](const std::vector<NDArray>& in) { return runGraph(*fg.g, in)[0].data<double>()[0]; };
  for (size_t k = 0; k < wrt.size(); ++k) {
    NDArray base = fed[slot[k]];
    for (int64_t e = 0; e < base.numel(); ++e) {
      std::vector<NDArray> in = fed;
      NDArray plus = base.clone(), minus = base.clone();
      plus.data<double>()[e] += eps;
      minus.data<double>()[e] -= eps;
      in[slot[k]] = plus;
      double lp = lossAt(in);
      in[slot[k]] = minus;
      double lm = lossAt(in);
      double numeric = (lp - lm) / (2 * eps);
      double got = toDoubles(analytic[k])[e];
      if (!(std::abs(got - numeric) <= atol + rtol * std::abs(numeric)))
        return ::testing::AssertionFailure() << "d(loss)/d(input " << wrt[k] << ")[" << e << "] is " << got
                                             << ", finite differences give " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

::testing::AssertionResult gradCheck(const OpCase& c, const std::vector<int>& wrt, double rtol, double atol,
                                     double eps) {
  return gradCheckImpl(c, wrt, rtol, atol, eps, false);
}

::testing::AssertionResult gradCheckFed(const OpCase& c, const std::vector<int>& wrt, double rtol, double atol,
                                        double eps) {
  return gradCheckImpl(c, wrt, rtol, atol, eps, true);
}

std::vector<NDArray> vjpOf(const OpCase& c, const std::vector<int>& wrt, const std::vector<NDArray>& dys,
                           const std::vector<int>& fed) {
  std::vector<bool> constant(c.inputs.size(), true);
  for (int i : wrt) constant.at(i) = false;
  for (int i : fed) constant.at(i) = false;
  auto g = singleNodeGraph(c, constant);
  g->otherOpsets["ai.graphcore"] = 1;
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  ir::Node* node = g->nodes()[0];
  std::vector<ir::Tensor*> terms;
  for (size_t i = 0; i < dys.size() && i < node->numOutputs(); ++i) {
    if (!dys[i].valid() || !node->output(i)) continue;
    ir::Tensor* w = g->addInitializer(g->uniqueId("dy"), dys[i], ir::TensorKind::Constant);
    ir::Node* mul = g->addNode("Mul", "", {node->output(i), w}, {g->uniqueId("weighted")});
    ops::inferNode(*mul, false);
    ir::Attributes a;
    a.set("reduction", std::string("Sum"));
    ir::Node* l = g->addNode("IdentityLoss", "ai.graphcore", {mul->output(0)}, {g->uniqueId("term")}, a);
    ops::inferNode(*l, false);
    terms.push_back(l->output(0));
  }
  if (terms.empty()) throw Error("vjpOf: no output is weighted");
  ir::Tensor* loss = terms[0];
  if (terms.size() > 1) {
    ir::Node* s = g->addNode("Sum", "", terms, {"loss"});
    ops::inferNode(*s, false);
    loss = s->output(0);
  }
  NDArray one(loss->info().dataType(), {});
  ops::dispatch<ops::kFloats>(one.dtype(), "vjpOf", [&](auto tag) {
    using T = typename decltype(tag)::type;
    one.data<T>()[0] = static_cast<T>(ops::ComputeType<T>(1));
  });
  ir::Tensor* seed = g->addInitializer("seed", one, ir::TensorKind::Constant);
  std::vector<ir::Tensor*> wrtTensors;
  for (int i : wrt) wrtTensors.push_back(node->input(i));
  auto grads = autodiff::differentiate(*g, loss, wrtTensors, seed);
  std::vector<ir::Tensor*> outs;
  for (ir::Tensor* t : wrtTensors) {
    if (!grads.at(t)) throw Error("vjpOf: no gradient reached input '" + t->id() + "'");
    outs.push_back(grads.at(t));
  }
  g->setOutputs(outs);
  passes::runPipeline(*g, {"infer-shapes", "dce"}, ctx);
  std::vector<NDArray> fedArrays;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (!constant[i] && c.inputs[i].valid()) fedArrays.push_back(c.inputs[i]);
  return runGraph(*g, fedArrays);
}

ir::Attributes attrs(std::initializer_list<std::pair<std::string, ir::AttrValue>> list) {
  ir::Attributes a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

}  // namespace graft::testing
