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
// graph output, and every reader is a FusedConv whose bf16 primitive reads it as X or as Sum, or
// a Concat whose inputs all become bf16 and whose own output is read so (SqueezeNet's fire
// modules: two convolutions, a Concat, the next convolution). A Sum has Y's type (oneDNN's sum
// post-op adds into the destination), so a FusedConv with a Sum turns its output and its Sum to
// bf16 together or not at all. Everything else (pools, elementwise ops, depthwise convolutions,
// conversions, graph outputs) keeps float32.
#include <algorithm>
#include <map>
#include <set>

#include "backends/cpu/onednn_common.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/fuse_util.hpp"
#include "passes/pass.hpp"

namespace graft::backends::cpu::onednn {

namespace {

constexpr auto kFloat = static_cast<int64_t>(DataType::Float), kBf16 = static_cast<int64_t>(DataType::BFloat16);

bool isFusedConv(const ir::Node* n) { return passes::fuse::isGraftOp(n, "FusedConv"); }

bool isConcat(const ir::Node* n) { return n && n->domain().empty() && n->type() == "Concat"; }

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
    // Candidates: the outputs those convolutions can write, and the outputs of float Concats
    // (Concat moves bytes: any type). Then, until nothing changes, a candidate is dropped when a
    // reader would not take it as bf16 (a bf16 convolution's X or Sum, or a Concat whose output
    // stays a candidate), when it is a Concat's output and one of its inputs was dropped, or when
    // it is a Sum or a residual convolution's output whose partner was dropped.
    std::set<const ir::Tensor*> chosen;
    auto candidate = [&](const ir::Tensor* y) {
      return y && !y->isGraphOutput() && !y->uses().empty() && y->info().dataType() == DataType::Float;
    };
    for (const auto& [n, s] : convs)
      if (s.writes && candidate(n->output(0))) chosen.insert(n->output(0));
    for (const ir::Node* n : schedule)
      if (isConcat(n) && n->numOutputs() == 1 && candidate(n->output(0))) chosen.insert(n->output(0));
    auto takesBf16 = [&](const ir::Use& u) {
      if (u.implicit) return false;
      if (convs.count(u.node)) return u.index == 0 || u.index == 3;
      return isConcat(u.node) && chosen.count(u.node->output(0)) > 0;
    };
    for (bool changed = true; changed;) {
      changed = false;
      auto drop = [&](const ir::Tensor* t) { changed = chosen.erase(t) > 0 || changed; };
      for (const ir::Tensor* t : std::vector<const ir::Tensor*>(chosen.begin(), chosen.end())) {
        if (!std::all_of(t->uses().begin(), t->uses().end(), takesBf16)) drop(t);
        const ir::Node* p = t->producer();
        if (isConcat(p))
          for (const ir::Tensor* in : p->inputs())
            if (!chosen.count(in)) drop(t);
      }
      for (const auto& entry : convs) {
        const ir::Node* n = entry.first;
        if (n->hasInput(3) && chosen.count(n->input(3)) != chosen.count(n->output(0))) {
          drop(n->input(3));
          drop(n->output(0));
        }
      }
    }
    if (chosen.empty()) return false;
    for (ir::Node* n : schedule) {
      if (isFusedConv(n) && chosen.count(n->output(0))) n->attrs().set("y_dtype", kBf16);
      // The types follow, in schedule order (readers see their inputs' new types).
      if (isFusedConv(n) || isConcat(n)) ops::inferNode(*n, false);
    }
    return true;
  }
};

}  // namespace

GRAFT_REGISTER_PASS("cpu-bf16-activations", Bf16Activations);

}  // namespace graft::backends::cpu::onednn
