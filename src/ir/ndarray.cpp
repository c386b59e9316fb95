#include <graft/ndarray.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include "support/check.hpp"

namespace graft {

int64_t shapeNumel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    GRAFT_CHECK(d >= 0, "shape {} has a negative dimension", shapeToString(shape));
    if (d != 0 && n > INT64_MAX / d) GRAFT_THROW("shape {} has more elements than fit in int64", shapeToString(shape));
    n *= d;
  }
  return n;
}

std::string shapeToString(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kMaxBytes = size_t{1} << 40;  // 1 TiB: anything larger is a broken shape, not a real tensor

std::shared_ptr<void> allocate(DataType dtype, int64_t numel, void** data, bool zero = true) {
  if (dtype == DataType::String) {
    auto* s = new std::string[static_cast<size_t>(numel > 0 ? numel : 1)];
    *data = s;
    return std::shared_ptr<void>(s, [](void* p) { delete[] static_cast<std::string*>(p); });
  }
  size_t esize = dtypeSize(dtype);
  GRAFT_CHECK(static_cast<uint64_t>(numel) <= kMaxBytes / std::max<size_t>(esize, 1),
              "cannot allocate a {} tensor of {} elements: larger than 1 TiB", dtypeName(dtype), numel);
  size_t bytes = static_cast<size_t>(numel) * esize;
  size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded == 0) rounded = kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) GRAFT_THROW("out of memory allocating {} bytes for a {} tensor", bytes, dtypeName(dtype));
  if (zero) std::memset(p, 0, rounded);
  *data = p;
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
}  // namespace

NDArray::NDArray(DataType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  GRAFT_CHECK(dtype != DataType::Undefined, "cannot allocate an array of undefined type");
  numel_ = shapeNumel(shape_);
  owner_ = allocate(dtype, numel_, &data_);
}

NDArray NDArray::uninitialized(DataType dtype, Shape shape) {
  GRAFT_CHECK(dtype != DataType::Undefined, "cannot allocate an array of undefined type");
  NDArray a;
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  a.numel_ = shapeNumel(a.shape_);
  a.owner_ = allocate(dtype, a.numel_, &a.data_, /*zero=*/false);
  return a;
}

NDArray NDArray::wrap(void* data, DataType dtype, Shape shape) { return wrap(data, dtype, std::move(shape), nullptr); }

NDArray NDArray::wrap(void* data, DataType dtype, Shape shape, std::shared_ptr<void> owner) {
  NDArray a;
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  a.numel_ = shapeNumel(a.shape_);
  a.data_ = data;
  a.owner_ = std::move(owner);
  return a;
}

NDArray NDArray::clone() const {
  if (!valid()) return {};
  NDArray c(dtype_, shape_);
  c.copyFrom(*this);
  return c;
}

NDArray NDArray::reshaped(Shape shape) const {
  NDArray a = *this;
  int64_t n = shapeNumel(shape);
  GRAFT_CHECK(n == numel_, "cannot reshape an array of shape {} ({} elements) to {} ({} elements)",
              shapeToString(shape_), numel_, shapeToString(shape), n);
  a.shape_ = std::move(shape);
  return a;
}

void NDArray::copyFrom(const NDArray& src) {
  GRAFT_CHECK(src.dtype_ == dtype_ && src.numel_ == numel_, "cannot copy a {} array of {} elements into a {} array of {}",
              dtypeName(src.dtype_), src.numel_, dtypeName(dtype_), numel_);
  if (data_ == src.data_) return;
  if (dtype_ == DataType::String) {
    for (int64_t i = 0; i < numel_; ++i) data<std::string>()[i] = src.data<std::string>()[i];
  } else if (nbytes()) {
    std::memcpy(data_, src.data_, nbytes());
  }
}

}  // namespace graft
