#pragma once
// Helpers for tests of ops that take or return sequences and optionals, or that hold subgraphs
// (If, Loop, Scan, SequenceMap): build small graphs by hand, wire outer-scope reads the way the
// ONNX importer does, and run them through shape inference and a compiled plan.
#include "op_test_util.hpp"
#include "ops/kernel.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"

namespace graft::testing {

inline ops::Value tv(NDArray a) { return ops::Value::fromTensor(std::move(a)); }
inline ops::Value sv(std::vector<NDArray> s) { return ops::Value::fromSequence(std::move(s)); }

inline ir::ValueType tensorType(DataType dt, Shape s) { return ir::ValueType::tensor(TensorInfo(dt, s)); }
inline ir::ValueType tensorType(DataType dt) { return ir::ValueType::tensor(TensorInfo::unranked(dt)); }
inline ir::ValueType seqType(DataType dt) { return ir::ValueType::sequence(TensorInfo::unranked(dt)); }

/// Adds a graph (or subgraph) input.
inline ir::Tensor* addInput(ir::Graph& g, const std::string& id, ir::ValueType t) {
  ir::Tensor* x = g.addTensor(id, std::move(t), ir::TensorKind::Input);
  g.addInput(x);
  return x;
}

/// Adds a constant tensor.
inline ir::Tensor* addConst(ir::Graph& g, const std::string& id, NDArray a) {
  return g.addInitializer(id, std::move(a), ir::TensorKind::Constant);
}

/// Adds a node with one output per id and returns it.
inline ir::Node* addOp(ir::Graph& g, const std::string& type, const std::vector<ir::Tensor*>& in,
                       const std::vector<std::string>& out, ir::Attributes a = {}) {
  return g.addNode(type, "", in, out, std::move(a), out.empty() ? type : out[0]);
}

/// In subgraph `sub`, the placeholder for outer value `id` (found in an enclosing graph).
inline ir::Tensor* outer(ir::Graph& sub, const std::string& id) {
  if (ir::Tensor* t = sub.findTensor(id)) return t;
  const ir::Graph* p = sub.parent();
  const ir::Tensor* src = nullptr;
  for (; p && !src; p = p->parent()) src = p->findTensor(id);
  EXPECT_TRUE(src) << "no enclosing graph defines '" << id << "'";
  return sub.addTensor(id, src ? src->type() : ir::ValueType{}, ir::TensorKind::OuterScope);
}

/// Sets `n`'s implicit inputs from the outer values its subgraphs read, as the importer does.
/// Call it innermost node first (a nested node's reads become its enclosing body's reads).
inline void linkOuterReads(ir::Node* n) {
  std::vector<ir::Tensor*> imp;
  for (ir::Graph* sub : n->subgraphs())
    for (ir::Tensor* t : sub->tensors())
      if (t->kind() == ir::TensorKind::OuterScope &&
          std::find_if(imp.begin(), imp.end(), [&](ir::Tensor* x) { return x->id() == t->id(); }) == imp.end()) {
        ir::Graph& g = n->graph();
        imp.push_back(g.findTensor(t->id()) ? g.findTensor(t->id()) : outer(g, t->id()));
      }
  n->setImplicitInputs(imp);
}

/// A fresh subgraph of `parent` (for a node of `parent`).
inline ir::GraphPtr subgraph(ir::Graph& parent, const std::string& name) {
  return std::make_shared<ir::Graph>(name, &parent);
}

/// Runs `g` (already holding its outputs) through infer-shapes and the reference backend.
/// `exeOut`, when given, receives the compiled plan (to inspect or run again).
inline std::vector<ops::Value> runGraph(ir::Graph& g, std::vector<ops::Value> inputs,
                                        std::unique_ptr<plan::Executable>* exeOut = nullptr) {
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  ir::verifyGraph(g);
  static auto backend = backends::makeReferenceBackend();
  static support::ThreadPool pool(1);
  auto exe = plan::compile(g, *backend, pool);
  auto out = exe->run(std::move(inputs));
  if (exeOut) *exeOut = std::move(exe);
  return out;
}

/// The tensors of a sequence value.
inline const std::vector<NDArray>& seqOf(const ops::Value& v) {
  static const std::vector<NDArray> kEmpty;
  EXPECT_TRUE(v.isSequence()) << "value is not a sequence";
  return v.isSequence() ? *v.sequence : kEmpty;
}

}  // namespace graft::testing
