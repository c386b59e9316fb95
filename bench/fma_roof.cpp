// fma_roof: the host's fp32 FMA rate, the roof the benchmark tables are read against.
//
//   fma_roof [--threads N] [--seconds S]
//
// Each thread runs independent chains of fused multiply-adds in registers (no memory traffic)
// for S seconds (best of three runs) with the widest vectors the CPU has (AVX-512, else AVX2+FMA; chosen at run time,
// so one binary serves both host classes) and prints one JSON line:
//   {"isa": "avx512", "threads": 2, "gflops": 541.3, "gflops_avx2": 270.2}
// gflops_avx2 is the same loop on 256-bit vectors (what an AVX2 kernel can reach on this host).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fma_roof.hpp"

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
  std::string isa = fma_roof::widestIsa();
  bool avx512 = isa == "avx512";
  if (isa == "baseline") {
    std::printf("{\"isa\": \"baseline\", \"threads\": %d, \"gflops\": null, \"gflops_avx2\": null}\n", threads);
    return 0;
  }
  double r2 = fma_roof::bestRate(threads, seconds, false);
  double r = avx512 ? fma_roof::bestRate(threads, seconds, true) : r2;
  std::printf("{\"isa\": \"%s\", \"threads\": %d, \"gflops\": %.1f, \"gflops_avx2\": %.1f}\n",
              avx512 ? "avx512" : "avx2", threads, r, r2);
  return 0;
}
