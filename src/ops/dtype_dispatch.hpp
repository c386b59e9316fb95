#pragma once
// Mapping between DataType and C++ element types, and dispatch of a generic kernel body over
// the element types an op accepts.
#include <graft/dtype.hpp>
#include <graft/ndarray.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "support/check.hpp"
#include "support/float16.hpp"

namespace graft::ops {

template <class T>
struct TypeTag {
  using type = T;
};

template <class T>
constexpr DataType dtypeOf() {
  if constexpr (std::is_same_v<T, float>) return DataType::Float;
  else if constexpr (std::is_same_v<T, double>) return DataType::Double;
  else if constexpr (std::is_same_v<T, Half>) return DataType::Float16;
  else if constexpr (std::is_same_v<T, BFloat16>) return DataType::BFloat16;
  else if constexpr (std::is_same_v<T, int8_t>) return DataType::Int8;
  else if constexpr (std::is_same_v<T, int16_t>) return DataType::Int16;
  else if constexpr (std::is_same_v<T, int32_t>) return DataType::Int32;
  else if constexpr (std::is_same_v<T, int64_t>) return DataType::Int64;
  else if constexpr (std::is_same_v<T, uint8_t>) return DataType::UInt8;
  else if constexpr (std::is_same_v<T, uint16_t>) return DataType::UInt16;
  else if constexpr (std::is_same_v<T, uint32_t>) return DataType::UInt32;
  else if constexpr (std::is_same_v<T, uint64_t>) return DataType::UInt64;
  else if constexpr (std::is_same_v<T, bool>) return DataType::Bool;
  else if constexpr (std::is_same_v<T, std::string>) return DataType::String;
  else static_assert(sizeof(T) == 0, "not a graft element type");
}

/// The type arithmetic happens in: float for Half/BFloat16, the type itself otherwise.
template <class T>
using ComputeType = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

/// A value of T as double, through T's compute type (Half and BFloat16 through float).
template <class T>
double toDouble(T v) {
  return static_cast<double>(static_cast<ComputeType<T>>(v));
}

/// A double as T, through T's compute type (static_cast: integers truncate; ONNX's Cast rules
/// are ops/cast_util.hpp's convertElement).
template <class T>
T fromDouble(double v) {
  return static_cast<T>(static_cast<ComputeType<T>>(v));
}

template <class T>
constexpr bool kIsFloat = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                          std::is_same_v<T, BFloat16>;

// Type sets, as bit masks over DataType codes.
enum TypeSet : uint32_t {
  kFloats = (1u << 1) | (1u << 10) | (1u << 11) | (1u << 16),
  kSignedInts = (1u << 3) | (1u << 5) | (1u << 6) | (1u << 7),
  kUnsignedInts = (1u << 2) | (1u << 4) | (1u << 12) | (1u << 13),
  kInts = kSignedInts | kUnsignedInts,
  kNumeric = kFloats | kInts,
  kSignedNumeric = kFloats | kSignedInts,
  kBool = 1u << 9,
  kNumericBool = kNumeric | kBool,
  kString = 1u << 8,
  kAll = kNumericBool | kString,
};

/// Calls f(TypeTag<T>{}) with the C++ type of `dt`, which must be in `set`; otherwise throws
/// graft::Error "<what>: unsupported data type X".
template <uint32_t Set, class F>
decltype(auto) dispatch(DataType dt, const std::string& what, F&& f) {
  auto code = static_cast<uint32_t>(dt);
  if (code >= 32 || !((Set >> code) & 1u)) GRAFT_THROW("{}: unsupported data type {}", what, dtypeName(dt));
  switch (dt) {
    case DataType::Float: if constexpr ((Set >> 1) & 1u) return f(TypeTag<float>{}); break;
    case DataType::UInt8: if constexpr ((Set >> 2) & 1u) return f(TypeTag<uint8_t>{}); break;
    case DataType::Int8: if constexpr ((Set >> 3) & 1u) return f(TypeTag<int8_t>{}); break;
    case DataType::UInt16: if constexpr ((Set >> 4) & 1u) return f(TypeTag<uint16_t>{}); break;
    case DataType::Int16: if constexpr ((Set >> 5) & 1u) return f(TypeTag<int16_t>{}); break;
    case DataType::Int32: if constexpr ((Set >> 6) & 1u) return f(TypeTag<int32_t>{}); break;
    case DataType::Int64: if constexpr ((Set >> 7) & 1u) return f(TypeTag<int64_t>{}); break;
    case DataType::String: if constexpr ((Set >> 8) & 1u) return f(TypeTag<std::string>{}); break;
    case DataType::Bool: if constexpr ((Set >> 9) & 1u) return f(TypeTag<bool>{}); break;
    case DataType::Float16: if constexpr ((Set >> 10) & 1u) return f(TypeTag<Half>{}); break;
    case DataType::Double: if constexpr ((Set >> 11) & 1u) return f(TypeTag<double>{}); break;
    case DataType::UInt32: if constexpr ((Set >> 12) & 1u) return f(TypeTag<uint32_t>{}); break;
    case DataType::UInt64: if constexpr ((Set >> 13) & 1u) return f(TypeTag<uint64_t>{}); break;
    case DataType::BFloat16: if constexpr ((Set >> 16) & 1u) return f(TypeTag<BFloat16>{}); break;
    default: break;
  }
  GRAFT_THROW("{}: unsupported data type {}", what, dtypeName(dt));
}

/// The elements of a floating-point array as doubles (for kernels that compute in double).
inline std::vector<double> readAsDoubles(const NDArray& a, const std::string& what) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  dispatch<kFloats>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = a.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) v[i] = static_cast<double>(static_cast<ComputeType<T>>(p[i]));
  });
  return v;
}

/// A new floating-point array of type `dt` holding `v` rounded to the element type.
inline NDArray arrayFromDoubles(const std::vector<double>& v, DataType dt, const Shape& shape, const std::string& what) {
  NDArray out = NDArray::uninitialized(dt, shape);
  dispatch<kFloats>(dt, what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<T>(static_cast<ComputeType<T>>(v[i]));
  });
  return out;
}

}  // namespace graft::ops
