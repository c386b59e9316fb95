// infer-shapes: exact output types for every node, in schedule order. Standard ops use ONNX's
// inference functions; graft's own ops their registered InferFn (see ops/infer.hpp).
#include "ops/infer.hpp"
#include "passes/pass.hpp"

namespace graft::passes {
namespace {

class InferShapes : public Pass {
 public:
  std::string_view name() const override { return "infer-shapes"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    bool changed = false;
    for (ir::Node* n : g.schedule()) changed |= ops::inferNode(*n, ctx.weightsAreConstant);
    return changed;
  }
};

GRAFT_REGISTER_PASS("infer-shapes", InferShapes);

}  // namespace
}  // namespace graft::passes
