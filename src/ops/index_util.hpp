#pragma once
// Index handling shared by the gather/scatter/select families: reading index tensors, wrapping
// negative indices, walking multi-indices.
#include <graft/ndarray.hpp>

#include <string>
#include <vector>

#include "ops/shape_util.hpp"
#include "support/check.hpp"

namespace graft::ops {

/// Reads an INT32 or INT64 index tensor as int64 values; throws naming `what` and `name`
/// (the input's role) for any other dtype.
inline std::vector<int64_t> readIndexTensor(const NDArray& a, const std::string& what, const char* name) {
  GRAFT_CHECK(a.dtype() == DataType::Int64 || a.dtype() == DataType::Int32, "{}: {} must be INT32 or INT64, got {}",
              what, name, dtypeName(a.dtype()));
  return toInt64Vector(a);
}

/// Maps an index in [-size, size) to [0, size); throws graft::Error naming `what` otherwise.
inline int64_t wrapIndex(int64_t v, int64_t size, const std::string& what, const char* name, int64_t axis) {
  GRAFT_CHECK(v >= -size && v < size, "{}: {} value {} is out of range for axis {} of size {} (expected [{}, {}])",
              what, name, v, axis, size, -size, size - 1);
  return v < 0 ? v + size : v;
}

/// Row-major multi-index walker over a shape: `idx` holds the current position; next() steps
/// to the following one and returns false after the last.
class MultiIndex {
 public:
  explicit MultiIndex(const Shape& shape) : idx(shape.size(), 0), shape_(shape) {}
  bool next() {
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape_[d]) return true;
      idx[d] = 0;
    }
    return false;
  }
  std::vector<int64_t> idx;

 private:
  Shape shape_;
};

}  // namespace graft::ops
