#pragma once
// The recurrent product h_{t-1} R^T of graft's batched LSTM kernels (vec_lstm.cpp's inference
// from batch 5, vec_lstm_grad.cpp's LSTMTrain), split over the threads of a team by hidden units.
//
// From batch 5 a step's [N, H] x [H, 4H] is a real matrix product. Each thread of the team owns a
// slice of the hidden units (blocks of 16) and its own single-threaded oneDNN matmul over R's
// rows of those units, the four gates' columns side by side ([N, 4nu]), with R's rows packed once
// into the primitive's weights layout (at compile time for constant weights, at each run for a
// training graph's). A thread then computes its units' gate pre-activations for all N rows and
// their cell, with a barrier between steps (each step reads every unit of h_{t-1}).
//
// On hosts where graft's AVX2 sgemm runs (AVX2 without AVX-512: oneDNN 2.6's matmul there is its
// jit gemm, which packs R's rows again at every step) the slice's product is that sgemm's instead,
// on R's rows packed once into its column panels (lstm2 b32 under GRAFT_CPU_ISA=avx2: 142 -> 88 ms).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <dnnl.hpp>

#include "backends/cpu/gemm_geometry.hpp"

namespace graft::backends::cpu {

/// Wb + Rb of direction d's four gates, out [4H], from an LSTM's B [D, 8H] (b: its data; nullptr,
/// no bias: zeros). Every projection of the LSTM kernels adds these to X W^T (vec_lstm.cpp,
/// vec_lstm_grad.cpp).
inline void gateBias(const float* b, int64_t H, int64_t d, float* out) {
  const int64_t G = 4 * H;
  for (int64_t j = 0; j < G; ++j) out[j] = b ? b[d * 8 * H + j] + b[d * 8 * H + G + j] : 0.0f;
}

/// The hidden units [u0, u1) of thread tid of a team of `team`: blocks of 16, so that each
/// thread's loops stay vectorised (empty for a thread beyond the blocks).
inline std::pair<int64_t, int64_t> hiddenUnitRange(int64_t H, int tid, int team) {
  const int64_t blocks = (H + 15) / 16;
  return {std::min(H, blocks * tid / team * 16), std::min(H, blocks * (tid + 1) / team * 16)};
}

struct RecurrentSlice {
  int64_t u0 = 0, nu = 0;  // the hidden units [u0, u0 + nu)
  int64_t N = 0, H = 0;
  dnnl::matmul prim;
  dnnl::reorder pack;                   // R's rows of the units ([4nu, H], row-major) -> weights
  dnnl::memory::desc user, src, dst;    // R's rows, h [N, H], gates [N, 4nu]
  dnnl::memory weights, scratch;        // in the primitive's layout; its scratchpad (user mode)
  mutable dnnl::memory srcMem, dstMem;  // over the caller's h and gates (set at each run)
  mutable std::vector<float> rows;      // R's rows of the units, gathered for `pack`
  // graft's AVX2 sgemm instead of the primitive (sgemm::available()): R's rows in its panels.
  bool ownGemm = false;
  GemmGeometry geometry;  // [N, H] x [H, 4nu]
  mutable AlignedFloats panels;

  /// Packs the slice's rows of R (one direction's [4H, H]: gate q's row of unit u is q * H + u)
  /// into `weights`, on the calling thread (inside a team's region: sequentially).
  void packFrom(const float* r) const;
  /// gates [N, 4nu] (column q * nu + l: gate q of unit u0 + l) = h [N, H] x R's rows^T, on the
  /// calling thread (one thread at a time per slice).
  void run(const float* h, float* gates) const;
};

/// One slice per thread of a team of `team` (at most one per 16 units) for batch N and hidden
/// size H, the primitives created for the one thread each runs on (the calling thread's oneDNN
/// team is 1 afterwards: callers set theirs back). Empty where oneDNN has no implementation or
/// only a reference one; `impl` receives the implementation's name.
std::vector<RecurrentSlice> makeRecurrentSlices(int64_t N, int64_t H, int team, std::string* impl = nullptr);

}  // namespace graft::backends::cpu
