#pragma once
// What graft's own float matrix products (sgemm_avx2.cpp, vec_gemv.cpp) read from a Gemm,
// FusedGemm, MatMul or FusedMatMul node, and B packed into column panels, shared by both.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>

#include "ir/graph.hpp"

namespace graft::backends::cpu {

/// Y = act(alpha * A' @ B' + beta * C) with A' [M, K], B' [K, N]: Gemm / FusedGemm (no activation
/// or Relu), or MatMul / FusedMatMul of A [..., M, K] (rows merged) by a 2-D B.
struct GemmGeometry {
  int64_t M = 0, N = 0, K = 0;
  bool transA = false, transB = false;
  float alpha = 1.f, beta = 1.f;
  bool hasC = false, relu = false;
  bool otherActivation = false;  // an activation other than Relu, which the kernel applies after
  Shape cShape;
  int64_t cRowStride = 0, cColStride = 0;  // element strides of C broadcast to [M, N]
};

/// The geometry of a float node with static shapes, or nullopt where the node is none of the
/// above (a batched B, folded transposes, a C that does not broadcast, an activation other than
/// Relu unless `anyActivation`: then otherActivation says the caller applies it).
std::optional<GemmGeometry> gemmGeometry(const ir::Node& n, bool anyActivation = false);

/// 64-byte aligned floats (packed weights).
struct AlignedFloats {
  float* data = nullptr;
  std::unique_ptr<float[], void (*)(void*)> owner{nullptr, std::free};
  void allocate(int64_t n);
};

inline int64_t numPanels(int64_t N, int64_t width) { return (N + width - 1) / width; }

/// B' (K x N, read through g.transB) into panels of `width` columns: packed[(p * K + k) * width +
/// j] = B'(k, width * p + j), the last panel zero-padded.
void packPanels(const float* b, const GemmGeometry& g, int64_t width, float* packed);

}  // namespace graft::backends::cpu
