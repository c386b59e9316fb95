#pragma once
// graft's AVX2 sgemm (sgemm_avx2.cpp) as a building block for other kernels: the batched LSTM's
// recurrent product (lstm_recurrence.cpp) on hosts where oneDNN 2.6's matmul has no brgemm kernel
// and would pack R again at every time step, and its input projection there (vec_lstm.cpp).
#include <cstdint>

#include "backends/cpu/gemm_geometry.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends::cpu::sgemm {

/// Whether the kernel runs on this host: AVX2 and FMA, and no AVX-512 below GRAFT_CPU_ISA (where
/// oneDNN's own kernels are faster).
bool available();

/// The width of the column panels the kernel reads B from (packPanels(b, g, panelWidth(), ...)).
int64_t panelWidth();

/// Y [g.M, g.N] (row-major, dense) = A [g.M, g.K] (row-major, dense) x B' (packed into panels,
/// below) + bias (a row of g.N added to every row, or nullptr), split over `pool` as sgemm_avx2's
/// own products are. Requires available().
void gemm(const GemmGeometry& g, const float* a, const float* packed, const float* bias, float* y,
          support::ThreadPool& pool);

/// Y [g.M, g.N] (row-major, dense) = A [g.M, g.K] (row-major, row stride lda) x B', B' packed into
/// panels (above); no alpha, beta, C or activation; on the calling thread. Requires available().
void gemmSerial(const GemmGeometry& g, const float* a, int64_t lda, const float* packed, float* y);

/// As gemmSerial, with A read in place rather than copied into k-major micro-panels first: for a
/// small A that sits in the caches (winograd_avx2's transformed tiles), where the copy costs more
/// than the strided reads.
void gemmSerialInPlace(const GemmGeometry& g, const float* a, int64_t lda, const float* packed, float* y);

/// Panels per column chunk where a product's `panels` column panels are split into chunks of at
/// most 512 columns, each chunk run as `otherTasks` tasks (row chunks, images): chunks of equal
/// width, as many as make whole rounds for `threads` where the panels allow (sgemm_avx2's own
/// products and conv1x1_avx2's).
int64_t panelsPerChunk(int64_t panels, int64_t otherTasks, int64_t threads);

/// What gemmBlocked8 applies after the last K block: bias (the columns, zero-padded past
/// `channels`; or nullptr), Relu, and zeros in the lanes past the last of `channels` output
/// channels; with `stream`, the results go out through streaming stores (Y 32-byte aligned; a
/// store fence ends the task).
struct Blocked8Epilogue {
  const float* bias = nullptr;
  int64_t channels = 0;
  bool relu = false;
  bool stream = false;
};

/// One task of a product over activations in 8-channel blocks (conv1x1_avx2.cpp): for the pixels
/// [r0, r1) of one image, X in blocks [C/8][pixels][8] (x at pixel 0 of block 0, blocks
/// xBlockStride floats apart), Y's output channels of panels [p0, p1) in blocks [M/8][pixels][8]
/// likewise: Y(p, m) (+)= sum_c X(p, c) B(c, m), B (channelBlocks * 8 rows, `columns` columns, a
/// multiple of 8) packed into panels (packPanels, panelWidth()). With `accumulate` Y's values are
/// added to (a residual written there first). On the calling thread. Requires available().
struct Blocked8Task {
  const float* x = nullptr;
  float* y = nullptr;
  int64_t xBlockStride = 0, yBlockStride = 0;
  int64_t channelBlocks = 0, columns = 0;
  int64_t r0 = 0, r1 = 0, p0 = 0, p1 = 0;
  bool accumulate = false;
};
void gemmBlocked8(const Blocked8Task& t, const float* packed, const Blocked8Epilogue& ep);

}  // namespace graft::backends::cpu::sgemm
