#include "backends/cpu/vec_common.hpp"

#include <atomic>

#include "ops/shape_util.hpp"
#include "support/cpu_features.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace graft::backends::cpu {

Broadcast Broadcast::make(const Shape& out, const std::vector<const Shape*>& inputs) {
  Broadcast b;
  size_t nk = inputs.size();
  b.numel = shapeNumel(out);
  std::vector<std::vector<int64_t>> full;
  full.reserve(nk);
  for (const Shape* s : inputs) full.push_back(ops::broadcastStrides(*s, out));
  // Innermost first; size-1 dimensions carry no information and are dropped.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides(nk);
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    if (out[d] == 1) continue;
    bool merge = !dims.empty();
    for (size_t k = 0; k < nk && merge; ++k) merge = full[k][d] == strides[k].back() * dims.back();
    if (merge) {
      dims.back() *= out[d];
      continue;
    }
    dims.push_back(out[d]);
    for (size_t k = 0; k < nk; ++k) strides[k].push_back(full[k][d]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (size_t k = 0; k < nk; ++k) strides[k].push_back(0);
  }
  b.dims.assign(dims.rbegin(), dims.rend());
  b.strides.resize(nk);
  for (size_t k = 0; k < nk; ++k) b.strides[k].assign(strides[k].rbegin(), strides[k].rend());
  return b;
}

bool typeIn(const ir::Tensor* t, uint32_t set) {
  if (!t || !t->type().isTensor()) return false;
  auto code = static_cast<uint32_t>(t->info().dataType());
  return code < 32 && ((set >> code) & 1u);
}

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
bool hasF16C() {
  const support::CpuFeatures& f = support::cpuFeatures();
  return f.f16c && f.avx;
}

__attribute__((target("avx,f16c"))) void halfToFloatF16C(const Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = Half::toFloat(src[i].bits);
}

__attribute__((target("avx,f16c"))) void floatToHalfF16C(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i].bits = Half::fromFloat(src[i]);
}
#endif

GRAFT_VEC_LOOP void bf16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
}

GRAFT_VEC_LOOP void floatToBf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x = std::bit_cast<uint32_t>(src[i]);
    bool nan = (x & 0x7fffffffu) > 0x7f800000u;
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    dst[i] = static_cast<uint16_t>(nan ? ((x >> 16) | 0x40u) : r);
  }
}

}  // namespace

namespace {
// Blocks of 1024: the OR of (x != x) over a block vectorises; a block that holds a NaN ends it.
// NonFinite: NaN or an infinity (x - x is NaN exactly for those), else NaN only.
template <bool NonFinite>
GRAFT_VEC_LOOP bool anyNaNIn(const float* p, int64_t n) {
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t e = std::min(n, b + kBlock);
    int nan = 0;
    for (int64_t i = b; i < e; ++i) {
      const float v = NonFinite ? p[i] - p[i] : p[i];
      nan |= v != v;
    }
    if (nan) return true;
  }
  return false;
}

template <bool NonFinite>
bool anyIn(const float* p, int64_t n, support::ThreadPool& pool) {
  std::atomic<bool> found{false};
  parallelRanges(pool, n, 4 * kGrainCheap, [&](int64_t b, int64_t e) {
    if (!found.load(std::memory_order_relaxed) && GRAFT_VEC_RUN(anyNaNIn<NonFinite>(p + b, e - b)))
      found.store(true, std::memory_order_relaxed);
  });
  return found.load();
}
}  // namespace

bool anyNaN(const float* p, int64_t n, support::ThreadPool& pool) { return anyIn<false>(p, n, pool); }

bool anyNonFinite(const float* p, int64_t n, support::ThreadPool& pool) { return anyIn<true>(p, n, pool); }

void toFloat(const Half* src, float* dst, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (hasF16C()) return halfToFloatF16C(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = Half::toFloat(src[i].bits);
}

void fromFloat(const float* src, Half* dst, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (hasF16C()) return floatToHalfF16C(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i].bits = Half::fromFloat(src[i]);
}

void toFloat(const BFloat16* src, float* dst, int64_t n) {
  static_assert(sizeof(BFloat16) == 2);
  GRAFT_VEC_RUN(bf16ToFloat(reinterpret_cast<const uint16_t*>(src), dst, n));
}

void fromFloat(const float* src, BFloat16* dst, int64_t n) {
  GRAFT_VEC_RUN(floatToBf16(src, reinterpret_cast<uint16_t*>(dst), n));
}

}  // namespace graft::backends::cpu
