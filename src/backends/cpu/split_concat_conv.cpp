// split-concat-conv (inference): a Conv that alone reads a Concat along channels is split into one
// Conv per Concat input, each on its slice of the weights' input channels, summed:
//
//   Conv(Concat(A, B, axis 1), W, b)  ->  Add(Conv(B, W[:, Ca:]), Conv(A, W[:, :Ca], b))
//
// (a convolution is linear in its input channels, so any kernel, stride, padding and dilation
// splits; one group only). fuse-conv then folds each Add into the next Conv as its residual sum
// (oneDNN's sum post-op, or graft's kernels' `accumulate`), and the activation after the last Add
// into the last Conv. The Concat's output is never written: the Concat read its inputs and wrote
// them again (C channels in, C out) only for the Conv to read them a third time, where the split
// writes and reads back only the partial sums (M channels each, at the Conv's output size). The
// pass splits where that is less: M x (output pixels) x (inputs - 1) < C x (input pixels).
// squeezenet1_1's fire modules: expand1x1 and expand3x3 concatenated, read by the next squeeze
// convolution (128-512 channels in, 16-64 out). First, a MaxPool or AveragePool that alone reads
// such a Concat moves above it (sinkPools), so that the Conv after the pool splits too.
//
// Concats with an input from a convolution on oneDNN's Winograd kernel (AVX-512 hosts) are left
// as they are: cpu-layout holds such a Concat and what reads it in 16-channel blocks (its
// Winograd islands, feedsBlock16Concat), and without the Concat squeezenet1_1 b8 went channels
// last around its Winograd convolutions with 13 Reblocks a step (5.6% of the step).
#include "ops/infer.hpp"
#include "passes/fuse_util.hpp"

namespace graft::backends::cpu::onednn {
// In onednn_conv.cpp: the channel block (16) of a Conv that runs on oneDNN's Winograd kernel, or 0.
int convWinogradBlock(const ir::Node& n);
}  // namespace graft::backends::cpu::onednn

namespace graft::passes {
namespace {

using fuse::isOnnx;

// Whether some input of Concat `cat` comes from a convolution on oneDNN's Winograd kernel, directly
// or through its activation (a node of one input: fuse-conv has not run yet).
bool readsWinograd(const ir::Node& cat) {
  for (size_t i = 0; i < cat.numInputs(); ++i) {
    const ir::Node* p = cat.input(i) ? cat.input(i)->producer() : nullptr;
    if (p && !isOnnx(p, "Conv") && p->numInputs() == 1 && p->input(0)) p = p->input(0)->producer();
    if (isOnnx(p, "Conv") && backends::cpu::onednn::convWinogradBlock(*p) != 0) return true;
  }
  return false;
}

// The Concat that produces t when `reader` alone reads it and both rewrites may take it: along
// channels (axis 1), two inputs or more, every tensor float with a static shape of t's rank, no
// input from a Winograd convolution; nullptr otherwise.
ir::Node* channelConcat(const ir::Tensor* t, const ir::Node* reader) {
  ir::Node* cat = t ? t->producer() : nullptr;
  if (!isOnnx(cat, "Concat") || cat->numInputs() < 2 || fuse::soleConsumer(t) != reader) return nullptr;
  if (!fuse::isFloat(t) || !t->info().isStatic()) return nullptr;
  const int64_t rank = static_cast<int64_t>(t->info().shape().size());
  int64_t axis = cat->attrInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis != 1) return nullptr;
  for (size_t i = 0; i < cat->numInputs(); ++i) {
    const ir::Tensor* in = cat->input(i);
    if (!fuse::isFloat(in) || !in->info().isStatic() || static_cast<int64_t>(in->info().shape().size()) != rank)
      return nullptr;
  }
  return readsWinograd(*cat) ? nullptr : cat;
}

// The Concat's inputs when `conv` may be split over them; empty otherwise.
std::vector<ir::Tensor*> splittableInputs(const ir::Node& conv, const PassContext& ctx) {
  if (!isOnnx(&conv, "Conv") || conv.numOutputs() != 1 || conv.attrInt("group", 1) != 1) return {};
  if (!fuse::isFloat(conv.output(0)) || !conv.output(0)->info().isStatic()) return {};
  const ir::Node* cat = channelConcat(conv.input(0), &conv);
  if (!cat) return {};
  const Shape& x = conv.input(0)->info().shape();
  if (x.size() < 3) return {};
  const ir::Tensor* w = conv.input(1);
  if (!fuse::isConstant(w, ctx) || !fuse::isFloat(w) || w->data()->rank() != static_cast<int64_t>(x.size()) ||
      w->data()->dim(1) != x[1])
    return {};
  std::vector<ir::Tensor*> parts(cat->inputs().begin(), cat->inputs().end());
  // Worth it: the partial sums' extra traffic below the Concat's.
  const Shape& y = conv.output(0)->info().shape();
  const int64_t inPixels = shapeNumel(x) / x[1], outPixels = shapeNumel(y) / y[1];
  if (y[1] * outPixels * static_cast<int64_t>(parts.size() - 1) >= x[1] * inPixels) return {};
  return parts;
}

// W[:, c0:c1] of a float [M, C, k...] weight.
NDArray inputChannels(const NDArray& w, int64_t c0, int64_t c1) {
  Shape s = w.shape();
  const int64_t M = s[0], C = s[1], per = w.numel() / (M * C);
  s[1] = c1 - c0;
  NDArray out(DataType::Float, s);
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  for (int64_t m = 0; m < M; ++m)
    std::copy(src + (m * C + c0) * per, src + (m * C + c1) * per, dst + m * (c1 - c0) * per);
  return out;
}

// MaxPool / AveragePool (one output) that alone reads a Concat along channels of 4-D float
// tensors becomes one pool per Concat input, concatenated after: pooling works channel by channel,
// so the Concat moves the pooled (smaller) tensors, and a Conv reading the pool can then be split
// over them (squeezenet1_1's fire modules 4 and 7, each followed by a MaxPool).
bool sinkPools(ir::Graph& g, const PassContext& ctx) {
  bool changed = false;
  std::vector<ir::Node*> pools;
  for (ir::Node* n : g.schedule())
    if ((isOnnx(n, "MaxPool") || isOnnx(n, "AveragePool")) && n->numOutputs() == 1) pools.push_back(n);
  for (ir::Node* pool : pools) {
    ir::Node* cat = channelConcat(pool->input(0), pool);
    if (!cat || pool->input(0)->info().shape().size() != 4) continue;
    if (!fuse::isFloat(pool->output(0)) || !pool->output(0)->info().isStatic()) continue;
    std::vector<ir::Tensor*> parts(cat->inputs().begin(), cat->inputs().end());
    const ir::Attributes poolAttrs = pool->attrs(), catAttrs = cat->attrs();
    const std::string type = pool->type(), name = pool->name(), catName = cat->name();
    ir::Tensor* y = pool->output(0);
    ir::Tensor* catOut = pool->input(0);
    g.removeNode(pool);
    g.removeNode(cat);
    g.removeTensor(catOut);
    std::vector<ir::Tensor*> pooled;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string tag = "_part" + std::to_string(i);
      ir::Node* p = g.addNode(type, "", {parts[i]}, {g.uniqueId(y->id() + tag)}, poolAttrs, name + tag);
      ops::inferNode(*p, ctx.weightsAreConstant);
      pooled.push_back(p->output(0));
    }
    ir::Node* c = g.addNode("Concat", "", pooled, {""}, catAttrs, catName);
    g.setOutput(c, 0, y);
    ops::inferNode(*c, ctx.weightsAreConstant);
    changed = true;
  }
  return changed;
}

class SplitConcatConv : public Pass {
 public:
  std::string_view name() const override { return "split-concat-conv"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    bool changed = sinkPools(g, ctx);
    std::vector<ir::Node*> convs;
    for (ir::Node* n : g.schedule())
      if (isOnnx(n, "Conv")) convs.push_back(n);
    for (ir::Node* conv : convs) {
      std::vector<ir::Tensor*> parts = splittableInputs(*conv, ctx);
      if (parts.empty()) continue;
      ir::Node* cat = conv->input(0)->producer();
      const NDArray& w = *conv->input(1)->data();
      ir::Tensor* bias = conv->hasInput(2) ? conv->input(2) : nullptr;
      ir::Tensor* y = conv->output(0);
      ir::Tensor* catOut = conv->input(0);
      const ir::Attributes attrs = conv->attrs();
      const std::string name = conv->name();
      g.removeNode(conv);
      g.removeNode(cat);
      g.removeTensor(catOut);
      ir::Tensor* sum = nullptr;
      int64_t c0 = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        const int64_t c1 = c0 + parts[i]->info().shape()[1];
        ir::Tensor* wi = g.addInitializer(g.uniqueId(name + "_w" + std::to_string(i)), inputChannels(w, c0, c1),
                                          ir::TensorKind::Constant);
        c0 = c1;
        std::vector<ir::Tensor*> ins{parts[i], wi};
        if (i == 0 && bias) ins.push_back(bias);
        const bool last = i + 1 == parts.size();
        const std::string tag = "_part" + std::to_string(i);
        ir::Node* part = g.addNode("Conv", "", ins, {last && !sum ? "" : g.uniqueId(y->id() + tag)}, attrs, name + tag);
        if (last && !sum) g.setOutput(part, 0, y);
        ops::inferNode(*part, ctx.weightsAreConstant);
        if (!sum) {
          sum = part->output(0);
          continue;
        }
        const std::string sumTag = "_sum" + std::to_string(i);
        ir::Node* add =
            g.addNode("Add", "", {part->output(0), sum}, {last ? "" : g.uniqueId(y->id() + sumTag)}, {}, name + sumTag);
        if (last) g.setOutput(add, 0, y);
        ops::inferNode(*add, ctx.weightsAreConstant);
        sum = add->output(0);
      }
      changed = true;
    }
    return changed;
  }
};

}  // namespace

GRAFT_REGISTER_PASS("split-concat-conv", SplitConcatConv);

}  // namespace graft::passes
