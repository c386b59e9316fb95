#include "ops/shape_util.hpp"

#include <algorithm>
#include <set>

namespace graft::ops {

std::vector<int64_t> stridesOf(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

Shape broadcastShapes(const Shape& a, const Shape& b, const std::string& what) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else GRAFT_THROW("{}: shapes {} and {} do not broadcast", what, shapeToString(a), shapeToString(b));
  }
  return out;
}

Shape broadcastShapes(const std::vector<Shape>& shapes, const std::string& what) {
  Shape out;
  for (const auto& s : shapes) out = broadcastShapes(out, s, what);
  return out;
}

std::vector<int64_t> broadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st = stridesOf(in);
  std::vector<int64_t> res(out.size(), 0);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) res[off + i] = in[i] == 1 && out[off + i] != 1 ? 0 : st[i];
  return res;
}

int64_t normalizeAxis(int64_t axis, int64_t rank, const std::string& what) {
  GRAFT_CHECK(axis >= -rank && axis < rank,
              "{}: axis {} is out of range for rank {}", what, axis, rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> normalizeAxes(const std::vector<int64_t>& axes, int64_t rank, const std::string& what) {
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    GRAFT_CHECK(a >= -rank && a < rank, "{}: axis {} is out of range for rank {}", what, a, rank);
    int64_t n = a < 0 ? a + rank : a;
    GRAFT_CHECK(seen.insert(n).second, "{}: axis {} is given twice", what, a);
    out.push_back(n);
  }
  return out;
}

std::vector<int64_t> splitEvenSizes(int64_t dim, int64_t n, int64_t numOutputsAttr, const std::string& what) {
  GRAFT_CHECK(n > 0, "{}: Split needs at least one output", what);
  if (numOutputsAttr <= 0) {
    GRAFT_CHECK(dim % n == 0, "{}: axis of size {} cannot be split into {} equal parts (opset 18 and later: set "
                "num_outputs for a smaller last part)", what, dim, n);
    return std::vector<int64_t>(static_cast<size_t>(n), dim / n);
  }
  GRAFT_CHECK(numOutputsAttr == n, "{}: num_outputs is {} but the node has {} outputs", what, numOutputsAttr, n);
  int64_t part = (dim + n - 1) / n;
  std::vector<int64_t> sizes(static_cast<size_t>(n), part);
  int64_t last = dim - part * (n - 1);
  GRAFT_CHECK(last >= 0, "{}: an axis of size {} cannot be split into {} parts of {} (num_outputs {}): the last part "
              "would be empty or negative", what, dim, n, part, n);
  sizes.back() = last;
  return sizes;
}

std::vector<int64_t> toInt64Vector(const NDArray& a) {
  std::vector<int64_t> v(static_cast<size_t>(a.numel()));
  if (a.dtype() == DataType::Int64) {
    std::copy(a.data<int64_t>(), a.data<int64_t>() + a.numel(), v.begin());
  } else if (a.dtype() == DataType::Int32) {
    std::copy(a.data<int32_t>(), a.data<int32_t>() + a.numel(), v.begin());
  } else {
    GRAFT_THROW("expected an INT64 or INT32 tensor, got {}", dtypeName(a.dtype()));
  }
  return v;
}

int64_t shapeProduct(const Shape& s, int64_t begin, int64_t end) {
  int64_t p = 1;
  for (int64_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

AxisRows axisRows(const NDArray& x, int64_t axisAttr, const std::string& what) {
  GRAFT_CHECK(x.rank() >= 1, "{}: X must have rank >= 1, got a scalar", what);
  AxisRows a;
  a.axis = normalizeAxis(axisAttr, x.rank(), what);
  a.norm.assign(x.shape().begin() + a.axis, x.shape().end());
  a.rows = shapeProduct(x.shape(), 0, a.axis);
  a.cols = shapeNumel(a.norm);
  return a;
}

Shape concatShape(const std::vector<const NDArray*>& inputs, int64_t axis, const std::string& what) {
  GRAFT_CHECK(!inputs.empty(), "{}: no inputs to concatenate", what);
  const NDArray& first = *inputs[0];
  int64_t r = first.rank();
  Shape os = first.shape();
  os[axis] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const NDArray& x = *inputs[i];
    GRAFT_CHECK(x.dtype() == first.dtype(), "{}: input {} has dtype {}, expected {}", what, i, dtypeName(x.dtype()),
                dtypeName(first.dtype()));
    GRAFT_CHECK(x.rank() == r, "{}: input {} has rank {}, expected {}", what, i, x.rank(), r);
    for (int64_t d = 0; d < r; ++d)
      GRAFT_CHECK(d == axis || x.dim(d) == first.dim(d), "{}: input {} has shape {}, which differs from {} outside axis {}",
                  what, i, shapeToString(x.shape()), shapeToString(first.shape()), axis);
    os[axis] += x.dim(axis);
  }
  return os;
}

std::vector<int64_t> offsetsOf(const Shape& dims, const std::vector<int64_t>& strides) {
  int64_t total = shapeNumel(dims);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(total));
  if (total == 0) return out;
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < total; ++i) {
    out.push_back(off);
    for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < dims[d]) break;
      off -= strides[d] * dims[d];
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace graft::ops
