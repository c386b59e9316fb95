#pragma once
// GradBuilder: what an op's VJP sees. A VJP adds ordinary nodes (forward ops wherever possible)
// that compute the gradients of the node's inputs from the gradients of its outputs.
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace graft::ops {

class GradBuilder {
 public:
  /// `dys[i]`: gradient flowing into output i (nullptr: none). `wanted[i]`: whether the
  /// gradient of input i is needed.
  GradBuilder(ir::Graph& g, ir::Node& forward, std::vector<ir::Tensor*> dys, std::vector<bool> wanted);

  const ir::Node& node() const { return fwd_; }
  ir::Graph& graph() { return g_; }
  /// Forward input / output tensors (readable in the backward pass).
  ir::Tensor* in(size_t i) const { return fwd_.input(i); }
  ir::Tensor* out(size_t i) const { return fwd_.output(i); }
  /// Gradient flowing into output i; zeros shaped like the output when none flows.
  ir::Tensor* dy(size_t i = 0);
  bool hasDy(size_t i) const { return i < dys_.size() && dys_[i]; }
  /// Whether the gradient of input i is needed.
  bool wants(size_t i) const { return i < wanted_.size() && wanted_[i]; }
  /// Sets the gradient of input i; it must have the input's shape (see unbroadcast).
  void setDx(size_t i, ir::Tensor* g);
  const std::vector<ir::Tensor*>& dxs() const { return dxs_; }

  // Node builders. Every node is typed (inferred) as it is added.
  ir::Tensor* op(const std::string& type, const std::vector<ir::Tensor*>& inputs, ir::Attributes attrs = {},
                 const std::string& domain = "");
  /// `present`: which outputs to create (empty: all); the others are omitted (nullptr), so that
  /// the kernel does not compute a gradient nothing reads.
  std::vector<ir::Tensor*> opN(const std::string& type, const std::vector<ir::Tensor*>& inputs, size_t numOutputs,
                               ir::Attributes attrs = {}, const std::string& domain = "",
                               const std::vector<bool>& present = {});
  ir::Tensor* constant(NDArray value);
  /// A rank-0 constant of the dtype of `like`.
  ir::Tensor* scalarLike(double value, const ir::Tensor* like);
  /// A 1-D INT64 constant.
  ir::Tensor* int64s(const std::vector<int64_t>& values);
  ir::Tensor* add(ir::Tensor* a, ir::Tensor* b) { return op("Add", {a, b}); }
  ir::Tensor* sub(ir::Tensor* a, ir::Tensor* b) { return op("Sub", {a, b}); }
  ir::Tensor* mul(ir::Tensor* a, ir::Tensor* b) { return op("Mul", {a, b}); }
  ir::Tensor* div(ir::Tensor* a, ir::Tensor* b) { return op("Div", {a, b}); }
  ir::Tensor* neg(ir::Tensor* a) { return op("Neg", {a}); }
  ir::Tensor* scale(ir::Tensor* a, double s) { return mul(a, scalarLike(s, a)); }
  /// Sums `g` over the dimensions along which `like` was broadcast, giving like's shape.
  ir::Tensor* unbroadcast(ir::Tensor* g, ir::Tensor* like);
  /// Zeros with the shape and dtype of `like`.
  ir::Tensor* zerosLike(ir::Tensor* like);
  /// g reshaped to the shape of `like`.
  ir::Tensor* reshapeLike(ir::Tensor* g, ir::Tensor* like);
  /// Where(cond, a, b).
  ir::Tensor* where(ir::Tensor* cond, ir::Tensor* a, ir::Tensor* b) { return op("Where", {cond, a, b}); }

 private:
  ir::Graph& g_;
  ir::Node& fwd_;
  std::vector<ir::Tensor*> dys_, dxs_;
  std::vector<bool> wanted_;
  std::string base_;
};

}  // namespace graft::ops
