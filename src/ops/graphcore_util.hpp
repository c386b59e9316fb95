#pragma once
// Helpers shared by the ai.graphcore op families (src/ops/graphcore_*.cpp).
#include <vector>

#include "ops/dtype_dispatch.hpp"

namespace graft::ops {

/// Reads a tensor of any integer type as int64 values: PopART's offsets and lengths are UINT32.
inline std::vector<int64_t> anyIntToInt64Vector(const NDArray& a) {
  std::vector<int64_t> v(static_cast<size_t>(a.numel()));
  dispatch<kInts>(a.dtype(), "an integer tensor", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < a.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<int64_t>(a.data<T>()[i]);
  });
  return v;
}

}  // namespace graft::ops
