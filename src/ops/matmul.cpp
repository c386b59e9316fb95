// MatMul (numpy semantics, batch broadcasting) and Gemm.
#include "ops/cast_util.hpp"
#include "ops/cost.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// C[m,n] = alpha * sum_k A[m,k] B[k,n] + beta * Cin[m,n], with explicit strides. Floats
// accumulate in double, which keeps the reference backend a trustworthy golden model. Integers
// accumulate modulo 2^64 (no signed-overflow UB) and wrap to T, as numpy's integer matmul does;
// a non-unit alpha or beta scales in double and saturates back.
template <class T>
void gemmRef(int64_t M, int64_t N, int64_t K, const T* A, int64_t sam, int64_t sak, const T* B, int64_t sbk, int64_t sbn,
             T* C, double alpha, double beta, const T* Cin, int64_t scm, int64_t scn) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      if constexpr (std::is_integral_v<T>) {
        uint64_t acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += static_cast<uint64_t>(A[m * sam + k * sak]) * static_cast<uint64_t>(B[k * sbk + n * sbn]);
        uint64_t cv = Cin ? static_cast<uint64_t>(Cin[m * scm + n * scn]) : 0;
        if (alpha == 1.0 && (beta == 1.0 || !Cin)) {
          C[m * N + n] = static_cast<T>(acc + cv);
        } else {
          double v = alpha * static_cast<double>(static_cast<T>(acc));
          if (Cin) v += beta * static_cast<double>(Cin[m * scm + n * scn]);
          C[m * N + n] = convertElement<T>(v);
        }
      } else {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += static_cast<double>(static_cast<ComputeType<T>>(A[m * sam + k * sak])) *
                 static_cast<double>(static_cast<ComputeType<T>>(B[k * sbk + n * sbn]));
        double v = alpha * acc;
        if (Cin) v += beta * static_cast<double>(static_cast<ComputeType<T>>(Cin[m * scm + n * scn]));
        C[m * N + n] = static_cast<T>(static_cast<ComputeType<T>>(v));
      }
    }
}

KernelFn matmulKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    NDArray a = k.input(0), b = k.input(1);
    GRAFT_CHECK(a.rank() >= 1 && b.rank() >= 1, "{}: MatMul inputs must have rank >= 1, got shapes {} and {}", what,
                shapeToString(a.shape()), shapeToString(b.shape()));
    GRAFT_CHECK(a.dtype() == b.dtype(), "{}: MatMul inputs must have the same type, got {} and {}", what,
                dtypeName(a.dtype()), dtypeName(b.dtype()));
    bool vecA = a.rank() == 1, vecB = b.rank() == 1;
    if (vecA) a = a.reshaped({1, a.dim(0)});
    if (vecB) b = b.reshaped({b.dim(0), 1});
    int64_t M = a.dim(-2), K = a.dim(-1), K2 = b.dim(-2), N = b.dim(-1);
    GRAFT_CHECK(K == K2, "{}: inner dimensions differ: {} vs {}", what, shapeToString(k.input(0).shape()),
                shapeToString(k.input(1).shape()));
    Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
    Shape batch = broadcastShapes(ba, bb, what);
    Shape os = batch;
    os.push_back(M);
    os.push_back(N);
    auto sta = broadcastStrides(ba, batch), stb = broadcastStrides(bb, batch);
    int64_t nb = shapeNumel(batch);
    Shape finalShape = batch;
    if (!vecA) finalShape.push_back(M);
    if (!vecB) finalShape.push_back(N);
    dispatch<kNumeric>(a.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, a.dtype(), finalShape);
      std::vector<int64_t> idx(batch.size(), 0);
      for (int64_t i = 0; i < nb; ++i) {
        int64_t oa = 0, ob = 0, rem = i;
        for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
          int64_t id = rem % batch[d];
          rem /= batch[d];
          oa += id * sta[d];
          ob += id * stb[d];
        }
        gemmRef<T>(M, N, K, a.data<T>() + oa * M * K, K, 1, b.data<T>() + ob * K * N, N, 1, y.data<T>() + i * M * N, 1.0,
                   0.0, nullptr, 0, 0);
      }
    });
  };
}

KernelFn gemmKernel(CompileContext& c) {
  const auto& n = c.node();
  std::string what = n.describe();
  double alpha = n.attrFloat("alpha", 1.0f), beta = n.attrFloat("beta", 1.0f);
  bool ta = n.attrInt("transA", 0) != 0, tb = n.attrInt("transB", 0) != 0;
  return [=](KernelContext& k) {
    const NDArray& a = k.input(0);
    const NDArray& b = k.input(1);
    GRAFT_CHECK(a.rank() == 2 && b.rank() == 2, "{}: Gemm inputs must be 2-D, got {} and {}", what,
                shapeToString(a.shape()), shapeToString(b.shape()));
    int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
    int64_t K2 = tb ? b.dim(1) : b.dim(0), N = tb ? b.dim(0) : b.dim(1);
    GRAFT_CHECK(K == K2, "{}: inner dimensions differ ({} vs {})", what, K, K2);
    GRAFT_CHECK(a.dtype() == b.dtype() && (!k.hasInput(2) || k.input(2).dtype() == a.dtype()),
                "{}: A, B and C must have the same type, got {}, {} and {}", what, dtypeName(a.dtype()), dtypeName(b.dtype()),
                k.hasInput(2) ? dtypeName(k.input(2).dtype()) : "none");
    dispatch<kNumeric>(a.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, a.dtype(), {M, N});
      const T* cp = nullptr;
      int64_t scm = 0, scn = 0;
      NDArray cb;
      if (k.hasInput(2)) {
        cb = k.input(2);
        Shape cs = cb.shape();
        GRAFT_CHECK(broadcastShapes(cs, {M, N}, what) == Shape({M, N}), "{}: C of shape {} does not broadcast to [{}, {}]",
                    what, shapeToString(cs), M, N);
        auto st = broadcastStrides(cs, {M, N});
        scm = st[0];
        scn = st[1];
        cp = cb.data<T>();
      }
      gemmRef<T>(M, N, K, a.data<T>(), ta ? 1 : K, ta ? M : 1, b.data<T>(), tb ? 1 : N, tb ? K : 1, y.data<T>(), alpha, beta,
                 cp, scm, scn);
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(matmul) {
  r.add("MatMul").setReference(matmulKernel).setCost(cost::matmul);
  r.add("Gemm").setReference(gemmKernel).setCost(cost::gemm);
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"

namespace graft::ops {
namespace {

// Transpose of the last two axes (rank from the inferred type).
ir::Tensor* swapLast2(GradBuilder& g, ir::Tensor* t) {
  int64_t r = t->info().rank();
  GRAFT_CHECK(t->info().hasShape() && r >= 2, "{}: gradient needs the rank of '{}'", g.node().describe(), t->id());
  std::vector<int64_t> perm(r);
  for (int64_t i = 0; i < r; ++i) perm[i] = i;
  std::swap(perm[r - 1], perm[r - 2]);
  ir::Attributes a;
  a.set("perm", perm);
  return g.op("Transpose", {t}, a);
}

ir::Tensor* gemm(GradBuilder& g, ir::Tensor* x, ir::Tensor* y, bool tx, bool ty, double alpha) {
  ir::Attributes at;
  at.set("transA", int64_t{tx});
  at.set("transB", int64_t{ty});
  at.set("alpha", static_cast<float>(alpha));
  return g.op("Gemm", {x, y}, at);
}

void matmulVjp(GradBuilder& g) {
  ir::Tensor* a = g.in(0);
  ir::Tensor* b = g.in(1);
  GRAFT_CHECK(a->info().hasShape() && b->info().hasShape(), "{}: gradient needs the ranks of its inputs",
              g.node().describe());
  int64_t ra = a->info().rank(), rb = b->info().rank();
  ir::Tensor* dy = g.dy();
  if (ra == 1 && rb == 1) {  // dot product: y is a scalar
    if (g.wants(0)) g.setDx(0, g.mul(dy, b));
    if (g.wants(1)) g.setDx(1, g.mul(dy, a));
    return;
  }
  // Promote vectors to matrices as MatMul does, and dy to match.
  ir::Tensor* a2 = ra == 1 ? g.op("Unsqueeze", {a, g.int64s({0})}) : a;
  ir::Tensor* b2 = rb == 1 ? g.op("Unsqueeze", {b, g.int64s({1})}) : b;
  ir::Tensor* dy2 = dy;
  if (ra == 1) dy2 = g.op("Unsqueeze", {dy2, g.int64s({-2})});
  if (rb == 1) dy2 = g.op("Unsqueeze", {dy2, g.int64s({-1})});
  if (g.wants(0)) {
    ir::Tensor* da = g.op("MatMul", {dy2, swapLast2(g, b2)});
    da = g.unbroadcast(da, a2);
    g.setDx(0, g.reshapeLike(da, a));
  }
  const TensorInfo& bi = b->info();
  if (g.wants(1) && ra >= 3 && rb == 2 && bi.isStatic() && bi.shape()[0] > 0 && bi.shape()[1] > 0) {
    // B is shared by every batch of A: dB = sum_i A_iᵀ dY_i is one product of the batches laid
    // end to end, instead of a product per batch and their sum.
    ir::Tensor* af = g.op("Reshape", {a, g.int64s({-1, bi.shape()[0]})});
    ir::Tensor* dyf = g.op("Reshape", {dy, g.int64s({-1, bi.shape()[1]})});
    g.setDx(1, gemm(g, af, dyf, true, false, 1.0));
  } else if (g.wants(1)) {
    ir::Tensor* db = g.op("MatMul", {swapLast2(g, a2), dy2});
    db = g.unbroadcast(db, b2);
    g.setDx(1, g.reshapeLike(db, b));
  }
}

void gemmVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  double alpha = n.attrFloat("alpha", 1.0f), beta = n.attrFloat("beta", 1.0f);
  bool ta = n.attrInt("transA", 0) != 0, tb = n.attrInt("transB", 0) != 0;
  ir::Tensor *a = g.in(0), *b = g.in(1), *dy = g.dy();
  if (g.wants(0)) g.setDx(0, ta ? gemm(g, b, dy, tb, true, alpha) : gemm(g, dy, b, false, !tb, alpha));
  if (g.wants(1)) g.setDx(1, tb ? gemm(g, dy, a, true, ta, alpha) : gemm(g, a, dy, !ta, false, alpha));
  if (g.in(2) && g.wants(2)) g.setDx(2, g.unbroadcast(beta == 1.0 ? dy : g.scale(dy, beta), g.in(2)));
}

}  // namespace

GRAFT_REGISTER_OPS(matmul_vjp) {
  r.add("MatMul").setVjp(matmulVjp);
  r.add("Gemm").setVjp(gemmVjp);
}

}  // namespace graft::ops
