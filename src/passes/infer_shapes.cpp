// infer-shapes: exact output types for every node, in schedule order. Standard ops use ONNX's
// inference functions; graft's own ops their registered InferFn.
#include "onnx/schema_infer.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "support/check.hpp"

namespace graft::passes {
namespace {

TensorInfo mergeInfo(const TensorInfo& old, const TensorInfo& inf) {
  if (inf.dataType() == DataType::Undefined) return old;
  if (!inf.hasShape()) return old.hasShape() ? TensorInfo(inf.dataType(), old.dims()) : inf;
  if (!old.hasShape() || old.rank() != inf.rank()) return inf;
  std::vector<Dim> dims = inf.dims();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].known()) continue;
    if (old.dims()[i].known()) dims[i] = old.dims()[i];
    else if (dims[i].param.empty()) dims[i].param = old.dims()[i].param;
  }
  return TensorInfo(inf.dataType(), std::move(dims));
}

ir::ValueType mergeType(const ir::ValueType& old, const ir::ValueType& inf) {
  if (!inf.known()) return old;
  ir::ValueType out = inf;
  if (old.kind == inf.kind) out.info = mergeInfo(old.info, inf.info);
  return out;
}

bool isConstant(const ir::Tensor* t, const PassContext& ctx) {
  if (!t || !t->data()) return false;
  return t->kind() == ir::TensorKind::Constant || (ctx.weightsAreConstant && t->kind() == ir::TensorKind::Variable);
}

class InferShapes : public Pass {
 public:
  std::string_view name() const override { return "infer-shapes"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    bool changed = false;
    for (ir::Node* n : g.schedule()) {
      std::vector<ir::ValueType> in;
      std::vector<const NDArray*> consts;
      for (ir::Tensor* t : n->inputs()) {
        in.push_back(t ? t->type() : ir::ValueType{});
        consts.push_back(isConstant(t, ctx) ? t->data() : nullptr);
      }
      const ops::OpDef* def = ops::Registry::instance().find(*n);
      std::vector<ir::ValueType> out;
      if (def && def->infer) {
        try {
          out = def->infer(*n, in, consts);
        } catch (const Error& e) {
          std::string msg = e.what();
          if (msg.find(n->describe()) == std::string::npos) GRAFT_THROW("{}: {}", n->describe(), msg);
          throw;
        }
      } else {
        out = onnxio::inferWithOnnxSchema(*n, in, consts);
      }
      for (size_t i = 0; i < n->numOutputs() && i < out.size(); ++i) {
        ir::Tensor* t = n->output(i);
        if (!t) continue;
        ir::ValueType merged = mergeType(t->type(), out[i]);
        if (!(merged == t->type())) {
          t->setType(merged);
          changed = true;
        }
      }
    }
    return changed;
  }
};

GRAFT_REGISTER_PASS("infer-shapes", InferShapes);

}  // namespace
}  // namespace graft::passes
