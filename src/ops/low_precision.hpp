#pragma once
// The low-precision element types (float8 E4M3FN/E4M3FNUZ/E5M2/E5M2FNUZ/E8M0, float4 E2M1, int4,
// uint4, int2, uint2):
// conversions to and from double, as ONNX's Cast defines them (the onnx package's reference,
// which follows ml_dtypes). One element per byte in memory; see graft/dtype.hpp.
#include <cstdint>
#include <string>
#include <utility>

#include <graft/ndarray.hpp>

namespace graft::ops {

/// How a cast to FLOAT8E8M0 rounds a value between two powers of two (Cast's round_mode).
enum class E8M0Round { Up, Down, Nearest };
/// Parses round_mode; graft::Error naming `what` and the value when it is none of the three.
E8M0Round e8m0RoundFromString(const std::string& mode, const std::string& what);

/// The value range of the narrow integer types (INT4, UINT4, INT2, UINT2); {0, 0} for others.
std::pair<double, double> narrowIntRange(DataType dt);

/// The value of one element (its byte) of low-precision type `dt`.
double lowPrecisionToDouble(DataType dt, uint8_t code);
/// The element of low-precision type `dt` nearest to v (ties to even). Float8 out of range:
/// the largest finite value with `saturate`, else infinity (E5M2) or NaN. Float4 always saturates
/// (NaN becomes -0, as ml_dtypes). Int4/UInt4/Int2/UInt2: truncated toward zero, 0 when out of
/// range or NaN. Float8E8M0: see E8M0Round (via float32, as ONNX's reference).
uint8_t lowPrecisionFromDouble(DataType dt, double v, bool saturate, E8M0Round round = E8M0Round::Up);
/// Cast where the source or target type (or both) is low-precision; others go through double.
NDArray castLowPrecision(const NDArray& x, DataType to, bool saturate, const std::string& what,
                         E8M0Round round = E8M0Round::Up);

}  // namespace graft::ops
