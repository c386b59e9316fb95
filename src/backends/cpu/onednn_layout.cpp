// cpu-layout: keeps activations in one layout between the oneDNN ops, chosen once per graph
// (activationLayout(): channel-blocked nChw8c where oneDNN's AVX2 convolutions pick it, NHWC
// where its AVX-512 brgemm convolutions do; GRAFT_CPU_LAYOUT forces one), and converts only at
// the edges. A channels-last tensor is the blocked layout with block = its channel count.
//
// Walking the graph in schedule order, a Conv / FusedConv for which oneDNN has a fast
// implementation with its output in that layout becomes a FusedConv with y_block (and x_block
// when its input is in the layout already or oneDNN prefers it so). Ops that run as well on
// blocked data follow their input: pools, BatchNormalization and LRN become ai.graft::ChannelBlocked, elementwise ops
// run on the blocked arrays as they are (when the padding channels stay zero), Concat along channels concatenates
// blocks, Split along channels of a channels-last tensor splits its innermost axis (training graphs also: Expand of
// a global pool's gradient). Every blocked value gets a twin: the original tensor (same id) is then produced by
// ai.graft::FromBlocked from the blocked one, and plain consumers and graph outputs keep reading it; dce drops the
// conversions nobody reads. Plain values that a blocked op needs go through one ai.graft::ToBlocked each.
#include <map>
#include <set>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/onednn_conv.hpp"
#include "ops/elementwise_table.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/fuse_util.hpp"
#include "passes/pass.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft::backends::cpu::onednn {

// In onednn_conv.cpp: whether a plain Conv/FusedConv reads and writes `layout`; whether oneDNN
// has a fast implementation for a ChannelBlocked ConvGradInput / ConvGradWeight.
std::optional<std::pair<bool, bool>> convLayoutChoice(const ir::Node& n, int layout, bool xConverted);
bool convGradLayoutFast(const ir::Node& n);
// The channel block (16) of a Conv / FusedConv that runs on oneDNN's Winograd kernel, or 0.
int convWinogradBlock(const ir::Node& n);

namespace {

// Elementwise ops with f(0) = 0 (the elementwise table's Zero column; f(0, 0) = 0 for Add, Sub,
// Mul, Max, Min): they keep the padding channels zero. Clip does when its bounds bracket 0.
bool keepsZero(const ir::Node& n) {
  if (n.domain().empty() && n.type() == "Clip") {
    auto bound = [&](size_t i, float def) -> std::optional<float> {
      if (!n.hasInput(i)) return def;
      const ir::Tensor* t = n.input(i);
      if (t->kind() != ir::TensorKind::Constant || !t->data() || t->data()->numel() != 1 ||
          t->data()->dtype() != DataType::Float)
        return std::nullopt;
      return t->data()->data<float>()[0];
    };
    auto lo = bound(1, -1.f), hi = bound(2, 1.f);
    return lo && hi && *lo <= 0.f && *hi >= 0.f;
  }
  const ops::ew::Row* row = ops::ew::find(n.domain(), n.type());
  return row && row->zeroAtZero && !row->predicate && row->arity <= 2;
}

using passes::fuse::isGraftOp;
using passes::fuse::isOnnx;

// Whether Concat n joins float tensors of rank 3-5 along their channels (axis 1).
bool isChannelConcat(const ir::Node& n) {
  if (!n.output(0) || !isStaticFloat(n.output(0))) return false;
  const int64_t rank = n.output(0)->info().rank(), axis = n.attrInt("axis", 0);
  return rank >= 3 && rank <= 5 && (axis == 1 || axis == 1 - rank);
}

bool isStaticBool(const ir::Tensor* t) {
  return t && t->type().isTensor() && t->info().isStatic() && t->info().dataType() == DataType::Bool;
}

// An inference graph's layout: activationLayout(), except that where oneDNN's convolutions pick
// channel blocks (AVX2 hosts) a graph with a depthwise convolution goes channels last. There the
// row bands (two threads each running a band of rows, no OpenMP region to wake) and the convolution
// chains, both channels last only, beat oneDNN's 8-channel-block kernels on the many small
// convolutions of an inverted-residual network; where the convolutions are few and large (resnet18
// b1 18.4 -> 20.7 ms channels last) or squeezenet's (b8 31.7 -> 41 ms) the blocks win.
// Measured under GRAFT_CPU_ISA=avx2 (docs/cpu-backend.md, "Activation layouts", the layout).
int inferenceLayout(const ir::Graph& g) {
  const int layout = activationLayout();
  if (layout == 0 || layout == kChannelsLast || layoutForced()) return layout;
  for (const ir::Node* n : g.schedule()) {
    if (!isOnnx(n, "Conv") && !isGraftOp(n, "FusedConv")) continue;
    if (auto c = convConfig(*n); c && isDepthwise(*c)) return kChannelsLast;
  }
  return layout;
}

class CpuLayout : public passes::Pass {
 public:
  explicit CpuLayout(bool training = false, bool winograd = true) : training_(training), winograd_(winograd) {}
  std::string_view name() const override {
    return training_ ? "cpu-layout-training" : winograd_ ? "cpu-layout" : "cpu-layout-bf16";
  }
  bool run(ir::Graph& g, passes::PassContext& ctx) override {
    // Training graphs: channels last (trainingLayout(); no padding channels, so the backward
    // pass's comparisons and selections run on the arrays as they are).
    layout_ = training_ ? trainingLayout() : inferenceLayout(g);
    if (layout_ == 0) return false;
    g_ = &g;
    twin_.clear();
    alt_.clear();
    block16_.clear();
    changed_ = false;
    for (ir::Node* n : g.schedule()) {
      if (isOnnx(n, "Conv") || isGraftOp(n, "FusedConv"))
        convNode(n);
      else if (isOnnx(n, "MaxPool") || isOnnx(n, "AveragePool") || isOnnx(n, "GlobalAveragePool") ||
               isOnnx(n, "GlobalMaxPool") || isOnnx(n, "BatchNormalization") || isOnnx(n, "LRN"))
        wrapNode(n);
      else if (isOnnx(n, "Concat")) concatNode(n);
      else if (isOnnx(n, "Split"))
        splitNode(n);
      else if (training_ && isOnnx(n, "Expand"))
        expandNode(n);
      else if (training_ && (isGraftOp(n, "BatchNormalizationGrad") || isGraftOp(n, "MaxPoolGrad") ||
                             isGraftOp(n, "AveragePoolGrad")))
        gradNode(n);
      else if (training_ && (isGraftOp(n, "ConvGradInput") || isGraftOp(n, "ConvGradWeight")))
        convGradNode(n);
      else if (n->numOutputs() == 1) elementwiseNode(n);
    }
    return changed_;
  }

 private:
  static int64_t channelsOf(const ir::Tensor* t) { return t->info().shape()[1]; }
  // The channel block of plain tensor t's twin.
  int64_t blockOf(const ir::Tensor* t) const { return blockFor(layout_, channelsOf(t)); }

  // Whether plain tensor t has a twin in 16-channel blocks that are not the graph's layout (from a
  // Winograd convolution, or an op that followed one).
  bool inBlock16(ir::Tensor* t) const {
    auto it = twin_.find(t);
    return it != twin_.end() && block16_.count(it->second);
  }

  // Plain tensor t's twin in channel block b (b = its channel count: channels last): its twin when
  // that has the layout, else one conversion (ToBlocked of t without a twin, Reblock of the twin
  // otherwise), made once.
  ir::Tensor* blockedAs(ir::Tensor* t, int64_t b) {
    auto it = twin_.find(t);
    if (it == twin_.end()) {
      ir::Tensor* r = blocked(t, b);
      if (b == 16 && channelsOf(t) != 16) block16_.insert(r);
      return r;
    }
    const Shape want = blockedShape(t->info().shape(), b);
    bool want16 = b == 16 && channelsOf(t) != 16;
    if (it->second->info().shape() == want && (want16 == (block16_.count(it->second) > 0) || channelsOf(t) == 16))
      return it->second;
    auto key = std::make_pair(t, b);
    if (auto a = alt_.find(key); a != alt_.end()) return a->second;
    ir::Attributes a;
    a.set("channels", channelsOf(t));
    a.set("block", b);
    if (!g_->otherOpsets.count(ops::kGraftDomain)) g_->otherOpsets[ops::kGraftDomain] = 1;
    ir::Node* r = g_->addNode("Reblock", ops::kGraftDomain, {it->second}, {g_->uniqueId(t->id() + "_reblocked")}, a,
                              "reblock_" + t->id());
    ops::inferNode(*r, false);
    alt_[key] = r->output(0);
    if (want16) block16_.insert(r->output(0));
    changed_ = true;
    return r->output(0);
  }

  // The blocked twin of plain tensor t, converting when it has none yet (into block b; 0: the
  // graph's layout).
  ir::Tensor* blocked(ir::Tensor* t, int64_t b = 0) {
    auto it = twin_.find(t);
    if (it != twin_.end()) return it->second;
    ir::Attributes a;
    a.set("block", b ? b : blockOf(t));
    ir::Node* r = g_->addNode("ToBlocked", ops::kGraftDomain, {t}, {g_->uniqueId(t->id() + "_blocked")}, a,
                              "to_blocked_" + t->id());
    ops::inferNode(*r, false);
    twin_[t] = r->output(0);
    return r->output(0);
  }

  // Replaces `old` by `fresh`, whose output 0 is the blocked form of old's output 0 (in 16-channel
  // blocks apart from the graph's layout with b16): old's output is produced by a FromBlocked of
  // it from now on.
  void commit(ir::Node* old, ir::Node* fresh, bool b16 = false) {
    ir::Tensor* y = old->output(0);
    int64_t channels = channelsOf(y);
    std::vector<ir::Tensor*> rest;
    for (size_t i = 1; i < old->numOutputs(); ++i) rest.push_back(old->output(i));
    g_->removeNode(old);
    for (size_t i = 0; i < rest.size(); ++i)
      if (rest[i]) g_->setOutput(fresh, i + 1, rest[i]);
    ops::inferNode(*fresh, false);
    setTwin(y, fresh->output(0));
    if (b16 && channels != 16) block16_.insert(fresh->output(0));
    changed_ = true;
  }

  // Plain tensor y is produced from now on by a FromBlocked of `blocked`, its twin.
  void setTwin(ir::Tensor* y, ir::Tensor* blocked) {
    ir::Attributes a;
    a.set("channels", channelsOf(y));
    ir::Node* back = g_->addNode("FromBlocked", ops::kGraftDomain, {blocked}, {""}, a, "from_blocked_" + y->id());
    g_->setOutput(back, 0, y);
    twin_[y] = blocked;
  }

  ir::Node* addLike(ir::Node* old, const std::string& type, const std::string& domain, const std::vector<ir::Tensor*>& in,
                    ir::Attributes attrs) {
    if (!g_->otherOpsets.count(ops::kGraftDomain)) g_->otherOpsets[ops::kGraftDomain] = 1;
    std::vector<std::string> outs{g_->uniqueId(old->output(0)->id() + "_blocked")};
    for (size_t i = 1; i < old->numOutputs(); ++i) outs.push_back("");
    return g_->addNode(type, domain, in, outs, std::move(attrs), old->name());
  }

  // A convolution oneDNN runs on its Winograd kernel reads and writes 16-channel blocks
  // (convWinogradBlock) in any graph layout; one whose input comes in those blocks keeps them
  // where oneDNN has a fast implementation for them (so that what follows a Winograd convolution
  // stays in its layout instead of converting back), else the graph's layout.
  void convNode(ir::Node* n) {
    if (n->domain() == ops::kGraftDomain && (n->attrInt("x_block", 0) || n->attrInt("y_block", 0))) return;
    bool hasTwin = twin_.count(n->input(0)) > 0;
    int layout = layout_;
    bool winograd = false;
    std::optional<std::pair<bool, bool>> pref;
    if (winograd_ && !training_ && convWinogradBlock(*n) == 16) {
      layout = 16;
      winograd = true;
      pref = std::make_pair(true, true);
    } else if (inBlock16(n->input(0)) || (channelsOf(n->input(0)) == 16 && feedsBlock16Concat(n))) {
      pref = convLayoutChoice(*n, 16, true);
      if (pref && pref->first && pref->second)
        layout = 16;
      else
        pref.reset();
    }
    if (!pref) pref = convLayoutChoice(*n, layout_, hasTwin);
    if (!pref || !pref->second) return;
    std::vector<ir::Tensor*> in = n->inputs();
    int64_t xb = pref->first ? blockFor(layout, channelsOf(in[0])) : 0, yb = blockFor(layout, channelsOf(n->output(0)));
    if (pref->first) in[0] = blockedAs(in[0], xb);
    if (in.size() > 3 && in[3]) in[3] = blockedAs(in[3], yb);
    ir::Attributes a = n->attrs();
    a.set("x_block", xb);
    a.set("y_block", yb);
    if (winograd) a.set("winograd", int64_t{1});
    ir::Node* fresh = addLike(n, "FusedConv", ops::kGraftDomain, in, a);
    commit(n, fresh, layout == 16 && layout_ != 16);
  }

  // Whether conv n's output goes only to a Concat along channels that has another input in
  // 16-channel blocks (a Winograd convolution's, converted already or still to come) and whose
  // inputs (but the last) fill such blocks: writing those blocks too spares the Concat converting
  // this side, and what reads the Concat (squeezenet's fire modules) stays in them.
  bool feedsBlock16Concat(ir::Node* n) const {
    ir::Tensor* y = n->output(0);
    if (!winograd_ || training_ || !y || y->isGraphOutput() || y->uses().size() != 1) return false;
    ir::Node* c = y->uses()[0].node;
    if (!isOnnx(c, "Concat") || !isChannelConcat(*c)) return false;
    bool sibling16 = false;
    for (size_t i = 0; i < c->numInputs(); ++i) {
      ir::Tensor* s = c->input(i);
      if (!s || (i + 1 < c->numInputs() && channelsOf(s) % 16 != 0)) return false;
      if (s == y || channelsOf(s) == 16) continue;
      ir::Node* p = s->producer();
      sibling16 = sibling16 || inBlock16(s) ||
                  (p && (isOnnx(p, "Conv") || isGraftOp(p, "FusedConv")) && convWinogradBlock(*p) == 16);
    }
    return sibling16;
  }

  // Pools, BatchNormalization, LRN on an input that is blocked already.
  void wrapNode(ir::Node* n) {
    ir::Tensor* x = n->input(0);
    auto it = x ? twin_.find(x) : twin_.end();
    if (it == twin_.end() || !n->output(0) || !isStaticFloat(n->output(0))) return;
    // Training-mode BatchNormalization keeps its batch statistics (plain [C]) as outputs 1, 2.
    bool extraOutputs = training_ && isOnnx(n, "BatchNormalization") && n->attrInt("training_mode", 0) != 0;
    for (size_t i = 1; i < n->numOutputs(); ++i)
      if (n->output(i) && !extraOutputs) return;
    ir::Attributes a = n->attrs();
    a.set("op", n->type());
    bool b16 = block16_.count(it->second) > 0;
    a.set("block", b16 ? int64_t{16} : blockOf(x));
    a.set("channels", channelsOf(x));
    tryBlocked(n, a, {0}, true, false, b16);
  }

  // Elementwise ops whose tensor inputs all have blocked twins of one logical shape. In training
  // graphs (channels last) also: boolean results (the comparisons of activation gradients),
  // ZerosLike, scalar operands (broadcast as they are), and plain operands of the result's shape
  // converted once when another operand has a twin.
  void elementwiseNode(ir::Node* n) {
    const ops::OpDef* def = ops::Registry::instance().find(*n);
    bool zerosLike = training_ && isGraftOp(n, "ZerosLike");
    if (!def || !(def->traits.elementwise || zerosLike) || !n->output(0) || n->numInputs() == 0) return;
    if (!isStaticFloat(n->output(0)) && !(training_ && isStaticBool(n->output(0)))) return;
    const TensorInfo& yi = n->output(0)->info();
    if (yi.rank() < 3 || yi.rank() > 5) return;
    std::vector<ir::Tensor*> in = n->inputs();
    size_t tensors = 0;
    std::vector<size_t> convert, twinned;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i]) continue;
      // Clip's bounds: constant scalars stay as they are.
      if (isOnnx(n, "Clip") && i > 0) continue;
      if (training_ && in[i]->info().isStatic() && shapeNumel(in[i]->info().shape()) == 1) continue;
      auto it = twin_.find(in[i]);
      bool sameShape = in[i]->info().isStatic() && in[i]->info().shape() == yi.shape();
      if (it == twin_.end()) {
        if (!training_ || !sameShape) return;
        convert.push_back(i);
        continue;
      }
      if (!(training_ ? sameShape : in[i]->info() == yi)) return;
      in[i] = it->second;
      twinned.push_back(i);
      ++tensors;
    }
    if (tensors == 0) return;
    // One layout for all operands: the first twin's (16-channel blocks or the graph's).
    bool b16 = inBlock16(n->input(twinned[0]));
    int64_t block = b16 ? 16 : blockOf(n->output(0));
    if (channelsOf(n->output(0)) % block != 0 && !keepsZero(*n)) return;
    for (size_t i : twinned)
      if (inBlock16(n->input(i)) != b16) in[i] = blockedAs(n->input(i), b16 ? 16 : blockOf(n->input(i)));
    for (size_t i : convert) in[i] = blocked(in[i]);
    ir::Node* fresh = addLike(n, n->type(), n->domain(), in, n->attrs());
    commit(n, fresh, b16);
  }

  // BatchNormalizationGrad(dY, X, scale[, mean, var]) -> dX, dScale, dB with dY and X channels
  // last (dX too; dScale, dB plain), when either has a twin; MaxPoolGrad / AveragePoolGrad (dY,
  // X) -> dX likewise (dY then has the pooled shape).
  void gradNode(ir::Node* n) {
    bool pool = n->type() != "BatchNormalizationGrad";
    if (n->numInputs() < (pool ? 2u : 3u) || !n->input(0) || !n->input(1) || !n->output(0)) return;
    if (!twin_.count(n->input(0)) && !twin_.count(n->input(1))) return;
    ir::Tensor* x = n->input(1);
    if (!isStaticFloat(x) || !isStaticFloat(n->input(0)) || x->info().rank() < 3 || x->info().rank() > 5 ||
        (!pool && n->input(0)->info().shape() != x->info().shape()))
      return;
    int64_t C = channelsOf(x);
    ir::Attributes a = n->attrs();
    a.set("op", n->type());
    a.set("op_domain", std::string(ops::kGraftDomain));
    a.set("block", blockOf(x));
    a.set("channels", C);
    a.set("blocked_inputs", std::vector<int64_t>{0, 1});
    a.set("input_channels", std::vector<int64_t>{C, C});
    tryBlocked(n, a, {0, 1}, true);
  }

  // ConvGradInput(dY, W) -> dX (both channels last) and ConvGradWeight(X, dY) -> dW[, dB] (X,
  // dY channels last), where oneDNN has a fast implementation for those layouts.
  void convGradNode(ir::Node* n) {
    bool input = n->type() == "ConvGradInput";
    if (n->numInputs() != 2 || !n->input(0) || !n->input(1) || !n->output(0)) return;
    ir::Attributes a = n->attrs();
    a.set("op", n->type());
    a.set("op_domain", std::string(ops::kGraftDomain));
    std::vector<size_t> act = input ? std::vector<size_t>{0} : std::vector<size_t>{0, 1};
    bool any = false;
    for (size_t i : act) {
      if (!isStaticFloat(n->input(i)) || n->input(i)->info().rank() < 3 || n->input(i)->info().rank() > 5) return;
      any = any || twin_.count(n->input(i));
    }
    if (!any) return;
    std::vector<int64_t> idx, channels;
    for (size_t i : act) {
      idx.push_back(static_cast<int64_t>(i));
      channels.push_back(channelsOf(n->input(i)));
    }
    a.set("blocked_inputs", idx);
    a.set("input_channels", channels);
    if (input) {
      if (!isStaticFloat(n->output(0)) || n->output(0)->info().rank() < 3) return;
      a.set("block", blockOf(n->output(0)));
      a.set("channels", channelsOf(n->output(0)));
    } else {
      a.set("block", blockOf(n->input(0)));
      a.set("channels", channelsOf(n->input(0)));
      a.set("blocked_output", int64_t{0});
    }
    tryBlocked(n, a, act, input, /*needFast=*/true);
  }

  // Replaces n by ChannelBlocked(attrs) reading the twins of inputs `act` (converting those that
  // have none), when a kernel takes it (a fast oneDNN one with needFast); output 0 blocked when
  // blockedOut, else every output keeps its tensor. Nothing changes when no kernel takes it.
  void tryBlocked(ir::Node* n, const ir::Attributes& attrs, const std::vector<size_t>& act, bool blockedOut,
                  bool needFast = false, bool b16 = false) {
    std::vector<ir::Tensor*> in = n->inputs();
    std::vector<ir::Tensor*> converted;  // the plain inputs given a conversion here
    for (size_t i : act) {
      if (!twin_.count(in[i])) converted.push_back(in[i]);
      in[i] = blocked(in[i]);
    }
    auto accepted = [&](const ir::Node& f) {
      return CpuKernelRegistry::instance().find(f) && (!needFast || convGradLayoutFast(f));
    };
    if (!blockedOut) {
      // Every output keeps its tensor: move them over, and put the node back if no kernel takes it.
      if (!g_->otherOpsets.count(ops::kGraftDomain)) g_->otherOpsets[ops::kGraftDomain] = 1;
      std::string type = n->type(), domain = n->domain(), name = n->name();
      ir::Attributes oldAttrs = n->attrs();
      std::vector<ir::Tensor*> oldIn = n->inputs(), keep = n->outputs();
      ir::Node* fresh =
          g_->addNode("ChannelBlocked", ops::kGraftDomain, in, std::vector<std::string>(keep.size(), ""), attrs, name);
      g_->removeNode(n);
      for (size_t i = 0; i < keep.size(); ++i)
        if (keep[i]) g_->setOutput(fresh, i, keep[i]);
      if (accepted(*fresh)) {
        changed_ = true;
        return;
      }
      g_->removeNode(fresh);
      ir::Node* back = g_->addNode(type, domain, oldIn, std::vector<std::string>(keep.size(), ""), oldAttrs, name);
      for (size_t i = 0; i < keep.size(); ++i)
        if (keep[i]) g_->setOutput(back, i, keep[i]);
      for (ir::Tensor* t : converted) dropConversion(t);
      return;
    }
    ir::Node* fresh = addLike(n, "ChannelBlocked", ops::kGraftDomain, in, attrs);
    bool ok = true;
    try {
      ops::inferNode(*fresh, false);
    } catch (const Error&) {
      ok = false;
    }
    if (ok && !accepted(*fresh)) ok = false;
    if (!ok) {
      ir::Tensor* out = fresh->output(0);
      g_->removeNode(fresh);
      if (out) g_->removeTensor(out);
      for (ir::Tensor* t : converted) dropConversion(t);
      return;
    }
    commit(n, fresh, b16);
  }

  // Undoes blocked(plain) for a conversion nobody took.
  void dropConversion(ir::Tensor* plain) {
    ir::Tensor* t = twin_.at(plain);
    twin_.erase(plain);
    if (ir::Node* p = t->producer()) g_->removeNode(p);
    g_->removeTensor(t);
  }

  // Concat along channels of blocked inputs whose channel counts (but the last's) fill blocks:
  // along the block index; of channels-last inputs: along the innermost axis.
  void concatNode(ir::Node* n) {
    if (!isChannelConcat(*n)) return;
    int64_t rank = n->output(0)->info().rank();
    std::vector<ir::Tensor*> in = n->inputs();
    if (in.empty() || !in[0]) return;
    // One layout for all inputs: the first one's (16-channel blocks or the graph's).
    bool b16 = inBlock16(in[0]);
    int layout = b16 ? 16 : layout_;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i] || !twin_.count(in[i])) return;
      if (layout != kChannelsLast && i + 1 < in.size() && channelsOf(in[i]) % layout != 0) return;
    }
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = inBlock16(in[i]) == b16 ? twin_.at(in[i]) : blockedAs(in[i], blockFor(layout, channelsOf(in[i])));
    ir::Attributes a = n->attrs();
    a.set("axis", layout == kChannelsLast ? rank : int64_t{1});
    ir::Node* fresh = addLike(n, "Concat", "", in, a);
    commit(n, fresh, b16);
  }

  // Training graphs: Expand of a [N, C, 1, ..., 1] tensor over the spatial axes (the backward
  // pass of a global pool) straight into channels last, from X's twin or the same memory seen
  // as [N, 1, 1, ..., 1, C].
  void expandNode(ir::Node* n) {
    if (layout_ != kChannelsLast || n->numInputs() != 2 || !n->input(0) || !n->output(0)) return;
    ir::Tensor* x = n->input(0);
    ir::Tensor* y = n->output(0);
    if (!isStaticFloat(x) || !isStaticFloat(y) || n->input(1)->kind() != ir::TensorKind::Constant) return;
    const Shape& xs = x->info().shape();
    const Shape& ys = y->info().shape();
    if (ys.size() < 3 || ys.size() > 5 || xs.size() != ys.size() || xs[0] != ys[0] || xs[1] != ys[1]) return;
    for (size_t i = 2; i < xs.size(); ++i)
      if (xs[i] != 1) return;
    auto shapeConstant = [&](const Shape& s, const std::string& base) {
      NDArray v(DataType::Int64, Shape{static_cast<int64_t>(s.size())});
      std::copy(s.begin(), s.end(), v.data<int64_t>());
      return g_->addInitializer(g_->uniqueId(base), std::move(v), ir::TensorKind::Constant);
    };
    int64_t C = ys[1];
    ir::Tensor* source = nullptr;  // X as [N, 1, 1, ..., 1, C]: its twin, or X reshaped
    if (auto it = twin_.find(x); it != twin_.end() && !inBlock16(x)) {
      source = it->second;
    } else {
      Shape flat = blockedShape(xs, static_cast<int>(C));
      ir::Node* r = g_->addNode("Reshape", "", {x, shapeConstant(flat, x->id() + "_channels_last_shape")},
                                {g_->uniqueId(x->id() + "_channels_last")}, {}, "reshape_" + x->id());
      ops::inferNode(*r, false);
      source = r->output(0);
    }
    ir::Node* fresh = addLike(n, "Expand", "",
                              {source, shapeConstant(blockedShape(ys, static_cast<int>(C)), y->id() + "_shape")}, {});
    commit(n, fresh);
  }

  // Split along channels of a channels-last input (the backward pass of Concat): along the
  // innermost axis, every output a channels-last twin (split sizes unchanged).
  void splitNode(ir::Node* n) {
    if (layout_ != kChannelsLast || n->numInputs() == 0 || !n->input(0) || n->numOutputs() == 0) return;
    ir::Tensor* x = n->input(0);
    auto it = twin_.find(x);
    if (it == twin_.end() || inBlock16(x) || !isStaticFloat(x)) return;
    int64_t rank = x->info().rank();
    int64_t axis = n->attrInt("axis", 0);
    if (rank < 3 || rank > 5 || (axis != 1 && axis != 1 - rank)) return;
    std::vector<ir::Tensor*> ys = n->outputs();
    for (ir::Tensor* y : ys)
      if (!y || !isStaticFloat(y)) return;
    std::vector<ir::Tensor*> in = n->inputs();
    in[0] = it->second;
    ir::Attributes a = n->attrs();
    a.set("axis", rank);
    std::vector<std::string> outs;
    outs.reserve(ys.size());
    for (ir::Tensor* y : ys) outs.push_back(g_->uniqueId(y->id() + "_blocked"));
    std::string name = n->name();
    g_->removeNode(n);
    ir::Node* fresh = g_->addNode("Split", "", in, outs, a, name);
    ops::inferNode(*fresh, false);
    for (size_t i = 0; i < ys.size(); ++i) setTwin(ys[i], fresh->output(i));
    changed_ = true;
  }

  bool training_ = false;
  bool winograd_ = true;  // Winograd convolutions and what follows them in 16-channel blocks
  int layout_ = 0;
  ir::Graph* g_ = nullptr;
  std::map<ir::Tensor*, ir::Tensor*> twin_;
  std::map<std::pair<ir::Tensor*, int64_t>, ir::Tensor*> alt_;  // further twins (Reblock), by block
  std::set<ir::Tensor*> block16_;  // twins in 16-channel blocks apart from the graph's layout
  bool changed_ = false;
};

// ToBlocked / FromBlocked / Reblock of float activations as oneDNN reorders: the source's and
// the destination's layouts (block 0: plain) of the plain shape.
struct ReorderGeometry {
  Shape plain;
  int from = 0, to = 0;
};

std::optional<ReorderGeometry> reorderGeometry(const ir::Node& n) {
  if (n.numInputs() != 1 || n.numOutputs() != 1 || !isStaticFloat(n.input(0)) || !isStaticFloat(n.output(0)))
    return std::nullopt;
  const Shape& in = n.input(0)->info().shape();
  const Shape& out = n.output(0)->info().shape();
  ReorderGeometry r;
  if (n.type() == "ToBlocked") {
    r.plain = in;
    r.to = out.empty() ? 0 : static_cast<int>(out.back());
  } else {
    r.plain = out;
    r.from = in.empty() ? 0 : static_cast<int>(in.back());
    if (n.type() == "Reblock") {
      if (in.size() < 4) return std::nullopt;
      r.plain = unblockedShape(in, n.attrInt("channels", 0));
      r.to = out.empty() ? 0 : static_cast<int>(out.back());
    }
  }
  const Shape& p = r.plain;
  if (p.size() < 3 || p.size() > 5) return std::nullopt;
  for (int b : {r.from, r.to})
    if (b && b != 8 && b != 16 && b != p[1]) return std::nullopt;
  auto physical = [&](int b) { return b ? blockedShape(p, b) : p; };
  if (physical(r.from) != in || physical(r.to) != out) return std::nullopt;
  return r;
}

bool supportsReorder(const ir::Node& n) { return reorderGeometry(n).has_value(); }

ops::KernelFn makeReorder(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto geo = reorderGeometry(n);
  if (!geo) return decline();
  Shape plain = geo->plain;
  auto desc = [&](int b) { return b ? layoutDesc(plain, b) : plainDesc(plain); };
  memory::desc src = desc(geo->from), dst = desc(geo->to);
  Shape yShape = n.output(0)->info().shape();
  int threads = ctx.pool().numThreads();
  setThreads(threads);
  dnnl::reorder prim;
  try {
    dnnl::reorder::primitive_desc pd(engine(), src, engine(), dst);
    noteImplementation(pd.impl_info_str());
    prim = dnnl::reorder(pd);
  } catch (const dnnl::error&) {
    return decline();
  }
  return [=](ops::KernelContext& k) {
    setThreads(threads);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, yShape);
    execute(prim, {{DNNL_ARG_FROM, wrap(src, k.input(0))}, {DNNL_ARG_TO, wrap(dst, y)}});
  };
}

}  // namespace

GRAFT_REGISTER_PASS("cpu-layout", CpuLayout);

// bf16 inference graphs: as cpu-layout, without Winograd convolutions (float32 only; the bf16
// backend's convolutions run bf16 brgemm kernels in the graph's layout).
class CpuLayoutBf16 : public CpuLayout {
 public:
  CpuLayoutBf16() : CpuLayout(false, false) {}
};
GRAFT_REGISTER_PASS("cpu-layout-bf16", CpuLayoutBf16);

// Training graphs: the forward convolutions, BatchNormalization (training mode), activations and
// residual Adds as above, and the backward pass's BatchNormalizationGrad, ConvGradInput,
// ConvGradWeight and elementwise ops, channels last (hosts whose layout is NHWC).
class CpuLayoutTraining : public CpuLayout {
 public:
  CpuLayoutTraining() : CpuLayout(true) {}
};
GRAFT_REGISTER_PASS("cpu-layout-training", CpuLayoutTraining);

}  // namespace graft::backends::cpu::onednn

GRAFT_REGISTER_CPU_KERNELS(onednn_reorder) {
  using namespace graft::backends::cpu::onednn;
  r.add({graft::ops::kGraftDomain, "ToBlocked", "onednn_reorder", supportsReorder, makeReorder});
  r.add({graft::ops::kGraftDomain, "FromBlocked", "onednn_reorder", supportsReorder, makeReorder});
  r.add({graft::ops::kGraftDomain, "Reblock", "onednn_reorder", supportsReorder, makeReorder});
}
