#include "ops/axis_copy.hpp"

#include <memory>

#include "ops/copy_util.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// dst[o * dstRow + dstAt + j] = src[o * srcRow + srcAt + j] for o < rows, j < len.
void copyRows(NDArray& dst, int64_t dstRow, int64_t dstAt, const NDArray& src, int64_t srcRow, int64_t srcAt,
              int64_t rows, int64_t len) {
  if (len == 0) return;
  for (int64_t o = 0; o < rows; ++o) copyElements(src, o * srcRow + srcAt, dst, o * dstRow + dstAt, len);
}

}  // namespace

NDArray sliceAxis(const NDArray& x, int64_t axis, int64_t begin, int64_t len) {
  Shape shape = x.shape();
  int64_t inner = shapeProduct(shape, axis + 1, x.rank());
  shape[axis] = len;
  if (axis == 0 || shapeProduct(shape, 0, axis) == 1) {
    // Contiguous: a view that keeps x's buffer alive.
    auto owner = std::make_shared<NDArray>(x);
    char* base = static_cast<char*>(const_cast<void*>(x.rawData()));
    size_t offset = static_cast<size_t>(begin * inner) * dtypeSize(x.dtype());
    return NDArray::wrap(len * inner == 0 ? base : base + offset, x.dtype(), shape, owner);
  }
  NDArray out = NDArray::uninitialized(x.dtype(), shape);
  int64_t outer = shapeProduct(shape, 0, axis);
  copyRows(out, len * inner, 0, x, x.dim(axis) * inner, begin * inner, outer, len * inner);
  return out;
}

NDArray takeAxis(const NDArray& x, int64_t axis, int64_t index) {
  NDArray s = sliceAxis(x, axis, index, 1);
  Shape shape = x.shape();
  shape.erase(shape.begin() + axis);
  return s.reshaped(shape);
}

NDArray concatAxis(const std::vector<NDArray>& parts, int64_t axis, const std::string& what) {
  const NDArray& first = parts.at(0);
  int64_t r = first.rank();
  Shape os = first.shape();
  os[axis] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const NDArray& p = parts[i];
    GRAFT_CHECK(p.dtype() == first.dtype(), "{}: element {} is {}, but element 0 is {}", what, i, dtypeName(p.dtype()),
                dtypeName(first.dtype()));
    GRAFT_CHECK(p.rank() == r, "{}: element {} has rank {} (shape {}), but element 0 has rank {}", what, i, p.rank(),
                shapeToString(p.shape()), r);
    for (int64_t d = 0; d < r; ++d)
      GRAFT_CHECK(d == axis || p.dim(d) == first.dim(d),
                  "{}: element {} has shape {}, which differs from element 0's {} outside axis {}", what, i,
                  shapeToString(p.shape()), shapeToString(first.shape()), axis);
    os[axis] += p.dim(axis);
  }
  NDArray out = NDArray::uninitialized(first.dtype(), os);
  int64_t outer = shapeProduct(os, 0, axis), inner = shapeProduct(os, axis + 1, r);
  int64_t at = 0;
  for (const NDArray& p : parts) {
    int64_t row = p.dim(axis) * inner;
    copyRows(out, os[axis] * inner, at, p, row, 0, outer, row);
    at += row;
  }
  return out;
}

NDArray stackAxis(const std::vector<NDArray>& parts, int64_t axis, bool reverse, const std::string& what) {
  const NDArray& first = parts.at(0);
  for (size_t i = 1; i < parts.size(); ++i) {
    GRAFT_CHECK(parts[i].dtype() == first.dtype(), "{}: element {} is {}, but element 0 is {}", what, i,
                dtypeName(parts[i].dtype()), dtypeName(first.dtype()));
    GRAFT_CHECK(parts[i].shape() == first.shape(),
                "{}: element {} has shape {}, but element 0 has shape {}; stacked "
                "elements must all have the same shape",
                what, i, shapeToString(parts[i].shape()), shapeToString(first.shape()));
  }
  Shape os = first.shape();
  auto n = static_cast<int64_t>(parts.size());
  os.insert(os.begin() + axis, n);
  NDArray out = NDArray::uninitialized(first.dtype(), os);
  int64_t outer = shapeProduct(first.shape(), 0, axis), inner = shapeProduct(first.shape(), axis, first.rank());
  for (int64_t i = 0; i < n; ++i) {
    const NDArray& p = parts[static_cast<size_t>(reverse ? n - 1 - i : i)];
    copyRows(out, n * inner, i * inner, p, inner, 0, outer, inner);
  }
  return out;
}

}  // namespace graft::ops
