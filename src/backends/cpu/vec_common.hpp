#pragma once
// Shared machinery of the cpu backend's vectorised kernels (vec_*.cpp):
// - GRAFT_VEC_RUN compiles a hot loop (a GRAFT_VEC_LOOP function) for AVX-512 (x86-64-v4), AVX2
//   (x86-64-v3) and the x86-64 baseline, and runs the variant support::vecLoopIsa() names, so
//   that one binary is both fast here and safe on older x86-64 machines, and GRAFT_CPU_ISA runs
//   the lower variants on any host (the backend tests run each);
// - data-parallel helpers over the session's thread pool, with grain sizes that keep small
//   tensors on one thread;
// - broadcasting with adjacent dimensions merged, so that most patterns run as long contiguous
//   or scalar-operand inner loops;
// - conversions of half types in blocks (F16C where the CPU has it).
// Results never depend on the number of threads: elementwise work is split by position, and
// reductions accumulate each output in a fixed order.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <sched.h>

#include "ir/graph.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/kernel.hpp"
#include "support/cpu_features.hpp"
#include "support/float16.hpp"
#include "support/thread_pool.hpp"

// ---- ISA variants of the hot loops ------------------------------------------------------------
// A hot loop is a function marked GRAFT_VEC_LOOP (always inlined), called as GRAFT_VEC_RUN(call).
// The call is compiled three times with the loop inlined: in a function for x86-64-v4 (AVX-512),
// one for x86-64-v3 (AVX2, FMA) and in place (the baseline the library is built for). Which runs
// is read at every call from support::vecLoopIsa(): the CPU's level below GRAFT_CPU_ISA or
// setCpuIsaLimit. (GCC's target_clones, used before, let the loader choose from the real CPU, so
// only one variant was ever tested, and its ifunc resolvers crashed ThreadSanitizer's start-up.)
#define GRAFT_VEC_LOOP __attribute__((always_inline)) inline
#define GRAFT_VEC_RUN(...) ::graft::backends::cpu::vecRun([&]() __attribute__((always_inline)) { return __VA_ARGS__; })

#if defined(__GNUC__) && defined(__x86_64__)
#define GRAFT_VEC_VARIANTS 1
#else
#define GRAFT_VEC_VARIANTS 0
#endif

namespace graft::backends::cpu {

#if GRAFT_VEC_VARIANTS
template <class Body>
__attribute__((noinline, target("arch=x86-64-v4"))) auto vecRunAvx512(const Body& body) {
  return body();
}
template <class Body>
__attribute__((noinline, target("arch=x86-64-v3"))) auto vecRunAvx2(const Body& body) {
  return body();
}
#endif

/// W floats as one GCC vector (vector extension), for loops written with explicit vectors: W = 16
/// (one zmm) in the AVX-512 variant, 8 (ymm) in the AVX2 one, 4 (xmm) in the baseline, each
/// variant run through vecRunWidth (below). A vector wider than the variant's
/// registers has no machine mode there and lives on the stack: the LSTM cell's AVX2 variant with
/// 16-float vectors ran 20x slower than the AVX-512 one (1.4x with 8; GRAFT_CPU_ISA=avx2).
template <int W>
struct FloatVec {
  typedef float type __attribute__((vector_size(W * 4)));
  typedef float unaligned __attribute__((vector_size(W * 4), aligned(4)));
};

/// Runs body (a GRAFT_VEC_RUN lambda) in the variant for support::vecLoopIsa().
template <class Body>
inline auto vecRun(const Body& body) {
#if GRAFT_VEC_VARIANTS
  switch (support::vecLoopIsa()) {
    case support::CpuIsa::Avx512:
      return vecRunAvx512(body);
    case support::CpuIsa::Avx2:
      return vecRunAvx2(body);
    default:
      break;
  }
#endif
  return body();
}

/// Runs f(std::integral_constant<int, W>{}) in the variant for support::vecLoopIsa(), W being that
/// variant's register width in floats: 16 (AVX-512), 8 (AVX2), 4 (the baseline). For loops written
/// with explicit vectors (FloatVec<W>: vec_lstm.cpp's LSTM steps, vec_gemv.cpp's panels), which
/// pick their width by hand; f is a lambda marked always_inline, so that its loop is compiled in
/// the variant.
template <class F>
inline void vecRunWidth(const F& f) {
#if GRAFT_VEC_VARIANTS
  switch (support::vecLoopIsa()) {
    case support::CpuIsa::Avx512:
      return vecRunAvx512([&]() __attribute__((always_inline)) { f(std::integral_constant<int, 16>{}); });
    case support::CpuIsa::Avx2:
      return vecRunAvx2([&]() __attribute__((always_inline)) { f(std::integral_constant<int, 8>{}); });
    default:
      break;
  }
#endif
  f(std::integral_constant<int, 4>{});
}

/// The threads of one OpenMP team agree that a step of a sequential loop (a recurrence's time
/// step) is done: spin, then yield, so that a team on an oversubscribed machine still makes
/// progress. One region per sequence with this barrier between steps wakes the threads once,
/// where a parallel region per step would wake them (under passive waits) every step.
struct SpinBarrier {
  explicit SpinBarrier(int n) : n_(n) {}
  void wait() {
    int gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int spins = 0; gen_.load(std::memory_order_acquire) == gen; ++spins)
      if (spins > 2000) sched_yield();
  }

 private:
  int n_;
  std::atomic<int> count_{0}, gen_{0};
};

/// Elements per thread below which an elementwise loop is not split: cheap ops (add, compare),
/// and ops that cost tens of cycles per element (exp, erf, tanh).
inline constexpr int64_t kGrainCheap = 32768;
inline constexpr int64_t kGrainCostly = 4096;
/// Block of elements converted from half types at a time (fits in L1 with its float copy).
inline constexpr int64_t kBlock = 1024;

/// Runs fn(begin, end) over [0, n) split into at most numThreads contiguous ranges of at least
/// `grain` items (one range, on the calling thread, when n is small).
template <class F>
void parallelRanges(support::ThreadPool& pool, int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  if (n <= grain || pool.numThreads() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool.parallelFor(n, grain, [&](int64_t b, int64_t e) { fn(b, e); });
}

/// True when any of the n floats at p is NaN: vectorised, split over the pool for large arrays,
/// and stopping at the first block that holds one.
bool anyNaN(const float* p, int64_t n, support::ThreadPool& pool);
/// True when any of the n floats at p is NaN or infinite (as anyNaN).
bool anyNonFinite(const float* p, int64_t n, support::ThreadPool& pool);

/// True for the types the vector loops compute in float (float, half, bfloat16).
template <class T>
constexpr bool kComputesInFloat = std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
constexpr bool kIsHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// Half and bfloat16 <-> float over n elements.
void toFloat(const Half* src, float* dst, int64_t n);
void toFloat(const BFloat16* src, float* dst, int64_t n);
void fromFloat(const float* src, Half* dst, int64_t n);
void fromFloat(const float* src, BFloat16* dst, int64_t n);

/// An output shape with one broadcast input shape per operand, adjacent dimensions merged where
/// every operand allows it. strides[k][d] is 0 where operand k is broadcast along dimension d.
struct Broadcast {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides;
  int64_t numel = 0;

  static Broadcast make(const Shape& out, const std::vector<const Shape*>& inputs);
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t inner() const { return dims.back(); }
  /// Stride of operand k along the innermost dimension (0 or 1).
  int64_t innerStride(size_t k) const { return strides[k].back(); }
  /// Walks positions [begin, end) of the output in runs along the innermost dimension:
  /// fn(outOffset, const int64_t* inOffsets, runLength). `offs` is scratch of size operands.
  template <class F>
  void forEachRun(int64_t begin, int64_t end, F&& fn) const {
    size_t nk = strides.size();
    int64_t r = rank();
    std::vector<int64_t> idx(r, 0), offs(nk, 0);
    int64_t rest = begin;
    for (int64_t d = r - 1; d >= 0; --d) {
      idx[d] = rest % dims[d];
      rest /= dims[d];
      for (size_t k = 0; k < nk; ++k) offs[k] += idx[d] * strides[k][d];
    }
    int64_t pos = begin;
    while (pos < end) {
      int64_t len = std::min(dims[r - 1] - idx[r - 1], end - pos);
      fn(pos, offs.data(), len);
      pos += len;
      if (pos >= end) break;
      // Next run: the innermost index wraps to 0, carrying into outer dimensions.
      for (size_t k = 0; k < nk; ++k) offs[k] -= idx[r - 1] * strides[k][r - 1];
      idx[r - 1] = 0;
      for (int64_t d = r - 2; d >= 0; --d) {
        ++idx[d];
        for (size_t k = 0; k < nk; ++k) offs[k] += strides[k][d];
        if (idx[d] < dims[d]) break;
        for (size_t k = 0; k < nk; ++k) offs[k] -= strides[k][d] * dims[d];
        idx[d] = 0;
      }
    }
  }
};

/// The element types the vector kernels accept (everything but strings and complex).
inline constexpr uint32_t kVecTypes = ops::kNumericBool;

/// True when `t` is a tensor value of a known type in `set`.
bool typeIn(const ir::Tensor* t, uint32_t set);

}  // namespace graft::backends::cpu
