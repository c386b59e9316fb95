#pragma once
/// @file tensor_info.hpp  Type and shape of a tensor, with named symbolic dimensions.
#include <graft/dtype.hpp>
#include <graft/ndarray.hpp>

#include <optional>
#include <string>
#include <vector>

namespace graft {

/// One dimension: a known size, a named symbolic size ("batch"), or unknown.
struct Dim {
  int64_t value = -1;  ///< >= 0 when known
  std::string param;   ///< the symbolic name, when value is unknown and the model names it
  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: dims convert from integers
  explicit Dim(std::string name) : param(std::move(name)) {}
  bool known() const { return value >= 0; }
  bool operator==(const Dim&) const = default;
  std::string str() const;
};

/// Data type and shape of a tensor. The shape may be absent (rank unknown), and any dimension may
/// be symbolic. Follows PopART's TensorInfo: TensorInfo("FLOAT", {2, 3}).
class TensorInfo {
 public:
  TensorInfo() = default;
  TensorInfo(DataType dtype, const Shape& shape);
  TensorInfo(DataType dtype, std::vector<Dim> dims);
  TensorInfo(const std::string& dtype, const Shape& shape);
  /// Only the type; the rank is unknown.
  static TensorInfo unranked(DataType dtype);

  DataType dataType() const { return dtype_; }
  void setDataType(DataType dt) { dtype_ = dt; }
  bool hasShape() const { return hasShape_; }
  const std::vector<Dim>& dims() const { return dims_; }
  /// True when the rank and every dimension are known.
  bool isStatic() const;
  /// The concrete shape; throws graft::Error when a dimension is not known.
  Shape shape() const;
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  /// Number of elements; throws when the shape is not static.
  int64_t nelms() const { return shapeNumel(shape()); }
  size_t nbytes() const { return static_cast<size_t>(nelms()) * dtypeSize(dtype_); }
  /// "FLOAT [batch, 3, 224, 224]".
  std::string str() const;
  bool operator==(const TensorInfo&) const = default;

 private:
  DataType dtype_ = DataType::Undefined;
  std::vector<Dim> dims_;
  bool hasShape_ = false;
};

}  // namespace graft
