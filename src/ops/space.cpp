// DepthToSpace (DCR and CRD) and SpaceToDepth: block rearrangements between channels and the
// two spatial axes of an [N, C, H, W] tensor.
#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

int64_t blocksizeOf(const ir::Node& n) {
  int64_t b = n.attrInt("blocksize");
  GRAFT_CHECK(b >= 1 && b <= (int64_t{1} << 20), "{}: blocksize must be >= 1, got {}", n.describe(), b);
  return b;
}

int64_t mulChecked(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  GRAFT_CHECK(!__builtin_mul_overflow(a, b, &r), "{}: output dimension {} x {} overflows", what, a, b);
  return r;
}

// Calls f(x index, y index) for every element, with the channel-major layout of DepthToSpace's
// input: x[n, ch(c, i, j), h, w] <-> y[n, c, h * b + i, w * b + j].
template <class F>
void forEachBlockElement(int64_t N, int64_t Cy, int64_t H, int64_t W, int64_t b, bool crd, F&& f) {
  int64_t Cx = Cy * b * b;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < Cy; ++c)
      for (int64_t i = 0; i < b; ++i)
        for (int64_t j = 0; j < b; ++j) {
          int64_t ch = crd ? (c * b + i) * b + j : (i * b + j) * Cy + c;
          for (int64_t h = 0; h < H; ++h)
            for (int64_t w = 0; w < W; ++w) {
              int64_t xi = ((n * Cx + ch) * H + h) * W + w;
              int64_t yi = ((n * Cy + c) * H * b + h * b + i) * W * b + w * b + j;
              f(xi, yi);
            }
        }
}

KernelFn depthToSpaceKernel(CompileContext& c) {
  const auto& n = c.node();
  int64_t b = blocksizeOf(n);
  std::string mode = n.attrString("mode", "DCR");
  std::string what = n.describe();
  GRAFT_CHECK(mode == "DCR" || mode == "CRD", "{}: mode must be DCR or CRD, got '{}'", what, mode);
  bool crd = mode == "CRD";
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() == 4, "{}: input must have rank 4 ([N, C, H, W]), got shape {}", what,
                shapeToString(x.shape()));
    GRAFT_CHECK(x.dim(1) % (b * b) == 0, "{}: channels ({}) must be a multiple of blocksize^2 ({})", what, x.dim(1),
                b * b);
    int64_t N = x.dim(0), Cy = x.dim(1) / (b * b), H = x.dim(2), W = x.dim(3);
    Shape ys = {N, Cy, mulChecked(H, b, what), mulChecked(W, b, what)};
    shapeNumel(ys);  // throws on overflow
    dispatch<kAll>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& y = k.allocOutput(0, x.dtype(), ys);
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      forEachBlockElement(N, Cy, H, W, b, crd, [&](int64_t xi, int64_t yi) { yp[yi] = xp[xi]; });
    });
  };
}

KernelFn spaceToDepthKernel(CompileContext& c) {
  const auto& n = c.node();
  int64_t b = blocksizeOf(n);
  std::string what = n.describe();
  // mode (opset 28): the channel order of the output, as DepthToSpace's input.
  std::string mode = n.attrString("mode", "DCR");
  GRAFT_CHECK(mode == "DCR" || mode == "CRD", "{}: mode must be DCR or CRD, got '{}'", what, mode);
  bool crd = mode == "CRD";
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() == 4, "{}: input must have rank 4 ([N, C, H, W]), got shape {}", what,
                shapeToString(x.shape()));
    GRAFT_CHECK(x.dim(2) % b == 0 && x.dim(3) % b == 0, "{}: spatial shape [{}, {}] must be a multiple of blocksize {}",
                what, x.dim(2), x.dim(3), b);
    int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2) / b, W = x.dim(3) / b;
    Shape ys = {N, mulChecked(C, b * b, what), H, W};
    shapeNumel(ys);  // throws on overflow
    dispatch<kAll>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& y = k.allocOutput(0, x.dtype(), ys);
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      // SpaceToDepth is the inverse of DepthToSpace in the same mode.
      forEachBlockElement(N, C, H, W, b, crd, [&](int64_t yi, int64_t xi) { yp[yi] = xp[xi]; });
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(space) {
  // Each is the other's inverse in the same mode: a permutation of elements, so its gradient is
  // the inverse permutation of dy.
  auto inverse = [](const char* other) {
    return [other](GradBuilder& g) {
      ir::Attributes a;
      a.set("blocksize", g.node().attrInt("blocksize"));
      a.set("mode", g.node().attrString("mode", "DCR"));
      g.setDx(0, g.op(other, {g.dy()}, a));
    };
  };
  r.add("DepthToSpace").setReference(depthToSpaceKernel).setVjp(inverse("SpaceToDepth"));
  r.add("SpaceToDepth").setReference(spaceToDepthKernel).setVjp(inverse("DepthToSpace"));
}

}  // namespace graft::ops
