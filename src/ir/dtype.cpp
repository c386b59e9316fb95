#include <graft/dtype.hpp>

#include <array>
#include <string>

#include "support/check.hpp"

namespace graft {
namespace {
struct TypeRow {
  DataType dt;
  size_t size;
  std::string_view name;
  std::string_view numpy;
};
// Indexed by the enum value (ONNX numbering).
constexpr std::array<TypeRow, 27> kTypes = {{
    {DataType::Undefined, 0, "UNDEFINED", "undefined"},
    {DataType::Float, 4, "FLOAT", "float32"},
    {DataType::UInt8, 1, "UINT8", "uint8"},
    {DataType::Int8, 1, "INT8", "int8"},
    {DataType::UInt16, 2, "UINT16", "uint16"},
    {DataType::Int16, 2, "INT16", "int16"},
    {DataType::Int32, 4, "INT32", "int32"},
    {DataType::Int64, 8, "INT64", "int64"},
    {DataType::String, sizeof(std::string), "STRING", "str"},
    {DataType::Bool, 1, "BOOL", "bool"},
    {DataType::Float16, 2, "FLOAT16", "float16"},
    {DataType::Double, 8, "DOUBLE", "float64"},
    {DataType::UInt32, 4, "UINT32", "uint32"},
    {DataType::UInt64, 8, "UINT64", "uint64"},
    {DataType::Complex64, 8, "COMPLEX64", "complex64"},
    {DataType::Complex128, 16, "COMPLEX128", "complex128"},
    {DataType::BFloat16, 2, "BFLOAT16", "bfloat16"},
    {DataType::Float8E4M3FN, 1, "FLOAT8E4M3FN", "float8_e4m3fn"},
    {DataType::Float8E4M3FNUZ, 1, "FLOAT8E4M3FNUZ", "float8_e4m3fnuz"},
    {DataType::Float8E5M2, 1, "FLOAT8E5M2", "float8_e5m2"},
    {DataType::Float8E5M2FNUZ, 1, "FLOAT8E5M2FNUZ", "float8_e5m2fnuz"},
    {DataType::UInt4, 1, "UINT4", "uint4"},
    {DataType::Int4, 1, "INT4", "int4"},
    {DataType::Float4E2M1, 1, "FLOAT4E2M1", "float4_e2m1fn"},
    {DataType::Float8E8M0, 1, "FLOAT8E8M0", "float8_e8m0fnu"},
    {DataType::UInt2, 1, "UINT2", "uint2"},
    {DataType::Int2, 1, "INT2", "int2"},
}};

const TypeRow& row(DataType dt) {
  auto i = static_cast<size_t>(dt);
  GRAFT_CHECK(i < kTypes.size(), "unknown data type code {}", static_cast<int>(dt));
  return kTypes[i];
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}
}  // namespace

size_t dtypeSize(DataType dt) { return row(dt).size; }
std::string_view dtypeName(DataType dt) { return row(dt).name; }
std::string_view dtypeNumpyName(DataType dt) { return row(dt).numpy; }

DataType dtypeFromString(std::string_view name) {
  for (const auto& r : kTypes) {
    if (r.dt == DataType::Undefined) continue;
    if (iequal(name, r.name) || iequal(name, r.numpy)) return r.dt;
  }
  struct Alias {
    std::string_view name;
    DataType dt;
  };
  static constexpr Alias kAliases[] = {{"float", DataType::Float},   {"double", DataType::Double},
                                       {"half", DataType::Float16},  {"float32", DataType::Float},
                                       {"string", DataType::String}, {"bool_", DataType::Bool}};
  for (const auto& a : kAliases)
    if (iequal(name, a.name)) return a.dt;
  GRAFT_THROW(
      "unknown data type '{}' (expected one of FLOAT, FLOAT16, BFLOAT16, DOUBLE, INT8, INT16, "
      "INT32, INT64, UINT8, UINT16, UINT32, UINT64, BOOL, STRING, or numpy names such as float32)",
      name);
}

bool isLowPrecision(DataType dt) {
  return static_cast<int>(dt) >= static_cast<int>(DataType::Float8E4M3FN) &&
         static_cast<int>(dt) <= static_cast<int>(DataType::Int2);
}

bool isFloatingPoint(DataType dt) {
  return dt == DataType::Float || dt == DataType::Double || dt == DataType::Float16 || dt == DataType::BFloat16;
}

bool isInteger(DataType dt) {
  switch (dt) {
    case DataType::UInt8:
    case DataType::Int8:
    case DataType::UInt16:
    case DataType::Int16:
    case DataType::Int32:
    case DataType::Int64:
    case DataType::UInt32:
    case DataType::UInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace graft
