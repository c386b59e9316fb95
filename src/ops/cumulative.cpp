// CumSum and CumProd (opset 26): running sums and products along an axis, inclusive or
// exclusive, forwards or in reverse. (CumSum's gradient is in reduce.cpp, CumProd's below.)
#include "ops/dtype_dispatch.hpp"
#include "ops/fallback_infer.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// Running sums (CumSum) or products (CumProd) of x along the axis input.
template <bool Product>
KernelFn cumulativeKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  bool exclusive = n.attrInt("exclusive", 0) != 0;
  bool reverse = n.attrInt("reverse", 0) != 0;
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& axisT = k.input(1);
    GRAFT_CHECK(axisT.numel() == 1 && axisT.rank() <= 1,
                "{}: axis must be a scalar (or a 1-element tensor), got shape {}", what, shapeToString(axisT.shape()));
    GRAFT_CHECK(axisT.dtype() == DataType::Int32 || axisT.dtype() == DataType::Int64,
                "{}: axis must be INT32 or INT64, got {}", what, dtypeName(axisT.dtype()));
    GRAFT_CHECK(x.rank() >= 1, "{}: the input must have rank >= 1, got a scalar", what);
    int64_t axis = normalizeAxis(toInt64Vector(axisT)[0], x.rank(), what);
    int64_t len = x.dim(axis), inner = shapeProduct(x.shape(), axis + 1, x.rank()),
            outer = shapeProduct(x.shape(), 0, axis);
    dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      // Floats accumulate in double; integers in uint64 (wrapping as the element type would, without UB).
      using Acc = std::conditional_t<kIsFloat<T>, double, uint64_t>;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t in = 0; in < inner; ++in) {
          int64_t base = o * len * inner + in;
          Acc acc = Product ? 1 : 0;
          for (int64_t s = 0; s < len; ++s) {
            int64_t off = base + (reverse ? len - 1 - s : s) * inner;
            if (exclusive) yp[off] = static_cast<T>(static_cast<ComputeType<T>>(acc));
            Acc v;
            if constexpr (kIsFloat<T>)
              v = static_cast<double>(static_cast<ComputeType<T>>(xp[off]));
            else
              v = static_cast<uint64_t>(xp[off]);
            acc = Product ? acc * v : acc + v;
            if (!exclusive) yp[off] = static_cast<T>(static_cast<ComputeType<T>>(acc));
          }
        }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(cumulative) {
  r.add("CumSum").setReference(cumulativeKernel<false>).noGradient({1});
  r.add("CumProd").setReference(cumulativeKernel<true>).noGradient({1});
  // Until the linked onnx has their schemas (opset > 17).
  setFallbackInfer("", "CumProd", sameTypeAsInput(0));
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {

// y_j = prod of x_k over k in S_j (k <= j; k < j when exclusive; mirrored when reverse), so
// dx_i = sum over j with i in S_j of dy_j * prod over S_j without i. Exact also where x has
// zeros (no division): for each i, CumProd of x with x_i replaced by 1 gives every such product;
// a constant mask keeps the j with i in S_j. O(L^2) per line along the axis.
void cumProdVjp(GradBuilder& g) {
  using namespace gradutil;
  std::string what = g.node().describe();
  ir::Tensor* x = g.in(0);
  auto axisV = constantInts(g.in(1));
  GRAFT_CHECK(axisV && axisV->size() == 1, "{}: the gradient needs a constant axis", what);
  int64_t rank = rankOf(g, x);
  int64_t axis = normAxis(g, (*axisV)[0], rank);
  GRAFT_CHECK(x->info().dims()[axis].known(), "{}: the gradient needs the length of axis {}", what, axis);
  int64_t L = x->info().dims()[axis].value;
  bool exclusive = g.node().attrInt("exclusive", 0) != 0, reverse = g.node().attrInt("reverse", 0) != 0;
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) perm[d] = d;
  std::swap(perm[axis], perm[rank - 1]);  // its own inverse
  auto toLast = [&](ir::Tensor* t) { return axis == rank - 1 ? t : transpose(g, t, perm); };
  NDArray eye(DataType::Bool, {L, L}), mask(DataType::Bool, {L, L});
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) {
      eye.data<bool>()[i * L + j] = i == j;
      bool in = reverse ? (exclusive ? i > j : i >= j) : (exclusive ? i < j : i <= j);
      mask.data<bool>()[i * L + j] = in;  // row i, column j: i in S_j
    }
  ir::Tensor* minus2 = g.int64s({-2});
  ir::Tensor* xt = toLast(x);                                                                     // [..., L]
  ir::Tensor* z = g.where(g.constant(eye), g.scalarLike(1, x), g.op("Unsqueeze", {xt, minus2}));  // [..., L(i), L(k)]
  ir::Tensor* c = g.op("CumProd", {z, g.int64s({-1})}, g.node().attrs());
  ir::Tensor* terms = g.mul(c, g.op("Unsqueeze", {toLast(g.dy()), minus2}));
  terms = g.where(g.constant(mask), terms, g.zerosLike(terms));
  ir::Attributes keep;
  keep.set("keepdims", int64_t{0});
  g.setDx(0, toLast(g.op("ReduceSum", {terms, g.int64s({-1})}, keep)));
}

GRAFT_REGISTER_OPS(cumulative_vjp) { r.add("CumProd").setVjp(cumProdVjp); }

}  // namespace graft::ops
