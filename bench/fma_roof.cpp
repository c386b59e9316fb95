// fma_roof: the host's fp32 FMA rate, the roof the benchmark tables are read against.
//
//   fma_roof [--threads N] [--seconds S]
//
// Each thread runs independent chains of fused multiply-adds in registers (no memory traffic)
// for S seconds (best of three runs) with the widest vectors the CPU has (AVX-512, else AVX2+FMA; chosen at run time,
// so one binary serves both host classes) and prints one JSON line:
//   {"isa": "avx512", "threads": 2, "gflops": 541.3, "gflops_avx2": 270.2}
// gflops_avx2 is the same loop on 256-bit vectors (what an AVX2 kernel can reach on this host).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kChains = 12;  // enough independent accumulators to cover the FMA latency
constexpr long kInner = 1 << 14;

__attribute__((target("avx512f"))) double chainsAvx512(long reps) {
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

__attribute__((target("avx2,fma"))) double chainsAvx2(long reps) {
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

// GFLOP/s of `threads` threads each running fn for about `seconds`.
double rate(int threads, double seconds, bool wide) {
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

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  double seconds = 0.5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: fma_roof [--threads N] [--seconds S]\n");
      return 2;
    }
  }
  if (threads < 1 || seconds <= 0) {
    std::fprintf(stderr, "fma_roof: --threads must be >= 1 and --seconds > 0\n");
    return 2;
  }
  __builtin_cpu_init();
  bool avx512 = __builtin_cpu_supports("avx512f");
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx2) {
    std::printf("{\"isa\": \"baseline\", \"threads\": %d, \"gflops\": null, \"gflops_avx2\": null}\n", threads);
    return 0;
  }
  // The best of three runs: the first use of wide vectors and other processes can slow one.
  auto best = [&](bool wide) {
    double b = 0;
    for (int i = 0; i < 3; ++i) b = std::max(b, rate(threads, seconds, wide));
    return b;
  };
  double r2 = best(false);
  double r = avx512 ? best(true) : r2;
  std::printf("{\"isa\": \"%s\", \"threads\": %d, \"gflops\": %.1f, \"gflops_avx2\": %.1f}\n",
              avx512 ? "avx512" : "avx2", threads, r, r2);
  return 0;
}
