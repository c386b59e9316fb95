#include "ops/grad.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/float16.hpp"

namespace graft::ops {

GradBuilder::GradBuilder(ir::Graph& g, ir::Node& forward, std::vector<ir::Tensor*> dys, std::vector<bool> wanted)
    : g_(g), fwd_(forward), dys_(std::move(dys)), dxs_(forward.numInputs(), nullptr), wanted_(std::move(wanted)) {
  base_ = forward.name().empty() ? (forward.output(0) ? forward.output(0)->id() : forward.type()) : forward.name();
}

ir::Tensor* GradBuilder::dy(size_t i) {
  if (i >= dys_.size()) dys_.resize(i + 1, nullptr);
  if (!dys_[i]) dys_[i] = zerosLike(out(i));
  return dys_[i];
}

void GradBuilder::setDx(size_t i, ir::Tensor* g) {
  GRAFT_ASSERT(i < dxs_.size(), "{}: gradient for input {} of {}", fwd_.describe(), i, dxs_.size());
  if (!wants(i)) return;
  const ir::Tensor* x = in(i);
  if (x && x->info().isStatic() && g->info().isStatic())
    GRAFT_ASSERT(x->info().shape() == g->info().shape(), "{}: gradient of input {} has shape {}, the input {}",
                 fwd_.describe(), i, shapeToString(g->info().shape()), shapeToString(x->info().shape()));
  dxs_[i] = g;
}

std::vector<ir::Tensor*> GradBuilder::opN(const std::string& type, const std::vector<ir::Tensor*>& inputs,
                                          size_t numOutputs, ir::Attributes attrs, const std::string& domain,
                                          const std::vector<bool>& present) {
  std::vector<std::string> outs;
  // Distinct candidates per output: uniqueId cannot see ids that are not in the graph yet.
  for (size_t i = 0; i < numOutputs; ++i)
    outs.push_back(i < present.size() && !present[i]
                       ? std::string()
                       : g_.uniqueId(base_ + "/grad/" + type + (numOutputs > 1 ? ":" + std::to_string(i) : "")));
  ir::Node* n = g_.addNode(type, domain, inputs, outs, std::move(attrs), g_.uniqueId(base_ + "/grad/" + type));
  n->virtualGraph = fwd_.virtualGraph;
  n->pipelineStage = fwd_.pipelineStage;
  if (!domain.empty() && !g_.otherOpsets.count(domain)) g_.otherOpsets[domain] = 1;
  inferNode(*n, false);
  return n->outputs();
}

ir::Tensor* GradBuilder::op(const std::string& type, const std::vector<ir::Tensor*>& inputs, ir::Attributes attrs,
                            const std::string& domain) {
  return opN(type, inputs, 1, std::move(attrs), domain)[0];
}

ir::Tensor* GradBuilder::constant(NDArray value) {
  return g_.addInitializer(g_.uniqueId(base_ + "/grad/const"), std::move(value), ir::TensorKind::Constant);
}

ir::Tensor* GradBuilder::scalarLike(double value, const ir::Tensor* like) {
  DataType dt = like->info().dataType();
  NDArray a(dt, {});
  switch (dt) {
    case DataType::Float:
      *a.data<float>() = static_cast<float>(value);
      break;
    case DataType::Double:
      *a.data<double>() = value;
      break;
    case DataType::Float16:
      *a.data<Half>() = Half(static_cast<float>(value));
      break;
    case DataType::BFloat16:
      *a.data<BFloat16>() = BFloat16(static_cast<float>(value));
      break;
    default:
      // Integer gradients (an integer loss, as PopART trains): the value in the integer type.
      GRAFT_CHECK(isInteger(dt), "{}: gradients need floating-point or integer tensors, '{}' is {}", fwd_.describe(),
                  like->id(), dtypeName(dt));
      dispatch<kInts>(dt, fwd_.describe(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        *a.data<T>() = static_cast<T>(value);
      });
  }
  return constant(std::move(a));
}

ir::Tensor* GradBuilder::int64s(const std::vector<int64_t>& values) {
  NDArray a(DataType::Int64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) a.data<int64_t>()[i] = values[i];
  return constant(std::move(a));
}

ir::Tensor* GradBuilder::unbroadcast(ir::Tensor* g, ir::Tensor* like) {
  if (g->info().isStatic() && like->info().isStatic() && g->info().shape() == like->info().shape()) return g;
  return op("UnbroadcastTo", {g, like}, {}, kGraftDomain);
}

ir::Tensor* GradBuilder::zerosLike(ir::Tensor* like) { return op("ZerosLike", {like}, {}, kGraftDomain); }

ir::Tensor* GradBuilder::reshapeLike(ir::Tensor* g, ir::Tensor* like) {
  if (g->info().isStatic() && like->info().isStatic() && g->info().shape() == like->info().shape()) return g;
  // A constant target shape keeps the result's shape known to the VJPs that follow (a Shape
  // node is only folded later); allowzero because `like` may have zero-sized dimensions.
  if (like->info().isStatic()) {
    ir::Attributes a;
    a.set("allowzero", int64_t{1});
    return op("Reshape", {g, int64s(like->info().shape())}, a);
  }
  return op("Reshape", {g, op("Shape", {like})});
}

}  // namespace graft::ops
