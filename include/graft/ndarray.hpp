#pragma once
/// @file ndarray.hpp  A dense, row-major n-dimensional array on the host.
#include <graft/dtype.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace graft {

using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for a scalar). Throws graft::Error when a dimension is
/// negative or the product overflows int64.
int64_t shapeNumel(const Shape& shape);
/// "[2, 3, 4]".
std::string shapeToString(const Shape& shape);

/// A dense row-major array: element type, shape and a reference-counted buffer.
/// Copies share the buffer (like numpy views); clone() copies the data.
/// Buffers that graft allocates are 64-byte aligned and zero-initialised.
/// String arrays hold std::string objects.
class NDArray {
 public:
  /// An empty, invalid array (valid() is false).
  NDArray() = default;
  /// Allocates a zero-filled array.
  NDArray(DataType dtype, Shape shape);
  /// Allocates without zero-filling (for kernels that write every element).
  static NDArray uninitialized(DataType dtype, Shape shape);
  /// A view of memory the caller owns and keeps alive; no copy is made.
  static NDArray wrap(void* data, DataType dtype, Shape shape);
  /// A view that keeps `owner` alive as long as any copy of the array lives.
  static NDArray wrap(void* data, DataType dtype, Shape shape, std::shared_ptr<void> owner);
  /// A scalar (rank 0) array holding one value of type T (T must match dtype's C++ type).
  template <class T>
  static NDArray scalar(DataType dtype, T value) {
    NDArray a(dtype, {});
    *a.data<T>() = value;
    return a;
  }

  bool valid() const { return dtype_ != DataType::Undefined; }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(i < 0 ? i + rank() : i); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtypeSize(dtype_); }

  void* rawData() { return data_; }
  const void* rawData() const { return data_; }
  template <class T>
  T* data() { return static_cast<T*>(data_); }
  template <class T>
  const T* data() const { return static_cast<const T*>(data_); }

  /// A deep copy with its own buffer.
  NDArray clone() const;
  /// Same buffer, another shape with the same number of elements.
  NDArray reshaped(Shape shape) const;
  /// True when both arrays use the same buffer.
  bool sharesBufferWith(const NDArray& other) const { return data_ == other.data_ && data_; }
  /// Copies elements from `src`, which must have the same dtype and number of elements.
  void copyFrom(const NDArray& src);

 private:
  DataType dtype_ = DataType::Undefined;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
};

}  // namespace graft
