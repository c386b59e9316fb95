#pragma once
// The CPU's instruction-set features, detected once, and the ISA limit that lets every kernel
// variant run on any host: GRAFT_CPU_ISA=baseline|avx2|avx512 (environment, read at the first
// call) or setCpuIsaLimit (tests) hides the features above that level, so predicates that read
// cpuFeatures() pick the lower path, oneDNN is capped the same way (backends/cpu/onednn_common.cpp),
// and the vectorised loops run their variant of vecLoopIsa() (backends/cpu/vec_common.hpp).
#include <atomic>
#include <string>

namespace graft::support {

/// Instruction-set levels, each including the ones below.
enum class CpuIsa {
  Baseline,  ///< x86-64 (SSE2)
  Avx2,      ///< AVX2, FMA, F16C (x86-64-v3)
  Avx512,    ///< AVX-512 F/BW/VL/DQ (x86-64-v4), with VNNI and BF16 where the CPU has them
  Native,    ///< no limit
};

/// What the kernels may use: the CPU's features below the ISA limit.
struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
  /// AVX-512 executed on 256-bit halves (AMD Zen 4, family 19h): the same FMA rate as AVX2, half
  /// of what full-width AVX-512 hosts reach. Some kernel choices depend on it (Winograd
  /// convolutions, backends/cpu/onednn_conv.cpp).
  bool avx512HalfRate = false;
  /// The whole x86-64-v3 / x86-64-v4 levels (what the vectorised loops' AVX2 / AVX-512 variants are
  /// compiled for: v3 adds BMI1/2, LZCNT and MOVBE to AVX2+FMA+F16C, v4 AVX-512CD to F/BW/VL/DQ).
  bool x86_64_v3 = false, x86_64_v4 = false;
  /// The highest level fully present ("baseline", "avx2", "avx512").
  std::string isaName() const;
};

/// The features, with the limit applied. Cheap: detection happens once.
const CpuFeatures& cpuFeatures();
/// The features of the CPU itself (no limit).
const CpuFeatures& hostCpuFeatures();
/// The current limit (GRAFT_CPU_ISA at start-up; Native when unset).
CpuIsa cpuIsaLimit();
/// Sets the limit (tests: run the AVX2 path on an AVX-512 host). Kernels compiled afterwards see
/// it; oneDNN reads its own limit once, before its first primitive.
void setCpuIsaLimit(CpuIsa isa);
/// The variant of the vectorised loops that runs (backends/cpu/vec_common.hpp, GRAFT_VEC_RUN):
/// Avx512 where the features below the limit make x86-64-v4, Avx2 where x86-64-v3, else Baseline.
/// Read at every call of a loop, so a limit set later applies to the next call.
CpuIsa vecLoopIsa();

/// The size in bytes of the largest cache one core reaches (the last level, shared or not): what
/// Linux reports under /sys/devices/system/cpu/cpu0/cache (a virtual machine's own view, where the
/// CPUID that sysconf reads may describe the whole host's caches), else sysconf's, else 32 MiB.
/// Read once.
long long lastLevelCacheBytes();

/// Parses "baseline", "avx2", "avx512" or "native"; throws graft::Error naming GRAFT_CPU_ISA otherwise.
CpuIsa parseCpuIsa(const std::string& name);

namespace detail {
extern std::atomic<int> vecLoopIsaCache;  // a CpuIsa; -1 until the first call (cpu_features.cpp)
CpuIsa detectVecLoopIsa();
}  // namespace detail

inline CpuIsa vecLoopIsa() {
  int v = detail::vecLoopIsaCache.load(std::memory_order_relaxed);
  return v < 0 ? detail::detectVecLoopIsa() : static_cast<CpuIsa>(v);
}

}  // namespace graft::support
