#include "ops/copy_util.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "ops/shape_util.hpp"
#include "support/check.hpp"

namespace graft::ops {
namespace {

// Numeric and bool elements are moved as raw bytes (memcpy of a fixed size is well defined for
// any trivially copyable type and compiles to one load/store); strings are assigned.
template <class F>
void dispatchElementSize(DataType dt, F&& f) {
  if (dt == DataType::String) {
    f(std::integral_constant<size_t, 0>{});
    return;
  }
  switch (dtypeSize(dt)) {
    case 1:
      f(std::integral_constant<size_t, 1>{});
      return;
    case 2:
      f(std::integral_constant<size_t, 2>{});
      return;
    case 4:
      f(std::integral_constant<size_t, 4>{});
      return;
    case 8:
      f(std::integral_constant<size_t, 8>{});
      return;
    case 16:
      f(std::integral_constant<size_t, 16>{});
      return;
    default:
      GRAFT_THROW("cannot move elements of data type {}", dtypeName(dt));
  }
}

template <size_t N>
inline void moveOne(const void* src, int64_t si, void* dst, int64_t di) {
  if constexpr (N == 0) {
    static_cast<std::string*>(dst)[di] = static_cast<const std::string*>(src)[si];
  } else {
    std::memcpy(static_cast<unsigned char*>(dst) + di * static_cast<int64_t>(N),
                static_cast<const unsigned char*>(src) + si * static_cast<int64_t>(N), N);
  }
}

}  // namespace

void copyElements(const NDArray& src, int64_t srcOff, NDArray& dst, int64_t dstOff, int64_t n) {
  GRAFT_ASSERT(src.dtype() == dst.dtype(), "copyElements: {} vs {}", dtypeName(src.dtype()), dtypeName(dst.dtype()));
  GRAFT_ASSERT(srcOff >= 0 && dstOff >= 0 && n >= 0 && srcOff + n <= src.numel() && dstOff + n <= dst.numel(),
               "copyElements out of range");
  if (n == 0) return;
  if (src.dtype() == DataType::String) {
    const std::string* s = src.data<std::string>() + srcOff;
    std::copy(s, s + n, dst.data<std::string>() + dstOff);
  } else {
    size_t es = dtypeSize(src.dtype());
    std::memmove(static_cast<unsigned char*>(dst.rawData()) + dstOff * es,
                 static_cast<const unsigned char*>(src.rawData()) + srcOff * es, static_cast<size_t>(n) * es);
  }
}

void gatherFlat(const NDArray& src, const std::vector<int64_t>& index, NDArray& dst, const NDArray* fill) {
  GRAFT_ASSERT(src.dtype() == dst.dtype(), "gatherFlat: dtype mismatch");
  GRAFT_ASSERT(static_cast<int64_t>(index.size()) <= dst.numel(), "gatherFlat: index longer than dst");
  GRAFT_ASSERT(!fill || (fill->dtype() == dst.dtype() && fill->numel() == 1), "gatherFlat: bad fill value");
  dispatchElementSize(src.dtype(), [&](auto n) {
    constexpr size_t N = decltype(n)::value;
    const void* s = src.rawData();
    void* d = dst.rawData();
    int64_t count = static_cast<int64_t>(index.size()), limit = src.numel();
    for (int64_t i = 0; i < count; ++i) {
      int64_t j = index[static_cast<size_t>(i)];
      if (j >= 0) {
        GRAFT_ASSERT(j < limit, "gatherFlat: index {} out of range {}", j, limit);
        moveOne<N>(s, j, d, i);
      } else if (fill) {
        moveOne<N>(fill->rawData(), 0, d, i);
      }
    }
  });
}

void gatherBlocks(const NDArray& src, const std::vector<int64_t>& srcStarts, int64_t blockLen, NDArray& dst) {
  GRAFT_ASSERT(static_cast<int64_t>(srcStarts.size()) * blockLen <= dst.numel(), "gatherBlocks: dst too small");
  for (size_t i = 0; i < srcStarts.size(); ++i)
    copyElements(src, srcStarts[i], dst, static_cast<int64_t>(i) * blockLen, blockLen);
}

NDArray stridedCopy(const NDArray& src, int64_t base, const std::vector<int64_t>& strides, const Shape& shape) {
  GRAFT_ASSERT(strides.size() == shape.size(), "stridedCopy: {} strides for rank {}", strides.size(), shape.size());
  NDArray out(src.dtype(), shape);
  dispatchElementSize(src.dtype(), [&](auto n) {
    constexpr size_t N = decltype(n)::value;
    const void* s = src.rawData();
    void* d = out.rawData();
    int64_t o = 0, limit = src.numel();
    std::array<std::vector<int64_t>, 1> st{strides};
    forEachBroadcastRun<1>(shape, st,
                           [&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& inner, int64_t len) {
                             for (int64_t j = 0; j < len; ++j) {
                               int64_t at = base + off[0] + j * inner[0];
                               GRAFT_ASSERT(at >= 0 && at < limit, "stridedCopy: offset {} out of range {}", at, limit);
                               moveOne<N>(s, at, d, o++);
                             }
                           });
  });
  return out;
}

int64_t checkedMul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  GRAFT_CHECK(!__builtin_mul_overflow(a, b, &r), "{}: size {} x {} overflows int64", what, a, b);
  return r;
}

}  // namespace graft::ops
