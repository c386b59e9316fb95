#pragma once
// The static type of a graph value: a tensor, a sequence of tensors, or an optional of either.
#include <graft/tensor_info.hpp>

#include <string>

namespace graft::ir {

enum class ValueKind : uint8_t { Tensor, Sequence, Optional };

struct ValueType {
  ValueKind kind = ValueKind::Tensor;
  /// For Optional: what it holds when present (Tensor or Sequence).
  ValueKind optionalOf = ValueKind::Tensor;
  /// The tensor's type, or the element type of a sequence.
  TensorInfo info;

  static ValueType tensor(TensorInfo info) { return {ValueKind::Tensor, ValueKind::Tensor, std::move(info)}; }
  static ValueType sequence(TensorInfo elem) { return {ValueKind::Sequence, ValueKind::Tensor, std::move(elem)}; }
  static ValueType optional(ValueKind of, TensorInfo elem) { return {ValueKind::Optional, of, std::move(elem)}; }

  bool isTensor() const { return kind == ValueKind::Tensor; }
  /// Known at all (a tensor with an undefined dtype counts as unknown).
  bool known() const { return info.dataType() != DataType::Undefined; }
  std::string str() const;
  bool operator==(const ValueType&) const = default;
};

}  // namespace graft::ir
