// cpu-bf16-activations (the inference pipeline of a bf16 cpu backend, SessionOptions.enableBf16):
// activations that pass from one bf16 convolution to the next are held in bf16. A bf16 primitive
// reads its source as bf16 anyway, so a float32 activation between two of them costs a
// conversion at every convolution (resnet50 b8: 56 per step, 12 ms of a 90 ms step) and twice
// the bytes; the producer now writes bf16 itself and the consumer reads it as it is. The values
// a convolution reads are the same (the float32 result rounded to nearest even), except where
// an activation is also a residual Sum: the sum then adds the rounded value.
//
// A FusedConv's output (channel-blocked, after cpu-layout) becomes BFLOAT16 (y_dtype) when
// oneDNN runs the producer as a bf16 primitive that can write it (convBf16Support), it is no
// graph output, and every reader is a FusedConv whose bf16 primitive reads it as X or as Sum. A
// Sum has Y's type (oneDNN's sum post-op adds into the destination), so a FusedConv with a Sum
// turns its output and its Sum to bf16 together or not at all. Everything else (pools,
// elementwise ops, depthwise convolutions, conversions, graph outputs) keeps float32.
#include <algorithm>
#include <map>
#include <set>

#include "backends/cpu/onednn_common.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"

namespace graft::backends::cpu::onednn {

namespace {

constexpr auto kFloat = static_cast<int64_t>(DataType::Float), kBf16 = static_cast<int64_t>(DataType::BFloat16);

bool isFusedConv(const ir::Node* n) { return n && n->domain() == ops::kGraftDomain && n->type() == "FusedConv"; }

class Bf16Activations : public passes::Pass {
 public:
  std::string_view name() const override { return "cpu-bf16-activations"; }
  bool run(ir::Graph& g, passes::PassContext&) override {
    std::vector<ir::Node*> schedule = g.schedule();
    std::map<const ir::Node*, Bf16ConvSupport> convs;  // the FusedConvs that run bf16
    for (ir::Node* n : schedule) {
      if (!isFusedConv(n) || n->attrInt("y_dtype", kFloat) != kFloat) continue;
      Bf16ConvSupport s = convBf16Support(*n);
      if (s.reads) convs[n] = s;
    }
    auto reads = [&](const ir::Use& u) { return !u.implicit && convs.count(u.node) && (u.index == 0 || u.index == 3); };
    // Candidates: outputs those convolutions can write that only those convolutions read.
    std::set<const ir::Tensor*> chosen;
    for (const auto& [n, s] : convs) {
      const ir::Tensor* y = n->output(0);
      if (!s.writes || !y || y->isGraphOutput() || y->uses().empty()) continue;
      if (std::all_of(y->uses().begin(), y->uses().end(), reads)) chosen.insert(y);
    }
    // A Sum and its convolution's output: both or neither.
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& entry : convs) {
        const ir::Node* n = entry.first;
        if (!n->hasInput(3)) continue;
        const ir::Tensor* s = n->input(3);
        const ir::Tensor* y = n->output(0);
        if (chosen.count(s) != chosen.count(y)) {
          chosen.erase(s);
          chosen.erase(y);
          changed = true;
        }
      }
    }
    if (chosen.empty()) return false;
    for (ir::Node* n : schedule) {
      if (isFusedConv(n) && chosen.count(n->output(0))) n->attrs().set("y_dtype", kBf16);
      // The types follow, in schedule order (readers see their inputs' new types).
      if (isFusedConv(n)) ops::inferNode(*n, false);
    }
    return true;
  }
};

}  // namespace

GRAFT_REGISTER_PASS("cpu-bf16-activations", Bf16Activations);

}  // namespace graft::backends::cpu::onednn
