#pragma once
// Building blocks for the VJPs of data-movement ops (gathers, scatters, slices, pads, tiles):
// shape tensors that stay constant when shapes are static (so the backward graph keeps static
// types), transposes, and adjoints of "pick along an axis". All of them add ordinary forward
// ops through a GradBuilder.
#include <optional>
#include <vector>

#include "ops/grad.hpp"

namespace graft::ops::gradutil {

/// The rank of `t`; throws graft::Error naming the node when it is unknown.
int64_t rankOf(GradBuilder& g, const ir::Tensor* t);
/// `axis` (negative counts from the end) in [0, rank); throws naming the node otherwise.
int64_t normAxis(GradBuilder& g, int64_t axis, int64_t rank);

/// The values of an INT32/INT64 tensor known when the graph is built (an initializer constant
/// or the output of a Constant node); nullopt otherwise.
std::optional<std::vector<int64_t>> constantInts(const ir::Tensor* t);

/// A rank-0 INT64 constant.
ir::Tensor* scalarInt64(GradBuilder& g, int64_t v);
/// `t` as INT64 (a Cast unless it already is).
ir::Tensor* toInt64(GradBuilder& g, ir::Tensor* t);

/// shape(t)[start:end] as a 1-D INT64 tensor: a constant when those dimensions are static, a
/// Shape node otherwise (also when the rank is unknown). `end` past the rank is clamped.
ir::Tensor* shapeOf(GradBuilder& g, ir::Tensor* t, int64_t start = 0, std::optional<int64_t> end = std::nullopt);
/// shape(t)[axis] as a 1-D INT64 tensor of one element.
ir::Tensor* dimOf(GradBuilder& g, ir::Tensor* t, int64_t axis);
/// Concatenation of 1-D INT64 tensors (constants fold into one constant).
ir::Tensor* concatInts(GradBuilder& g, const std::vector<ir::Tensor*>& parts);
/// Reshape(t, shape) where `shape` holds no -1 (allowzero, so empty dimensions stay empty).
ir::Tensor* reshapeTo(GradBuilder& g, ir::Tensor* t, ir::Tensor* shape);
/// `t` reshaped to the shape of `like` (nothing when the static shapes already agree).
ir::Tensor* reshapeLike(GradBuilder& g, ir::Tensor* t, ir::Tensor* like);
/// Transpose(t, perm); `t` itself when perm is the identity.
ir::Tensor* transpose(GradBuilder& g, ir::Tensor* t, const std::vector<int64_t>& perm);
/// Zeros of dtype `like` with the shape held by the 1-D INT64 tensor `shape`.
ir::Tensor* zerosOfShape(GradBuilder& g, ir::Tensor* shape, ir::Tensor* like);

/// The adjoint of Gather along `axis`: `upd` has the shape pre + indices.shape + post, where pre
/// has `axis` dimensions; the result has shape pre + [n] + post (n the 1-element INT64 tensor
/// `dim`) and holds, at every position i of the axis, the sum of the slices of `upd` whose index
/// is i. Repeated indices accumulate; negative ones wrap. One ScatterND with reduction add,
/// between transposes that bring the indexed dimensions to the front (none when axis is 0).
ir::Tensor* scatterAddAlongAxis(GradBuilder& g, ir::Tensor* upd, ir::Tensor* indices, int64_t axis, ir::Tensor* dim);

/// For 1-D INT64 `idx` of m DISTINCT positions in [0, n) (n: the 1-element INT64 tensor `dim`),
/// the INT64 vector inv of length n with inv[idx[k]] = k and inv[j] = m at positions no index
/// names. Gathering along an axis with inv from a gradient padded with one zero slice at the end
/// of that axis (see padEndOnAxes) is the adjoint of gathering with idx, without any scatter of
/// the gradient itself.
ir::Tensor* inversePositions(GradBuilder& g, ir::Tensor* idx, ir::Tensor* dim);
/// `t` with one zero slice appended to each of `axes`.
ir::Tensor* padEndOnAxes(GradBuilder& g, ir::Tensor* t, const std::vector<int64_t>& axes);
/// d/dx of GELU's erf form y = x Phi(x) = x/2 (1 + erf(x / sqrt 2)): Phi(x) + x phi(x), as
/// ai.graft GeluErfGrad(x, y) (Phi from y: one erf where the forward is in the same loop).
ir::Tensor* geluErfDerivative(GradBuilder& g, ir::Tensor* x, ir::Tensor* y);

}  // namespace graft::ops::gradutil
