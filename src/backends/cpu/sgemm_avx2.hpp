#pragma once
// graft's AVX2 sgemm (sgemm_avx2.cpp) as a building block for other kernels: the batched LSTM's
// recurrent product (lstm_recurrence.cpp) on hosts where oneDNN 2.6's matmul has no brgemm kernel
// and would pack R again at every time step.
#include <cstdint>

#include "backends/cpu/gemm_geometry.hpp"

namespace graft::backends::cpu::sgemm {

/// Whether the kernel runs on this host: AVX2 and FMA, and no AVX-512 below GRAFT_CPU_ISA (where
/// oneDNN's own kernels are faster).
bool available();

/// The width of the column panels the kernel reads B from (packPanels(b, g, panelWidth(), ...)).
int64_t panelWidth();

/// Y [g.M, g.N] (row-major, dense) = A [g.M, g.K] (row-major, row stride lda) x B', B' packed into
/// panels (above); no alpha, beta, C or activation; on the calling thread. Requires available().
void gemmSerial(const GemmGeometry& g, const float* a, int64_t lda, const float* packed, float* y);

/// As gemmSerial, with A read in place rather than copied into k-major micro-panels first: for a
/// small A that sits in the caches (winograd_avx2's transformed tiles), where the copy costs more
/// than the strided reads.
void gemmSerialInPlace(const GemmGeometry& g, const float* a, int64_t lda, const float* packed, float* y);

}  // namespace graft::backends::cpu::sgemm
