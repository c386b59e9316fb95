#pragma once
// Helpers shared by the quantization families (quantize.cpp, quantize_conv.cpp): reading
// zero points and scales, and rounding to a quantized type.
#include <graft/ndarray.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/dtype_dispatch.hpp"

namespace graft::ops::quant {

/// Rounds half to even (the current rounding mode is round-to-nearest) and saturates to Q's
/// range; NaN becomes 0.
template <class Q>
Q saturateRound(double v) {
  if (std::isnan(v)) return Q(0);
  double r = std::nearbyint(v);
  if (r <= static_cast<double>(std::numeric_limits<Q>::lowest())) return std::numeric_limits<Q>::lowest();
  if (r >= static_cast<double>(std::numeric_limits<Q>::max())) return std::numeric_limits<Q>::max();
  return static_cast<Q>(r);
}

/// Values of an int8/uint8/int32 tensor as int64 (quantized data and zero points).
std::vector<int64_t> readQuantized(const NDArray& a, const std::string& what);
/// Values of a floating-point tensor as float (scales are float32 in opsets <= 17).
std::vector<float> readScales(const NDArray& a, const std::string& what);
/// True when `a` holds one value (a scalar or a 1-element 1-D tensor): per-tensor quantization.
inline bool isPerTensor(const NDArray& a) { return a.numel() == 1 && a.rank() <= 1; }
/// Throws unless `a` is per-tensor or a 1-D tensor of `n` values.
void checkPerTensorOrVector(const NDArray& a, int64_t n, const std::string& what, const char* name, const char* perWhat);
/// Value i of a per-tensor (broadcast) or 1-D parameter.
template <class T>
T at(const std::vector<T>& v, int64_t i) {
  return v.size() == 1 ? v[0] : v[static_cast<size_t>(i)];
}

}  // namespace graft::ops::quant
