// fold-constants: nodes whose inputs are all constant are evaluated now, with the reference
// kernels, and replaced by Constant tensors. Shape and Size of statically shaped tensors fold
// too, which turns shape computations (Shape -> Gather -> Concat -> Reshape) into constants, and
// RandomUniformLike / RandomNormalLike of statically shaped tensors become RandomUniform /
// RandomNormal (their values are random, so they are not evaluated).
#include "ops/evaluate.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft::passes {
namespace {

bool isConstant(const ir::Tensor* t, const PassContext& ctx) {
  if (!t || !t->data()) return false;
  return t->kind() == ir::TensorKind::Constant || (ctx.weightsAreConstant && t->kind() == ir::TensorKind::Variable);
}

// Folds Shape/Size of a tensor whose shape is known. Returns the value, or an invalid array.
NDArray foldShapeOf(const ir::Node& n) {
  const ir::Tensor* x = n.input(0);
  if (!x || !x->type().isTensor() || !x->info().isStatic()) return {};
  Shape s = x->info().shape();
  if (n.type() == "Size") return NDArray::scalar<int64_t>(DataType::Int64, shapeNumel(s));
  int64_t r = static_cast<int64_t>(s.size());
  auto clampIdx = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  int64_t b = clampIdx(n.attrInt("start", 0)), e = n.attrs().has("end") ? clampIdx(n.attrInt("end")) : r;
  int64_t len = std::max<int64_t>(0, e - b);
  NDArray out(DataType::Int64, {len});
  for (int64_t i = 0; i < len; ++i) out.data<int64_t>()[i] = s[b + i];
  return out;
}

void replaceWithConstant(ir::Graph& g, ir::Node* n, std::vector<ops::Value> values) {
  std::vector<ir::Tensor*> outs = n->outputs();
  g.removeNode(n);
  for (size_t i = 0; i < outs.size(); ++i) {
    ir::Tensor* t = outs[i];
    if (!t) continue;
    GRAFT_ASSERT(values[i].isTensor(), "folded output {} is not a tensor", t->id());
    t->setKind(ir::TensorKind::Constant);
    t->setType(ir::ValueType::tensor(TensorInfo(values[i].tensor.dtype(), values[i].tensor.shape())));
    t->setData(std::move(values[i].tensor));
  }
}

// RandomUniformLike / RandomNormalLike read only their input's type: on a statically shaped input
// they become RandomUniform / RandomNormal with that shape and dtype (and draw the same numbers:
// ops/random.cpp keys a node's stream the same for both forms).
bool foldRandomLike(ir::Graph& g, ir::Node* n) {
  if (!n->domain().empty() || (n->type() != "RandomUniformLike" && n->type() != "RandomNormalLike")) return false;
  const ir::Tensor* x = n->input(0);
  ir::Tensor* y = n->output(0);
  if (!x || !y || !x->type().isTensor() || !x->info().isStatic()) return false;
  ir::Attributes a = n->attrs();
  // Without a dtype the output takes the input's type, which must then be a floating-point one:
  // otherwise the node stays, to report that itself.
  if (!a.has("dtype") && !isFloatingPoint(x->info().dataType())) return false;
  if (!a.has("dtype")) a.set("dtype", static_cast<int64_t>(x->info().dataType()));
  a.set("shape", x->info().shape());
  std::string type = n->type().substr(0, n->type().size() - 4), name = n->name();
  auto vg = n->virtualGraph;
  auto stage = n->pipelineStage;
  g.removeNode(n);
  ir::Node* r = g.addNode(type, "", {}, {""}, std::move(a), name);
  g.setOutput(r, 0, y);
  r->virtualGraph = vg;
  r->pipelineStage = stage;
  return true;
}

class FoldConstants : public Pass {
 public:
  std::string_view name() const override { return "fold-constants"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    bool changed = false;
    for (ir::Node* n : g.schedule()) {
      if (foldRandomLike(g, n)) {
        changed = true;
        continue;
      }
      const ops::OpDef* def = ops::Registry::instance().find(*n);
      if (!def || !def->reference || !ops::repeatable(*n)) continue;
      bool allOutputsTensors = true;
      for (ir::Tensor* t : n->outputs())
        if (t && t->type().known() && !t->type().isTensor()) allOutputsTensors = false;
      if (!allOutputsTensors) continue;
      if ((n->type() == "Shape" || n->type() == "Size") && n->domain().empty()) {
        NDArray v = foldShapeOf(*n);
        if (v.valid()) {
          std::vector<ops::Value> vals{ops::Value::fromTensor(std::move(v))};
          replaceWithConstant(g, n, std::move(vals));
          changed = true;
          continue;
        }
      }
      bool allConst = n->numInputs() > 0 || n->type() == "Constant";
      for (ir::Tensor* t : n->inputs())
        if (t && !isConstant(t, ctx)) allConst = false;
      if (!allConst) continue;
      // Skip results known to be large.
      bool tooLarge = false;
      for (ir::Tensor* t : n->outputs())
        if (t && t->info().isStatic() && t->info().dataType() != DataType::Undefined &&
            t->info().nbytes() > ctx.foldLimitBytes)
          tooLarge = true;
      if (tooLarge) continue;
      std::vector<ops::Value> inputs;
      for (ir::Tensor* t : n->inputs()) inputs.push_back(t ? ops::Value::fromTensor(*t->data()) : ops::Value{});
      std::vector<ops::Value> outs;
      try {
        outs = ops::evaluateNode(*n, inputs, ops::serialPool());
      } catch (const Error& e) {
        // The same error will surface, with its context, when the graph runs.
        GRAFT_LOG_DEBUG("not folding {}: {}", n->describe(), e.what());
        continue;
      }
      bool ok = true;
      size_t bytes = 0;
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!n->output(i)) continue;
        if (!outs[i].isTensor())
          ok = false;
        else
          bytes += outs[i].tensor.nbytes();
      }
      if (!ok || bytes > ctx.foldLimitBytes) continue;
      replaceWithConstant(g, n, std::move(outs));
      changed = true;
    }
    return changed;
  }
};

GRAFT_REGISTER_PASS("fold-constants", FoldConstants);

}  // namespace
}  // namespace graft::passes
