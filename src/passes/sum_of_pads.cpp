// sum-of-pads-to-concat (training pipelines, after autodiff): a Sum whose every input is a Pad
// with zeros (mode constant, value 0 or absent) that pads along one axis only, read by the Sum
// alone, where the padded inputs sit side by side and fill that axis exactly, becomes a Concat
// of the unpadded inputs in their order along the axis.
//
// That is the gradient of a tensor read by Slices that tile it, as exports reorder gates with
// (torch's LSTM and GRU: Concat(Slice(W, 0:H), Slice(W, 3H:4H), Slice(W, H:3H)) for each weight,
// every training step): each Slice's adjoint is its gradient padded to the whole tensor, and
// autodiff sums them. The sum writes every padded copy and reads them all back; the Concat moves
// each element once. Each element of the result is the one nonzero term of its sum, so the values
// are the same bit for bit.
#include <algorithm>
#include <optional>
#include <vector>

#include "ops/grad_util.hpp"
#include "ops/registry.hpp"
#include "passes/fuse_util.hpp"

namespace graft::passes {
namespace {

using fuse::isOnnx;

// A Pad that only adds zeros before and after one axis: the axis, and how many go before.
struct AxisPad {
  int64_t axis, before;
};

std::optional<AxisPad> zeroPadOnOneAxis(const ir::Node* p) {
  if (!isOnnx(p, "Pad") || p->attrString("mode", "constant") != "constant" || p->numInputs() < 2) return std::nullopt;
  if (p->numInputs() > 3 && p->input(3)) return std::nullopt;  // axes (opset 18): left alone
  if (p->numInputs() > 2 && p->input(2)) {
    const ir::Tensor* v = p->input(2);
    const NDArray* a = v->kind() == ir::TensorKind::Constant ? v->data() : nullptr;
    if (!a || a->numel() != 1 || a->dtype() != DataType::Float || a->data<float>()[0] != 0.0f) return std::nullopt;
  }
  const ir::Tensor* x = p->input(0);
  if (!x || !x->info().isStatic() || !p->output(0) || !p->output(0)->info().isStatic()) return std::nullopt;
  auto pads = ops::gradutil::constantInts(p->input(1));
  const auto r = static_cast<int64_t>(x->info().rank());
  if (!pads || static_cast<int64_t>(pads->size()) != 2 * r) return std::nullopt;
  std::optional<AxisPad> found;
  for (int64_t a = 0; a < r; ++a) {
    int64_t b = (*pads)[static_cast<size_t>(a)], e = (*pads)[static_cast<size_t>(r + a)];
    if (b < 0 || e < 0) return std::nullopt;
    if (b == 0 && e == 0) continue;
    if (found) return std::nullopt;
    found = AxisPad{a, b};
  }
  return found;
}

class SumOfPadsToConcat : public Pass {
 public:
  std::string_view name() const override { return "sum-of-pads-to-concat"; }
  bool run(ir::Graph& g, PassContext&) override {
    std::vector<ir::Node*> sums;
    for (ir::Node* n : g.nodes())
      if (isOnnx(n, "Sum") && n->numInputs() >= 2 && n->output(0)) sums.push_back(n);
    bool changed = false;
    for (ir::Node* s : sums) {
      struct Part {
        ir::Node* pad;
        int64_t begin;
      };
      std::vector<Part> parts;
      std::optional<int64_t> axis;
      bool ok = true;
      for (size_t i = 0; ok && i < s->numInputs(); ++i) {
        ir::Tensor* t = s->input(i);
        ir::Node* p = t ? t->producer() : nullptr;
        auto ap = p ? zeroPadOnOneAxis(p) : std::nullopt;
        ok = ap && fuse::soleConsumer(t) == s && !t->isGraphOutput() && (!axis || *axis == ap->axis) &&
             std::count(s->inputs().begin(), s->inputs().end(), t) == 1;
        if (!ok) break;
        axis = ap->axis;
        parts.push_back({p, ap->before});
      }
      if (!ok) continue;
      const ir::Tensor* y = s->output(0);
      if (!y->info().isStatic() || y->info().rank() != s->input(0)->info().rank()) continue;
      std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.begin < b.begin; });
      // The pieces fill the axis exactly, in order, and every padded input has the Sum's shape.
      const auto ax = static_cast<size_t>(*axis);
      int64_t at = 0;
      for (const Part& part : parts) {
        const ir::Tensor* x = part.pad->input(0);
        ok = ok && part.begin == at && part.pad->output(0)->info().shape() == y->info().shape() &&
             x->info().dataType() == y->info().dataType();
        at += x->info().shape()[ax];
      }
      if (!ok || at != y->info().shape()[ax]) continue;
      std::vector<ir::Tensor*> inputs;
      inputs.reserve(parts.size());
      for (const Part& part : parts) inputs.push_back(part.pad->input(0));
      ir::Tensor* out = s->output(0);
      ir::Attributes a;
      a.set("axis", *axis);
      ir::Node* c = fuse::replaceNodeInPlace(g, s, "Concat", "", inputs, {""}, a);
      g.setOutput(c, 0, out);
      std::vector<ir::Node*> pads;
      pads.reserve(parts.size());
      for (const Part& part : parts) pads.push_back(part.pad);
      fuse::removeNodes(g, pads);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

GRAFT_REGISTER_PASS("sum-of-pads-to-concat", SumOfPadsToConcat);

}  // namespace graft::passes
