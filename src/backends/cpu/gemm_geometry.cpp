#include "backends/cpu/gemm_geometry.hpp"

#include <algorithm>
#include <cstring>

#include "backends/cpu/onednn_common.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu {
namespace {

// A fused node's activation: Relu in the epilogue; another one (with anyActivation) left to the
// caller (otherActivation); false where the geometry does not take it.
bool setActivation(const ir::Node& n, GemmGeometry& g, bool anyActivation) {
  std::string act = n.attrString("activation", "");
  g.relu = act == "Relu" && n.attrString("activation_domain", "").empty();
  g.otherActivation = !act.empty() && !g.relu;
  return !g.otherActivation || anyActivation;
}

std::optional<GemmGeometry> gemmNodeGeometry(const ir::Node& n, bool anyActivation) {
  if (!onednn::isStaticFloat(n.input(0)) || !onednn::isStaticFloat(n.input(1)) || !onednn::isStaticFloat(n.output(0)))
    return std::nullopt;
  if (n.numInputs() > 3 || n.numOutputs() != 1) return std::nullopt;
  const Shape &a = n.input(0)->info().shape(), &b = n.input(1)->info().shape();
  if (a.size() != 2 || b.size() != 2) return std::nullopt;
  GemmGeometry g;
  g.transA = n.attrInt("transA", 0) != 0;
  g.transB = n.attrInt("transB", 0) != 0;
  g.M = g.transA ? a[1] : a[0];
  g.K = g.transA ? a[0] : a[1];
  g.N = g.transB ? b[0] : b[1];
  if ((g.transB ? b[1] : b[0]) != g.K || g.M <= 0 || g.N <= 0 || g.K <= 0) return std::nullopt;
  if (n.output(0)->info().shape() != Shape{g.M, g.N}) return std::nullopt;
  g.alpha = n.attrFloat("alpha", 1.f);
  g.beta = n.attrFloat("beta", 1.f);
  if (n.hasInput(2) && g.beta != 0.f) {
    if (!onednn::isStaticFloat(n.input(2))) return std::nullopt;
    g.cShape = n.input(2)->info().shape();
    if (g.cShape.size() > 2) return std::nullopt;
    Shape c = g.cShape;
    while (c.size() < 2) c.insert(c.begin(), 1);
    if ((c[0] != 1 && c[0] != g.M) || (c[1] != 1 && c[1] != g.N)) return std::nullopt;
    g.hasC = true;
    g.cRowStride = c[0] == 1 ? 0 : c[1];
    g.cColStride = c[1] == 1 ? 0 : 1;
  }
  if (n.domain() == ops::kGraftDomain && !setActivation(n, g, anyActivation)) return std::nullopt;
  return g;
}

// MatMul / FusedMatMul with A [..., M, K] (rows merged: M' = the product of A's leading axes)
// times a 2-D B [K, N]; no folded Transposes. FusedMatMul's bias broadcasts over rows ([N],
// [1, ..., N], a scalar) or is the whole output.
std::optional<GemmGeometry> matmulGeometry(const ir::Node& n, bool anyActivation) {
  if (!onednn::isStaticFloat(n.input(0)) || !onednn::isStaticFloat(n.input(1)) || !onednn::isStaticFloat(n.output(0)))
    return std::nullopt;
  bool fused = n.domain() == ops::kGraftDomain;
  if (n.numInputs() > (fused ? 3u : 2u) || n.numOutputs() != 1) return std::nullopt;
  if (n.attrs().has("perm_a") || n.attrs().has("perm_b") || n.attrs().has("perm_y")) return std::nullopt;
  const Shape &a = n.input(0)->info().shape(), &b = n.input(1)->info().shape();
  if (a.size() < 2 || b.size() != 2 || a.back() != b[0]) return std::nullopt;
  GemmGeometry g;
  g.K = b[0];
  g.N = b[1];
  g.M = 1;
  for (size_t i = 0; i + 1 < a.size(); ++i) g.M *= a[i];
  Shape y(a.begin(), a.end() - 1);
  y.push_back(g.N);
  if (g.M <= 0 || g.N <= 0 || g.K <= 0 || n.output(0)->info().shape() != y) return std::nullopt;
  if (fused && n.hasInput(2)) {
    if (!onednn::isStaticFloat(n.input(2))) return std::nullopt;
    const Shape& c = n.input(2)->info().shape();
    if (c.size() > y.size()) return std::nullopt;
    int64_t lead = 1;
    for (size_t i = 0; i + 1 < c.size(); ++i) lead *= c[i];
    int64_t last = c.empty() ? 1 : c.back();
    if (c == y) {
      g.cRowStride = g.N;
      g.cColStride = 1;
    } else if (lead == 1 && (last == 1 || last == g.N)) {
      g.cRowStride = 0;
      g.cColStride = last == 1 ? 0 : 1;
    } else {
      return std::nullopt;
    }
    g.hasC = true;
    g.cShape = c;
  }
  if (fused && !setActivation(n, g, anyActivation)) return std::nullopt;
  return g;
}

}  // namespace

std::optional<GemmGeometry> gemmGeometry(const ir::Node& n, bool anyActivation) {
  return n.type() == "Gemm" || n.type() == "FusedGemm" ? gemmNodeGeometry(n, anyActivation)
                                                       : matmulGeometry(n, anyActivation);
}

void AlignedFloats::allocate(int64_t n) {
  size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  owner.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  GRAFT_CHECK(owner, "cannot allocate {} bytes for packed weights", bytes);
  data = owner.get();
}

void packPanels(const float* b, const GemmGeometry& g, int64_t width, float* packed) {
  int64_t P = numPanels(g.N, width);
  for (int64_t p = 0; p < P; ++p) {
    int64_t j0 = p * width, w = std::min(width, g.N - j0);
    float* dst = packed + p * g.K * width;
    for (int64_t k = 0; k < g.K; ++k, dst += width) {
      if (!g.transB) {
        std::memcpy(dst, b + k * g.N + j0, static_cast<size_t>(w) * sizeof(float));
      } else {
        for (int64_t j = 0; j < w; ++j) dst[j] = b[(j0 + j) * g.K + k];
      }
      for (int64_t j = w; j < width; ++j) dst[j] = 0.f;
    }
  }
}

}  // namespace graft::backends::cpu
