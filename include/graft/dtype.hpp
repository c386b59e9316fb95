#pragma once
/// @file dtype.hpp  Element types, numbered as ONNX's TensorProto.DataType.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace graft {

/// Element type of a tensor. The values equal ONNX TensorProto.DataType so that they convert
/// without a table.
enum class DataType : int32_t {
  Undefined = 0,
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
  // Low-precision types (ONNX IR 9-13), one element per byte in memory; 4-bit types are packed
  // two to a byte and 2-bit types four to a byte only in ONNX files. Only Cast/CastLike/BitCast,
  // QuantizeLinear/DequantizeLinear and moving ops read them.
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  UInt4 = 21,
  Int4 = 22,
  Float4E2M1 = 23,
  Float8E8M0 = 24,  // unsigned power of two 2^(e-127), 0xFF NaN (MX block scales, IR 12)
  UInt2 = 25,
  Int2 = 26,
};

/// True for the low-precision storage types above (Float8*, UInt4, Int4, Float4E2M1, UInt2, Int2).
bool isLowPrecision(DataType dt);

/// Bytes per element (0 for Undefined; sizeof(std::string) for String, which is stored as objects).
size_t dtypeSize(DataType dt);
/// PopART-style upper-case name: "FLOAT", "FLOAT16", "INT32", "BOOL", ...
std::string_view dtypeName(DataType dt);
/// numpy-style name: "float32", "float16", "int32", "bool", ...
std::string_view dtypeNumpyName(DataType dt);
/// Parses either naming ("FLOAT", "float32", "float", "INT64", "int64", ...).
/// Throws graft::Error naming the string when it is not a type.
DataType dtypeFromString(std::string_view name);
/// True for Float, Double, Float16, BFloat16.
bool isFloatingPoint(DataType dt);
/// True for the signed and unsigned integer types (not Bool).
bool isInteger(DataType dt);

}  // namespace graft
