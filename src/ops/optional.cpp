// Optional values: Optional, OptionalHasElement, OptionalGetElement. At run time an optional that
// holds a tensor or a sequence is that value itself; an absent optional is Value::none().
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

KernelFn optionalKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  GRAFT_CHECK(n.hasInput(0) || n.attrs().has("type"),
              "{}: an Optional without input needs the 'type' attribute (the "
              "type of the element it would hold)",
              n.describe());
  return [](KernelContext& k) {
    const Value& v = k.inputValue(0);
    k.setOutputValue(0, v.empty() ? Value::none() : v);
  };
}

KernelFn optionalHasElementKernel(CompileContext&) {
  return [](KernelContext& k) {
    const Value& v = k.inputValue(0);
    k.setOutput(0, NDArray::scalar<bool>(DataType::Bool, !v.isNone() && !v.empty()));
  };
}

KernelFn optionalGetElementKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const Value& v = k.inputValue(0);
    GRAFT_CHECK(!v.isNone() && !v.empty(),
                "{}: the optional input is empty; check OptionalHasElement before getting its "
                "element",
                what);
    k.setOutputValue(0, v);
  };
}

}  // namespace

GRAFT_REGISTER_OPS(optional) {
  r.add("Optional").setReference(optionalKernel).viewOf(0);
  r.add("OptionalHasElement").setReference(optionalHasElementKernel).noGradient({0});
  r.add("OptionalGetElement").setReference(optionalGetElementKernel).viewOf(0);
}

}  // namespace graft::ops
