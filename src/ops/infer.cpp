#include "ops/infer.hpp"

#include <algorithm>

#include "onnx/schema_infer.hpp"
#include "ops/fallback_infer.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::ops {
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

bool isConstant(const ir::Tensor* t, bool weightsAreConstant) {
  if (!t || !t->data()) return false;
  return t->kind() == ir::TensorKind::Constant || (weightsAreConstant && t->kind() == ir::TensorKind::Variable);
}

// A graph output's declared type must agree with what its producer computes: ONNX Runtime refuses
// a mismatch too. A symbolic or unknown declaration (dtype, rank or dimension) is fine.
void checkDeclaredOutput(const ir::Node& n, const ir::Tensor& t, const ir::ValueType& inferred) {
  const ir::ValueType& declared = t.type();
  if (!declared.isTensor() || !inferred.isTensor() || !declared.known()) return;
  const TensorInfo& d = declared.info;
  const TensorInfo& i = inferred.info;
  auto mismatch = [&] {
    GRAFT_THROW("graph output '{}' is declared {}, but {} computes {}", t.id(), d.str(), n.describe(), i.str());
  };
  if (d.dataType() != DataType::Undefined && i.dataType() != DataType::Undefined && d.dataType() != i.dataType())
    mismatch();
  if (!d.hasShape() || !i.hasShape()) return;
  if (d.rank() != i.rank()) mismatch();
  for (size_t k = 0; k < d.dims().size(); ++k)
    if (d.dims()[k].known() && i.dims()[k].known() && d.dims()[k].value != i.dims()[k].value) mismatch();
}

}  // namespace

// A sequence or optional counts as inferred even when its element type is not: its kind is news
// to a tensor of unknown type.
ir::ValueType mergeType(const ir::ValueType& old, const ir::ValueType& inf) {
  if (!inf.known() && inf.isTensor()) return old;
  ir::ValueType out = inf;
  if (old.kind == inf.kind && old.optionalOf == inf.optionalOf) out.info = mergeInfo(old.info, inf.info);
  return out;
}

bool inferNode(ir::Node& n, bool weightsAreConstant) {
  std::vector<ir::ValueType> in;
  std::vector<const NDArray*> consts;
  for (ir::Tensor* t : n.inputs()) {
    in.push_back(t ? t->type() : ir::ValueType{});
    consts.push_back(isConstant(t, weightsAreConstant) ? t->data() : nullptr);
  }
  const OpDef* def = Registry::instance().find(n);
  std::vector<ir::ValueType> out;
  if (def && def->infer) {
    try {
      out = def->infer(n, in, consts);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.find(n.describe()) == std::string::npos) GRAFT_THROW("{}: {}", n.describe(), msg);
      throw;
    }
  } else {
    out = onnxio::inferWithOnnxSchema(n, in, consts);
    bool none = std::all_of(out.begin(), out.end(), [](const ir::ValueType& v) { return v.isTensor() && !v.known(); });
    const InferFn* fallback = none ? findFallbackInfer(n.domain(), n.type()) : nullptr;
    if (fallback) out = (*fallback)(n, in, consts);
  }
  bool changed = false;
  for (size_t i = 0; i < n.numOutputs() && i < out.size(); ++i) {
    ir::Tensor* t = n.output(i);
    if (!t) continue;
    if (t->isGraphOutput()) checkDeclaredOutput(n, *t, out[i]);
    ir::ValueType merged = mergeType(t->type(), out[i]);
    if (!(merged == t->type())) {
      t->setType(merged);
      changed = true;
    }
  }
  return changed;
}

}  // namespace graft::ops
