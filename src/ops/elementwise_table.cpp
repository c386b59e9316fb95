// The reference kernels of the unary rows of the elementwise table (ops/elementwise_table.hpp):
// each row's formula over the compute type, its parameters read from the node's attributes.
// Gradients live with their families (activation.cpp, math.cpp).
#include "ops/elementwise_table.hpp"

#include "ops/elementwise.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

// Registers the reference of row R when it is a unary op (Set: its element types).
template <ew::Op R, uint32_t Set>
void addUnary(Registry& r) {
  constexpr const ew::Row& row = ew::row(R);
  if constexpr (row.arity == 1 && row.type[0] != 0) {
    OpDef& d = r.add(row.type, row.domain)
                   .setReference(unaryKernelWith<Set>([](CompileContext& c) {
                     ew::Row::Params p = ew::params(row, c.node());
                     return ew::Unary<R>{p.p0, p.p1};
                   }))
                   .elementwise();
    if (row.inplace) d.inplace(0);
    // ONNX shape inference knows ai.onnx ops only.
    if (row.domain[0])
      d.setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{in.at(0)};
      });
  }
}

}  // namespace

GRAFT_REGISTER_OPS(elementwise_table) {
#define GRAFT_EW_X(Id, Type, Dom, Code, Ar, Pred, Zero, Ty, ...) addUnary<ew::Op::Id, k##Ty>(r);
  GRAFT_EW_ALL(GRAFT_EW_X)
#undef GRAFT_EW_X
}

}  // namespace graft::ops
