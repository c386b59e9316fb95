#pragma once
// Helpers for pass tests: build small graphs, count ops, run a graph before and after a pass.
#include <gtest/gtest.h>

#include <graft/ndarray.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "backends/backend.hpp"
#include "ir/graph.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"

namespace graft::passes::testing {

inline ir::ValueType typeOf(DataType dt, Shape s) { return ir::ValueType::tensor(TensorInfo(dt, std::move(s))); }

/// A graph under construction: inputs, constants and nodes with fresh ids.
struct GraphBuilder {
  std::unique_ptr<ir::Graph> g = std::make_unique<ir::Graph>("test");
  int next = 0;
  ir::Tensor* input(Shape s, DataType dt = DataType::Float) {
    ir::Tensor* t = g->addTensor("in" + std::to_string(next++), typeOf(dt, std::move(s)), ir::TensorKind::Input);
    g->addInput(t);
    return t;
  }
  ir::Tensor* constant(NDArray a) { return g->addInitializer("c" + std::to_string(next++), std::move(a), ir::TensorKind::Constant); }
  ir::Tensor* scalar(float v) { return constant(NDArray::scalar<float>(DataType::Float, v)); }
  ir::Tensor* op(const std::string& type, std::vector<ir::Tensor*> in, ir::Attributes a = {}, const std::string& domain = "") {
    if (!domain.empty()) g->otherOpsets[domain] = 1;
    return g->addNode(type, domain, in, {"v" + std::to_string(next++)}, std::move(a))->output(0);
  }
  void outputs(std::vector<ir::Tensor*> outs) {
    g->setOutputs(std::move(outs));
    PassContext ctx;
    runPipeline(*g, {"infer-shapes"}, ctx);
  }
};

inline std::map<std::string, int> opCounts(const ir::Graph& g) {
  std::map<std::string, int> m;
  for (const ir::Node* n : g.nodes()) ++m[n->type()];
  return m;
}

inline NDArray randomFloats(Shape s, uint64_t seed, float lo = -2, float hi = 2) {
  NDArray a(DataType::Float, std::move(s));
  std::mt19937_64 r(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = u(r);
  return a;
}

/// Runs `g` on the cpu backend (or the reference backend) with `inputs`.
inline std::vector<NDArray> runGraph(const ir::Graph& g, const std::vector<NDArray>& inputs, bool reference = false) {
  auto backend = reference ? backends::makeReferenceBackend() : backends::makeCpuBackend(2);
  support::ThreadPool pool(backend->numThreads());
  plan::CompileOptions o;
  o.verifyPlan = true;
  auto exe = plan::compile(g, *backend, pool, o);
  std::vector<ops::Value> in;
  for (const auto& a : inputs) in.push_back(ops::Value::fromTensor(a.clone()));
  std::vector<NDArray> out;
  for (auto& v : exe->run(std::move(in))) out.push_back(v.tensor);
  return out;
}

/// Element-wise |a - b| <= atol + rtol |b| over float arrays of one shape.
inline ::testing::AssertionResult close(const NDArray& a, const NDArray& b, double rtol = 1e-5, double atol = 1e-6) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "shape or type differs: " << shapeToString(a.shape()) << " vs " << shapeToString(b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.data<float>()[i], y = b.data<float>()[i];
    if (!(std::abs(x - y) <= atol + rtol * std::abs(y)) && !(std::isnan(x) && std::isnan(y)))
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace graft::passes::testing
