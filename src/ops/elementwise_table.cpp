// The reference kernels of the unary rows of the elementwise table (ops/elementwise_table.hpp),
// and of its two-operand rows outside programs: each row's formula over the compute type, its
// parameters read from the node's attributes.
// Gradients live with their families (activation.cpp, math.cpp).
#include "ops/elementwise_table.hpp"

#include "ops/elementwise.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::ops {
namespace {

// The reference of a two-operand row outside programs: operands of one shape and type (no
// broadcasting), Set: their element types.
template <ew::Op R, uint32_t Set>
KernelFactory sameShapeBinary() {
  return [](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    ew::Row::Params p = ew::params(ew::row(R), c.node());
    return [what, p](KernelContext& k) {
      const NDArray& a = k.input(0);
      const NDArray& b = k.input(1);
      GRAFT_CHECK(a.shape() == b.shape(), "{}: both inputs must have the same shape (no broadcasting), got {} and {}",
                  what, shapeToString(a.shape()), shapeToString(b.shape()));
      GRAFT_CHECK(a.dtype() == b.dtype(), "{}: both inputs must have the same type, got {} and {}", what,
                  dtypeName(a.dtype()), dtypeName(b.dtype()));
      dispatch<Set>(a.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = ComputeType<T>;
        NDArray& y = k.allocOutputUninit(0, a.dtype(), a.shape());
        const T* ap = a.data<T>();
        const T* bp = b.data<T>();
        T* yp = y.data<T>();
        for (int64_t i = 0; i < a.numel(); ++i)
          yp[i] = static_cast<T>(ew::Formula<R>::template eval<ew::StdMath, C>(
              static_cast<C>(ap[i]), static_cast<C>(bp[i]), C(0), static_cast<C>(p.p0), static_cast<C>(p.p1)));
      });
    };
  };
}

// Registers the reference of row R when it is a unary op, or a two-operand op outside programs
// (the program rows of two operands broadcast: math.cpp registers those). Set: its element types.
template <ew::Op R, uint32_t Set>
void addRow(Registry& r) {
  constexpr const ew::Row& kRow = ew::row(R);
  constexpr bool kUnary = kRow.arity == 1, kBinary = kRow.arity == 2 && kRow.code < 0;
  if constexpr ((kUnary || kBinary) && kRow.type[0] != 0) {
    OpDef& d = r.add(kRow.type, kRow.domain);
    if constexpr (kUnary)
      d.setReference(unaryKernelWith<Set>([](CompileContext& c) {
        ew::Row::Params p = ew::params(kRow, c.node());
        return ew::Unary<R>{p.p0, p.p1};
      }));
    else
      d.setReference(sameShapeBinary<R, Set>());
    d.elementwise();
    if (kRow.inplace) d.inplace(0);
    // ONNX shape inference knows ai.onnx ops only.
    if (kRow.domain[0])
      d.setInfer([](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        // (A fuzzed ai.graphcore Gelu without inputs reached in.at(0): std::out_of_range.)
        constexpr int kArity = ew::row(R).arity;
        GRAFT_CHECK(static_cast<int>(in.size()) == kArity, "{}: takes {} input{}, got {}", n.describe(), kArity,
                    kArity == 1 ? "" : "s", in.size());
        return std::vector<ir::ValueType>{in[0]};
      });
  }
}

}  // namespace

GRAFT_REGISTER_OPS(elementwise_table) {
#define GRAFT_EW_X(Id, Type, Dom, Code, Ar, Pred, Zero, Ty, ...) addRow<ew::Op::Id, k##Ty>(r);
  GRAFT_EW_ALL(GRAFT_EW_X)
#undef GRAFT_EW_X
}

}  // namespace graft::ops
