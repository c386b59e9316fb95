#pragma once
// Shape arithmetic shared by op families: broadcasting, axes, strides.
#include <graft/ndarray.hpp>

#include <string>
#include <vector>

#include "support/check.hpp"

namespace graft::ops {

/// Row-major strides (in elements) of a shape.
std::vector<int64_t> stridesOf(const Shape& shape);
/// Numpy-style broadcast of two shapes; throws graft::Error mentioning `what` when they don't.
Shape broadcastShapes(const Shape& a, const Shape& b, const std::string& what);
/// Broadcast of several shapes.
Shape broadcastShapes(const std::vector<Shape>& shapes, const std::string& what);
/// Strides of `in` viewed as broadcast to `out` (0 on broadcast dimensions). in's rank <= out's.
std::vector<int64_t> broadcastStrides(const Shape& in, const Shape& out);
/// Maps a possibly negative axis into [0, rank); throws naming `what` when out of range.
int64_t normalizeAxis(int64_t axis, int64_t rank, const std::string& what);
/// Same for a list of axes; also rejects duplicates.
std::vector<int64_t> normalizeAxes(const std::vector<int64_t>& axes, int64_t rank, const std::string& what);
/// Reads an integer tensor (int32 or int64) as int64 values.
std::vector<int64_t> toInt64Vector(const NDArray& a);
/// Split's part sizes along an axis of extent `dim` into `n` outputs when no `split` input is
/// given. With opset 18's num_outputs attribute (`numOutputsAttr` > 0; it must equal n) the parts
/// are ceil(dim / n) long and the last one takes what is left, as ONNX's reference does; without
/// it (older opsets, graft's own nodes) the parts must be equal.
std::vector<int64_t> splitEvenSizes(int64_t dim, int64_t n, int64_t numOutputsAttr, const std::string& what);
/// Product of shape[begin:end).
int64_t shapeProduct(const Shape& s, int64_t begin, int64_t end);
/// X viewed as [rows, cols] by a normalisation over the axes from `axis` on (LayerNormalization,
/// RMSNormalization, their gradients): those axes flattened into cols. Throws naming `what` for a
/// scalar X or an axis out of range.
struct AxisRows {
  int64_t axis = 0, rows = 0, cols = 0;
  Shape norm;  ///< the normalised axes' shape (what Scale and B broadcast to)
};
AxisRows axisRows(const NDArray& x, int64_t axisAttr, const std::string& what);
/// The output shape of concatenating `inputs` (all of the first's dtype and rank, equal outside
/// `axis`) along `axis`, already normalised; throws naming `what` and the input that differs.
Shape concatShape(const std::vector<const NDArray*>& inputs, int64_t axis, const std::string& what);
/// Every flat offset reached by iterating `dims` row-major with the given strides, in order.
std::vector<int64_t> offsetsOf(const Shape& dims, const std::vector<int64_t>& strides);

/// Iterates over an output shape, keeping for each of N inputs the flat offset of the element
/// that broadcasts to the current output position. The innermost dimension is handed to the
/// callback as a run: fn(offsets[N] at run start, innerStrides[N], runLength).
template <size_t N, class F>
void forEachBroadcastRun(const Shape& out, const std::array<std::vector<int64_t>, N>& strides, F&& fn) {
  int64_t rank = static_cast<int64_t>(out.size());
  int64_t total = shapeNumel(out);
  if (total == 0) return;
  std::array<int64_t, N> offs{};
  std::array<int64_t, N> inner{};
  if (rank == 0) {
    fn(offs, inner, int64_t{1});
    return;
  }
  for (size_t k = 0; k < N; ++k) inner[k] = strides[k][rank - 1];
  int64_t len = out[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  int64_t runs = total / len;
  for (int64_t r = 0; r < runs; ++r) {
    fn(offs, inner, len);
    for (int64_t d = rank - 2; d >= 0; --d) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) offs[k] += strides[k][d];
      if (idx[d] < out[d]) break;
      for (size_t k = 0; k < N; ++k) offs[k] -= strides[k][d] * out[d];
      idx[d] = 0;
    }
  }
}

}  // namespace graft::ops
