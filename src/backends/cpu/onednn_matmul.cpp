// oneDNN matmul for ai.onnx MatMul (numpy batch broadcasting, 1-D operands) and Gemm (transA,
// transB, alpha, beta, C broadcast), and ai.graft FusedMatMul / FusedGemm (bias and activation
// post-ops). Float only. Constant right-hand operands (weights) are packed at compile time;
// products of two changing operands run on oneDNN's sgemm where it measured faster (buildSgemm).
// Under bf16Compute() (SessionOptions.enableBf16) the operands are converted to bf16 (constant
// weights once) and the primitive accumulates and writes float32.
#include <algorithm>
#include <cstring>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/fused_activation.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu::onednn {
namespace {

constexpr size_t kMaxRank = DNNL_MAX_NDIMS;

Dims rowMajorStrides(const Dims& d) {
  Dims s(d.size(), 1);
  for (int64_t i = static_cast<int64_t>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

// Left-pads `s` with ones to `rank` dimensions.
Dims padTo(const Shape& s, size_t rank) {
  Dims d(rank - s.size(), 1);
  d.insert(d.end(), s.begin(), s.end());
  return d;
}

// The operands as oneDNN sees them: all of one rank R >= 2, [batch..., M, K] x [batch..., K, N].
struct MatMulConfig {
  Dims a, b, y, bias;  // bias empty when none
  Dims aStrides, bStrides, yStrides;
  bool strided = false;  // some operand is read or written through a folded Transpose
  Shape yShape;  // graft's output shape (vector operands' unit axes dropped)
  float alpha = 1.f, beta = 1.f;
  bool sumC = false;  // Gemm: C broadcast into Y first, added with scale beta by a sum post-op
  Shape cShape;
  int bInput = 1;
};

bool validBroadcast(const Dims& d, const Dims& full) {
  for (size_t i = 0; i < d.size(); ++i)
    if (d[i] != 1 && d[i] != full[i]) return false;
  return true;
}

// The dimensions and strides of Transpose(x, perm) read in place from the row-major array of
// shape `s` (perm from attribute `attr`; the identity when absent). False for a bad perm.
bool permutedView(const ir::Node& n, const char* attr, const Shape& s, Shape& dims, Dims& strides) {
  Dims st = rowMajorStrides(Dims(s.begin(), s.end()));
  if (!n.attrs().has(attr)) {
    dims = s;
    strides = st;
    return true;
  }
  std::vector<int64_t> perm = n.attrInts(attr);
  if (perm.size() != s.size()) return false;
  std::vector<bool> seen(s.size(), false);
  dims.assign(s.size(), 0);
  strides.assign(s.size(), 0);
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t p = perm[i];
    if (p < 0 || p >= static_cast<int64_t>(s.size()) || seen[p]) return false;
    seen[p] = true;
    dims[i] = s[p];
    strides[i] = st[p];
  }
  return true;
}

// Left-pads strides to `rank` axes (the unit axes in front get the whole array's extent).
Dims padStrides(const Dims& st, const Dims& dims, size_t rank) {
  int64_t extent = 1;
  for (size_t i = 0; i < st.size(); ++i) extent = std::max(extent, st[i] * dims[dims.size() - st.size() + i]);
  Dims d(rank - st.size(), extent);
  d.insert(d.end(), st.begin(), st.end());
  return d;
}

// MatMul / FusedMatMul: Y = act(A @ B + Bias), Bias broadcasting to Y; FusedMatMul's perm_a,
// perm_b and perm_y become strides of the operands and of the destination.
std::optional<MatMulConfig> matmulConfig(const ir::Node& n) {
  if (!isStaticFloat(n.input(0)) || !isStaticFloat(n.input(1)) || !isStaticFloat(n.output(0))) return std::nullopt;
  bool fused = n.domain() == ops::kGraftDomain;
  if (n.numInputs() > (fused ? 3u : 2u) || n.numOutputs() != 1) return std::nullopt;
  Shape a, b;
  Dims aSt, bSt;
  if (!permutedView(n, "perm_a", n.input(0)->info().shape(), a, aSt) ||
      !permutedView(n, "perm_b", n.input(1)->info().shape(), b, bSt))
    return std::nullopt;
  if (a.empty() || b.empty()) return std::nullopt;
  bool vecA = a.size() == 1, vecB = b.size() == 1;
  bool permY = n.attrs().has("perm_y");
  if (permY && (vecA || vecB)) return std::nullopt;
  if (vecA) a.insert(a.begin(), 1), aSt.insert(aSt.begin(), a[1]);
  if (vecB) b.push_back(1), bSt.push_back(1);
  size_t rank = std::max(a.size(), b.size());
  if (rank > kMaxRank) return std::nullopt;
  MatMulConfig c;
  c.a = padTo(a, rank);
  c.b = padTo(b, rank);
  c.aStrides = padStrides(aSt, c.a, rank);
  c.bStrides = padStrides(bSt, c.b, rank);
  if (c.a[rank - 1] != c.b[rank - 2]) return std::nullopt;
  c.y = c.a;
  c.y[rank - 1] = c.b[rank - 1];
  for (size_t i = 0; i + 2 < rank; ++i) {
    if (c.a[i] != c.b[i] && c.a[i] != 1 && c.b[i] != 1) return std::nullopt;
    c.y[i] = std::max(c.a[i], c.b[i]);
  }
  for (int64_t d : c.a)
    if (d == 0) return std::nullopt;
  for (int64_t d : c.b)
    if (d == 0) return std::nullopt;
  c.yShape = n.output(0)->info().shape();
  c.yStrides = rowMajorStrides(c.y);
  Shape mmShape = c.yShape;  // the product's shape in graft's terms, before perm_y
  if (permY) {
    // Y = Transpose(P, perm_y): P's axis perm_y[i] is Y's axis i.
    Shape p;
    Dims pSt;
    if (!permutedView(n, "perm_y", Shape(c.y.begin(), c.y.end()), p, pSt) || p != c.yShape) return std::nullopt;
    Dims yRowMajor = rowMajorStrides(Dims(c.yShape.begin(), c.yShape.end()));
    std::vector<int64_t> perm = n.attrInts("perm_y");
    for (size_t i = 0; i < perm.size(); ++i) c.yStrides[perm[i]] = yRowMajor[i];
    mmShape = Shape(c.y.begin(), c.y.end());
  }
  // The view of a graft output-shaped array (unit axes of vector operands put back).
  auto toView = [&](Shape s) {
    if (vecA) s.insert(s.end() - (vecB ? 0 : 1), 1);
    if (vecB) s.push_back(1);
    return s.size() <= rank ? padTo(s, rank) : Dims{};
  };
  if (toView(mmShape) != c.y) return std::nullopt;
  if (fused) {
    if (n.hasInput(2)) {
      if (!isStaticFloat(n.input(2))) return std::nullopt;
      Shape bs = n.input(2)->info().shape();
      if (bs.size() > mmShape.size()) return std::nullopt;
      Dims padded = padTo(bs, mmShape.size());
      c.bias = toView(Shape(padded.begin(), padded.end()));
      if (c.bias.empty() || !validBroadcast(c.bias, c.y)) return std::nullopt;
    }
    dnnl::post_ops po;
    if (!appendActivation(n, po)) return std::nullopt;
  }
  c.strided = n.attrs().has("perm_a") || n.attrs().has("perm_b") || permY;
  if (c.yStrides[rank - 1] != 1) {
    // oneDNN writes rows of Y contiguously: when perm_y makes its columns contiguous instead,
    // compute Yᵀ = Bᵀ Aᵀ (the operands' last two axes and roles swapped).
    auto swapLast2 = [rank](Dims& d) { std::swap(d[rank - 1], d[rank - 2]); };
    std::swap(c.a, c.b);
    std::swap(c.aStrides, c.bStrides);
    for (Dims* d : {&c.a, &c.b, &c.aStrides, &c.bStrides, &c.y, &c.yStrides}) swapLast2(*d);
    if (!c.bias.empty()) swapLast2(c.bias);
    c.bInput = 0;
  }
  return c;
}

// Gemm / FusedGemm: Y = act(alpha * A' @ B' + beta * C).
std::optional<MatMulConfig> gemmConfig(const ir::Node& n) {
  if (!isStaticFloat(n.input(0)) || !isStaticFloat(n.input(1)) || !isStaticFloat(n.output(0))) return std::nullopt;
  if (n.numInputs() > 3 || n.numOutputs() != 1) return std::nullopt;
  Shape a = n.input(0)->info().shape(), b = n.input(1)->info().shape();
  if (a.size() != 2 || b.size() != 2) return std::nullopt;
  bool ta = n.attrInt("transA", 0) != 0, tb = n.attrInt("transB", 0) != 0;
  int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1], K2 = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
  if (K != K2 || M == 0 || N == 0 || K == 0) return std::nullopt;
  MatMulConfig c;
  c.a = {M, K};
  c.b = {K, N};
  c.y = {M, N};
  c.aStrides = ta ? Dims{1, M} : Dims{K, 1};
  c.bStrides = tb ? Dims{1, K} : Dims{N, 1};
  c.yShape = {M, N};
  c.yStrides = {N, 1};
  if (n.output(0)->info().shape() != c.yShape) return std::nullopt;
  c.alpha = n.attrFloat("alpha", 1.f);
  c.beta = n.attrFloat("beta", 1.f);
  if (n.hasInput(2)) {
    if (!isStaticFloat(n.input(2))) return std::nullopt;
    c.cShape = n.input(2)->info().shape();
    if (c.cShape.size() > 2) return std::nullopt;
    Dims cd = padTo(c.cShape, 2);
    if (!validBroadcast(cd, c.y)) return std::nullopt;
    // A bias when nothing scales it; otherwise beta * C through the sum post-op.
    if (c.alpha == 1.f && c.beta == 1.f) c.bias = cd;
    else if (c.beta != 0.f) c.sumC = true;
  }
  if (n.domain() == ops::kGraftDomain) {
    dnnl::post_ops po;
    if (!appendActivation(n, po)) return std::nullopt;
  }
  return c;
}

bool supportsMatMul(const ir::Node& n) { return matmulConfig(n).has_value(); }
bool supportsGemm(const ir::Node& n) { return gemmConfig(n).has_value(); }

// The element strides of a C (Gemm's, or a bias row) of shape `s` broadcast to [M, N]: 0 along
// its unit (or missing) axes.
std::pair<int64_t, int64_t> broadcastStrides(Shape s) {
  while (s.size() < 2) s.insert(s.begin(), 1);
  return {s[0] == 1 ? 0 : s[1], s[1] == 1 ? 0 : 1};
}

// Y [M, N] = C broadcast (strides from broadcastStrides).
void fillBroadcast(const float* c, std::pair<int64_t, int64_t> st, float* y, int64_t M, int64_t N) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = c + m * st.first;
    if (st.second == 1)
      std::memcpy(y + m * N, row, sizeof(float) * static_cast<size_t>(N));
    else
      std::fill(y + m * N, y + (m + 1) * N, row[0]);
  }
}

struct MatMulState {
  dnnl::matmul prim;
  memory::desc aDesc, bDesc, yDesc, biasDesc;
  PackedOperand weights;
  Shape yShape, cShape;
  bool bias = false, sumC = false;
  int threads = 1;
  int bInput = 1;    // the input oneDNN reads as weights (0: the product is computed transposed)
  ActivationFn act;  // applied after the primitive (activationAfterPrimitive)
  // bf16 (bf16Compute()): A is converted into aPrim (dense bf16) on every run.
  bool convertA = false;
  memory::desc aPrim;
  dnnl::reorder aToPrim;
};

// Creates the primitive (float32, or bf16 operands with float32 accumulation and output) and
// packs constant weights; false when oneDNN has no implementation (or, for bf16, only its
// reference one).
bool makePrimitive(MatMulState& st, const MatMulConfig& c, const ir::Node& n, const NDArray* constB, bool bf16) {
  auto f32 = memory::data_type::f32, bf = memory::data_type::bf16;
  // Constant weights may be packed into whatever layout the primitive likes; others are read
  // where they are. In bf16, A is converted into a dense bf16 array and B into the primitive's
  // layout (once when constant, on every run otherwise).
  memory::desc aPrim = bf16 ? memory::desc(c.a, bf, memory::format_tag::any) : st.aDesc;
  memory::desc bPrim = bf16     ? memory::desc(c.b, bf, memory::format_tag::any)
                       : constB ? memory::desc(c.b, f32, memory::format_tag::any)
                                : st.bDesc;
  dnnl::primitive_attr attr;
  if (c.alpha != 1.f) attr.set_output_scales(0, {c.alpha});
  dnnl::post_ops po;
  if (c.sumC) po.append_sum(c.beta);
  if (n.domain() == ops::kGraftDomain) appendActivation(n, po);
  attr.set_post_ops(po);
  try {
    auto d =
        st.bias ? dnnl::matmul::desc(aPrim, bPrim, st.biasDesc, st.yDesc) : dnnl::matmul::desc(aPrim, bPrim, st.yDesc);
    dnnl::matmul::primitive_desc pd(d, attr, engine());
    std::string impl = pd.impl_info_str();
    if (bf16 && isReferenceImplementation(impl)) return false;
    // The reference implementation is what oneDNN falls back to for strides its fast kernels
    // cannot read; graft's composite (Transpose, then MatMul) is faster than that.
    if (c.strided && isReferenceImplementation(impl)) {
      noteImplementation(impl);
      return false;
    }
    noteImplementation(bf16Compute() ? bf16ImplementationNote(impl, bf16) : impl);
    st.prim = dnnl::matmul(pd);
    st.convertA = bf16;
    if (bf16) {
      st.aPrim = pd.src_desc();
      st.aToPrim =
          dnnl::reorder(memory(st.aDesc, engine(), DNNL_MEMORY_NONE), memory(st.aPrim, engine(), DNNL_MEMORY_NONE));
    }
    st.weights.init(st.bDesc, pd.weights_desc(), constB);
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

// oneDNN's sgemm (dnnl_sgemm) in place of the matmul primitive, for a product whose right-hand
// operand changes between steps (so nothing is packed ahead), under sgemmMode(): Y [M, N] =
// alpha A' B' (+ beta C, or + a bias row, written into Y first; sgemm's beta then adds it). It
// takes 2-D operands read directly or transposed, A's rows merged over leading axes B does not
// have, a row-major Y, and an activation graft applies after the primitive; nullptr otherwise,
// or where the mode's rule (sgemmGains) leaves the product to the primitive.
ops::KernelFn buildSgemm(const ir::Node& n, const MatMulConfig& c, const std::shared_ptr<MatMulState>& st) {
  KernelMode mode = sgemmMode();
  if (mode == KernelMode::Off || c.bInput != 1) return nullptr;
  if (n.domain() == ops::kGraftDomain && !n.attrString("activation", "").empty() && !st->act) return nullptr;
  const size_t r = c.y.size();
  int64_t rows = 1;  // A's leading axes, merged into M
  for (size_t i = 0; i + 2 < r; ++i) {
    if (c.b[i] != 1) return nullptr;
    rows *= c.a[i];
  }
  const int64_t M = c.a[r - 2], K = c.a[r - 1], N = c.b[r - 1];
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  if (c.aStrides[r - 1] == 1) {
    lda = c.aStrides[r - 2];
    int64_t next = lda * M;  // the stride that merges the leading axes into rows
    for (size_t i = r - 2; i-- > 0;) {
      if (c.a[i] != 1 && c.aStrides[i] != next) return nullptr;
      next *= c.a[i];
    }
    if (rows > 1 && lda != K) return nullptr;
  } else if (c.aStrides[r - 2] == 1 && rows == 1) {
    ta = true;
    lda = c.aStrides[r - 1];
  } else {
    return nullptr;
  }
  if (c.bStrides[r - 1] == 1)
    ldb = c.bStrides[r - 2];
  else if (c.bStrides[r - 2] == 1)
    tb = true, ldb = c.bStrides[r - 1];
  else
    return nullptr;
  if (c.yStrides[r - 1] != 1 || c.yStrides[r - 2] != N) return nullptr;
  if (lda < std::max<int64_t>(1, ta ? M : K) || ldb < std::max<int64_t>(1, tb ? K : N)) return nullptr;
  int64_t biasN = 0;
  if (!c.bias.empty()) {
    for (size_t i = 0; i + 1 < r; ++i)
      if (c.bias[i] != 1) return nullptr;
    biasN = c.bias[r - 1];
  }
  const int64_t rowsY = M * rows;
  if (mode == KernelMode::Auto && !sgemmGains(rowsY, K, N, ta, tb)) return nullptr;
  noteImplementation("sgemm");
  const float alpha = c.alpha, beta = c.sumC ? c.beta : biasN ? 1.f : 0.f;
  const bool fillY = c.sumC || biasN;  // Y starts as C or the bias row, which sgemm's beta keeps
  const auto fillStrides = c.sumC ? broadcastStrides(c.cShape) : broadcastStrides(Shape{biasN});
  return [st, rowsY, N, K, ta, tb, lda, ldb, alpha, beta, fillY, fillStrides](ops::KernelContext& k) {
    setThreads(st->threads);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, st->yShape);
    float* yp = y.data<float>();
    if (fillY) fillBroadcast(k.input(2).data<float>(), fillStrides, yp, rowsY, N);
    dnnl_status_t status = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', rowsY, N, K, alpha, k.input(0).data<float>(), lda,
                                      k.input(1).data<float>(), ldb, beta, yp, N);
    GRAFT_ASSERT(status == dnnl_success, "dnnl_sgemm failed with status {}", static_cast<int>(status));
    if (st->act) st->act(k.pool(), yp, y.numel());
  };
}

ops::KernelFn build(ops::CompileContext& ctx, const MatMulConfig& c) {
  const ir::Node& n = ctx.node();
  auto st = std::make_shared<MatMulState>();
  st->threads = ctx.pool().numThreads();
  st->yShape = c.yShape;
  st->cShape = c.cShape;
  st->sumC = c.sumC;
  st->bias = !c.bias.empty();
  setThreads(st->threads);
  auto f32 = memory::data_type::f32;
  st->aDesc = memory::desc(c.a, f32, c.aStrides);
  st->bDesc = memory::desc(c.b, f32, c.bStrides);
  st->yDesc = memory::desc(c.y, f32, c.yStrides);
  if (st->bias) {
    // A bias broadcasting to the transposed product (bInput 0) is read transposed too.
    Dims bs = rowMajorStrides(c.bias);
    if (c.bInput == 0) {
      Dims plain = c.bias;
      std::swap(plain[plain.size() - 1], plain[plain.size() - 2]);
      bs = rowMajorStrides(plain);
      std::swap(bs[bs.size() - 1], bs[bs.size() - 2]);
    }
    st->biasDesc = memory::desc(c.bias, f32, bs);
  }
  st->bInput = c.bInput;
  if (n.domain() == ops::kGraftDomain && activationAfterPrimitive(n)) st->act = fusedActivation(n);
  const NDArray* constB = ctx.constantInput(c.bInput);
  if (!constB && !bf16Compute())
    if (auto fn = buildSgemm(n, c, st)) return fn;
  // bf16 where asked and oneDNN has a fast implementation for it, else float32.
  if (!(bf16Compute() && makePrimitive(*st, c, n, constB, true)) && !makePrimitive(*st, c, n, constB, false))
    return decline();
  return [st](ops::KernelContext& k) {
    setThreads(st->threads);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, st->yShape);
    // Y = C broadcast to [M, N]; the primitive then adds alpha * A'B' to beta * Y.
    if (st->sumC)
      fillBroadcast(k.input(2).data<float>(), broadcastStrides(st->cShape), y.data<float>(), st->yShape[0],
                    st->yShape[1]);
    memory a = wrap(st->aDesc, k.input(1 - st->bInput));
    NDArray aScratch;
    if (st->convertA) {
      aScratch = NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(st->aPrim.get_size())});
      memory m = wrap(st->aPrim, aScratch);
      execute(st->aToPrim, {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, m}});
      a = m;
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a},
                                         {DNNL_ARG_WEIGHTS, st->weights.get(k.input(st->bInput))},
                                         {DNNL_ARG_DST, wrap(st->yDesc, y)}};
    if (st->bias) args[DNNL_ARG_BIAS] = wrap(st->biasDesc, k.input(2));
    execute(st->prim, args);
    if (st->act) st->act(k.pool(), y.data<float>(), y.numel());
  };
}

ops::KernelFn makeMatMul(ops::CompileContext& ctx) {
  auto c = matmulConfig(ctx.node());
  GRAFT_ASSERT(c, "{}: makeMatMul on an unsupported node", ctx.node().describe());
  return build(ctx, *c);
}

ops::KernelFn makeGemm(ops::CompileContext& ctx) {
  auto c = gemmConfig(ctx.node());
  GRAFT_ASSERT(c, "{}: makeGemm on an unsupported node", ctx.node().describe());
  return build(ctx, *c);
}

}  // namespace
}  // namespace graft::backends::cpu::onednn

GRAFT_REGISTER_CPU_KERNELS(onednn_matmul) {
  using namespace graft::backends::cpu::onednn;
  // The last field: they honour bf16Compute().
  r.add({"", "MatMul", "onednn_matmul", supportsMatMul, makeMatMul, 0, true});
  r.add({graft::ops::kGraftDomain, "FusedMatMul", "onednn_matmul", supportsMatMul, makeMatMul, 0, true});
  r.add({"", "Gemm", "onednn_gemm", supportsGemm, makeGemm, 0, true});
  r.add({graft::ops::kGraftDomain, "FusedGemm", "onednn_gemm", supportsGemm, makeGemm, 0, true});
}
