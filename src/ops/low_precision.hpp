#pragma once
// The low-precision element types (float8 E4M3FN/E4M3FNUZ/E5M2/E5M2FNUZ, float4 E2M1, int4, uint4):
// conversions to and from double, as ONNX's Cast defines them (the onnx package's reference,
// which follows ml_dtypes). One element per byte in memory; see graft/dtype.hpp.
#include <cstdint>
#include <string>

#include <graft/ndarray.hpp>

namespace graft::ops {

/// The value of one element (its byte) of low-precision type `dt`.
double lowPrecisionToDouble(DataType dt, uint8_t code);
/// The element of low-precision type `dt` nearest to v (ties to even). Float8 out of range:
/// the largest finite value with `saturate`, else infinity (E5M2) or NaN. Float4 always saturates
/// (NaN becomes -0, as ml_dtypes). Int4/UInt4: truncated toward zero, 0 when out of range or NaN.
uint8_t lowPrecisionFromDouble(DataType dt, double v, bool saturate);
/// Cast where the source or target type (or both) is low-precision; others go through double.
NDArray castLowPrecision(const NDArray& x, DataType to, bool saturate, const std::string& what);

}  // namespace graft::ops
