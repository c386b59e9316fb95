#include <graft/tensor_info.hpp>

#include "support/check.hpp"

namespace graft {

std::string Dim::str() const {
  if (known()) return std::to_string(value);
  return param.empty() ? "?" : param;
}

TensorInfo::TensorInfo(DataType dtype, const Shape& shape) : dtype_(dtype), hasShape_(true) {
  dims_.reserve(shape.size());
  for (int64_t d : shape) {
    GRAFT_CHECK(d >= 0, "TensorInfo: negative dimension in shape {}", shapeToString(shape));
    dims_.emplace_back(d);
  }
}

TensorInfo::TensorInfo(DataType dtype, std::vector<Dim> dims) : dtype_(dtype), dims_(std::move(dims)), hasShape_(true) {}

TensorInfo::TensorInfo(const std::string& dtype, const Shape& shape) : TensorInfo(dtypeFromString(dtype), shape) {}

TensorInfo TensorInfo::unranked(DataType dtype) {
  TensorInfo t;
  t.dtype_ = dtype;
  return t;
}

bool TensorInfo::isStatic() const {
  if (!hasShape_) return false;
  for (const auto& d : dims_)
    if (!d.known()) return false;
  return true;
}

Shape TensorInfo::shape() const {
  GRAFT_CHECK(isStatic(), "the shape {} is not fully known", str());
  Shape s;
  s.reserve(dims_.size());
  for (const auto& d : dims_) s.push_back(d.value);
  return s;
}

std::string TensorInfo::str() const {
  std::string s(dtypeName(dtype_));
  if (!hasShape_) return s + " [unknown rank]";
  s += " [";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += dims_[i].str();
  }
  return s + "]";
}

}  // namespace graft
