#include "support/cpu_features.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>

#include <unistd.h>

#include "support/check.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace graft::support {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  // The rest from CPUID itself: clang 14's __builtin_cpu_supports knows neither "f16c" nor the
  // "x86-64-v3"/"x86-64-v4" levels. (The OS's support of the AVX and AVX-512 registers is in the
  // builtin's avx/avx512f answers, which these follow.)
  unsigned a = 0, b = 0, c = 0, d = 0;
  bool f16c = false, movbe = false, bmi1 = false, bmi2 = false, lzcnt = false, avx512cd = false;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f16c = (c >> 29) & 1;
    movbe = (c >> 22) & 1;
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    bmi1 = (b >> 3) & 1;
    bmi2 = (b >> 8) & 1;
    avx512cd = (b >> 28) & 1;
  }
  if (__get_cpuid(0x80000001u, &a, &b, &c, &d)) lzcnt = (c >> 5) & 1;
  f.f16c = f.avx && f16c;
  f.x86_64_v3 = f.avx2 && f.fma && f.f16c && bmi1 && bmi2 && lzcnt && movbe;
  f.x86_64_v4 = f.x86_64_v3 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && avx512cd;
  // AVX512_BF16: CPUID leaf 7, sub-leaf 1, EAX bit 5 (not every compiler's __builtin_cpu_supports knows it).
  if (f.avx512f && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = (a >> 5) & 1;
  // Zen 4 (AMD family 19h, the first AMD cores with AVX-512) splits each 512-bit operation into
  // two 256-bit halves; Zen 5 (1Ah) and Intel's server cores run them full width.
  if (f.avx512f && __get_cpuid(0, &a, &b, &c, &d)) {
    bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
    unsigned family = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
      family = (a >> 8) & 0xfu;
      if (family == 0xfu) family += (a >> 20) & 0xffu;
    }
    f.avx512HalfRate = amd && family == 0x19u;
  }
#endif
  return f;
}

CpuFeatures limited(const CpuFeatures& host, CpuIsa isa) {
  CpuFeatures f = host;
  if (isa < CpuIsa::Avx512)
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = f.avx512bf16 = f.avx512HalfRate = f.x86_64_v4 =
        false;
  if (isa < CpuIsa::Avx2) f.avx = f.avx2 = f.fma = f.f16c = f.x86_64_v3 = false;
  return f;
}

struct State {
  CpuFeatures host = detect();
  CpuIsa limit = CpuIsa::Native;
  CpuFeatures current;
  State() {
    if (const char* env = std::getenv("GRAFT_CPU_ISA"); env && *env) limit = parseCpuIsa(env);
    current = limited(host, limit);
  }
};

CpuIsa loopIsaOf(const CpuFeatures& f) {
  if (f.x86_64_v4) return CpuIsa::Avx512;
  if (f.x86_64_v3) return CpuIsa::Avx2;
  return CpuIsa::Baseline;
}

State& state() {
  static State s;
  return s;
}

}  // namespace

std::string CpuFeatures::isaName() const {
  if (avx512f && avx512bw && avx512vl && avx512dq) return "avx512";
  if (avx2 && fma) return "avx2";
  return "baseline";
}

const CpuFeatures& cpuFeatures() { return state().current; }
const CpuFeatures& hostCpuFeatures() { return state().host; }
CpuIsa cpuIsaLimit() { return state().limit; }

void setCpuIsaLimit(CpuIsa isa) {
  State& s = state();
  s.limit = isa;
  s.current = limited(s.host, isa);
  detail::vecLoopIsaCache.store(static_cast<int>(loopIsaOf(s.current)), std::memory_order_relaxed);
}

// Constant-initialised (std::atomic's constexpr constructor): valid before any static constructor.
std::atomic<int> detail::vecLoopIsaCache{-1};

CpuIsa detail::detectVecLoopIsa() {
  CpuIsa isa = loopIsaOf(state().current);
  vecLoopIsaCache.store(static_cast<int>(isa), std::memory_order_relaxed);
  return isa;
}

CpuIsa parseCpuIsa(const std::string& name) {
  if (name == "baseline" || name == "sse" || name == "sse41") return CpuIsa::Baseline;
  if (name == "avx2") return CpuIsa::Avx2;
  if (name == "avx512") return CpuIsa::Avx512;
  if (name == "native") return CpuIsa::Native;
  GRAFT_THROW("GRAFT_CPU_ISA: unknown ISA '{}'; expected baseline, avx2, avx512 or native", name);
}

namespace {
long long detectLastLevelCache() {
  long long most = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream typeFile(dir + "type"), sizeFile(dir + "size");
    std::string type, size;
    if (!(typeFile >> type) || !(sizeFile >> size) || type == "Instruction" || size.empty()) continue;
    long long bytes = std::atoll(size.c_str());
    if (size.back() == 'K') bytes <<= 10;
    if (size.back() == 'M') bytes <<= 20;
    most = std::max(most, bytes);
  }
  if (most <= 0) {
#ifdef _SC_LEVEL3_CACHE_SIZE
    most = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (most <= 0) most = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  }
  return most > 0 ? most : 32LL << 20;
}
}  // namespace

long long lastLevelCacheBytes() {
  static const long long bytes = detectLastLevelCache();
  return bytes;
}

}  // namespace graft::support
