#pragma once
// The host's fp32 FMA rate (bench/fma_roof.cpp prints it; bench/layers_bench.cpp reads its tables
// against it): each thread runs independent chains of fused multiply-adds in registers (no memory
// traffic) with AVX-512 or AVX2+FMA vectors, chosen by the caller at run time (one binary serves
// both host classes).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace fma_roof {

inline constexpr int kChains = 12;  // enough independent accumulators to cover the FMA latency
inline constexpr long kInner = 1 << 14;

__attribute__((target("avx512f"))) inline double chainsAvx512(long reps) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long r = 0; r < reps; ++r)
    for (long k = 0; k < kInner; ++k)
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return static_cast<double>(out[0]);
}

__attribute__((target("avx2,fma"))) inline double chainsAvx2(long reps) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long r = 0; r < reps; ++r)
    for (long k = 0; k < kInner; ++k)
      for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return static_cast<double>(out[0]);
}

// GFLOP/s of `threads` threads each running the chains for about `seconds`.
inline double rate(int threads, double seconds, bool wide) {
  int lanes = wide ? 16 : 8;
  auto run = [&](long reps) { return wide ? chainsAvx512(reps) : chainsAvx2(reps); };
  // Calibrate the repetitions on one thread.
  long reps = 1;
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    volatile double sink = run(reps);
    (void)sink;
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > seconds / 8 || reps > (1L << 20)) {
      reps = static_cast<long>(static_cast<double>(reps) * seconds / dt) + 1;
      break;
    }
    reps *= 2;
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  std::vector<double> sinks(static_cast<size_t>(threads));
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) {
      }
      sinks[static_cast<size_t>(t)] = run(reps);
    });
  while (ready.load() < threads) {
  }
  t0 = std::chrono::steady_clock::now();
  go.store(true);
  for (auto& th : pool) th.join();
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double flops = 2.0 * lanes * kChains * static_cast<double>(kInner) * static_cast<double>(reps) * threads;
  return flops / dt / 1e9;
}

/// The widest vectors this CPU runs: "avx512", "avx2" (with FMA) or "baseline" (no FMA roof).
inline const char* widestIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  return "baseline";
}

/// The best of `runs` rates (the first use of wide vectors and other processes can slow one).
inline double bestRate(int threads, double seconds, bool wide, int runs = 3) {
  double b = 0;
  for (int i = 0; i < runs; ++i) b = std::max(b, rate(threads, seconds, wide));
  return b;
}

}  // namespace fma_roof
