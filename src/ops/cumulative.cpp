// CumProd (opset 26): running products along an axis, inclusive or exclusive, forwards or in
// reverse. (CumSum, older, lives with the reductions in reduce.cpp.)
#include "ops/dtype_dispatch.hpp"
#include "ops/fallback_infer.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

KernelFn cumProdKernel(CompileContext& c) {
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
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t in = 0; in < inner; ++in) {
          int64_t base = o * len * inner + in;
          // Floats multiply in double; integers in uint64 (wrapping as the element type would, without UB).
          std::conditional_t<kIsFloat<T>, double, uint64_t> acc = 1;
          for (int64_t s = 0; s < len; ++s) {
            int64_t off = base + (reverse ? len - 1 - s : s) * inner;
            if (exclusive) yp[off] = static_cast<T>(static_cast<ComputeType<T>>(acc));
            if constexpr (kIsFloat<T>)
              acc *= static_cast<double>(static_cast<ComputeType<T>>(xp[off]));
            else
              acc *= static_cast<uint64_t>(xp[off]);
            if (!exclusive) yp[off] = static_cast<T>(static_cast<ComputeType<T>>(acc));
          }
        }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(cumulative) {
  r.add("CumProd").setReference(cumProdKernel).noGradient({1});
  // Until the linked onnx has their schemas (opset > 17).
  setFallbackInfer("", "CumProd", sameTypeAsInput(0));
}

}  // namespace graft::ops
