// graft's fused ops (domain ai.graft), made by the fusion and layout passes of the cpu pipeline.
// Each is defined as a composition of standard ops (ops/composite.hpp), which gives its type
// inference and its reference kernel; backends run them with fast kernels where they have one.
//
//   FusedConv(X, W, B?, Sum?)      Y = act(Conv(X, W, B) + Sum); Conv's attributes, plus the
//                                  activation attributes below and x_block / y_block: X (and
//                                  Y, Sum) channel-blocked with that block when non-zero.
//                                  X and Sum may be BFLOAT16, and y_dtype (FLOAT, default, or
//                                  BFLOAT16) is Y's type: computed in float32, then rounded
//                                  (the bf16 activations of enableBf16 sessions).
//                                  winograd = 1: a hint to the cpu device (its Winograd
//                                  kernel; the result is the same up to rounding).
//   FusedConvChain(X, Sum?, W0, B0, W1, B1, ...)
//                                  FusedConv "stages" times in a row: stage i reads the previous
//                                  stage's Y (X for stage 0), W<i> and B<i>, with the FusedConv
//                                  attributes prefixed "s<i>_" (s0_strides, s1_activation, ...);
//                                  the last stage adds Sum (ops/conv_chain.hpp). Made by the cpu
//                                  device's cpu-conv-chains pass, whose kernel runs the stages
//                                  tile by tile of rows so that the intermediates stay in cache.
//   FusedMatMul(A, B, Bias?)       Y = act(MatMul(A', B') + Bias)' where A' = Transpose(A, perm_a),
//                                  B' = Transpose(B, perm_b) and the result is transposed
//                                  with perm_y, each when that attribute is present (folded
//                                  Transposes: oneDNN reads and writes them strided)
//   FusedGemm(A, B, C?)            Y = act(Gemm(A, B, C)); Gemm's attributes
//   ChannelBlocked(X, ...)         the op named by "op" (ai.onnx, or "op_domain" ai.graft;
//                                  with the node's other attributes) on channel-blocked X and
//                                  Y: X, Y are [N, ceil(C/block), spatial..., block];
//                                  "channels" is C. "blocked_inputs" (default [0]) lists the
//                                  inputs in a blocked layout, "input_channels" their C (default
//                                  "channels"); "blocked_output" 0 leaves Y plain. Outputs
//                                  after the first are plain.
//   ToBlocked(X)                   [N, C, spatial...] -> [N, ceil(C/block), spatial..., block],
//                                  channels beyond C zero
//   FromBlocked(X)                 the inverse; "channels" is C
//   Reblock(X)                     [N, ceil(C/b), spatial..., b] -> [N, ceil(C/block),
//                                  spatial..., block]: FromBlocked then ToBlocked in one
//                                  ("channels" C, "block"); channels beyond C zero
//
// Activations: "activation" (an op type; "" for none), "activation_domain" ("", ai.graphcore
// or ai.graft), "activation_alpha" and "activation_beta": Clip's min and max, or an activation of
// the elementwise table with a oneDNN post-op (elementwise_table.hpp) and its parameters P0, P1.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "ops/composite.hpp"
#include "ops/conv_chain.hpp"
#include "ops/cost.hpp"
#include "ops/elementwise_table.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::ops {
namespace {

// ---- ToBlocked / FromBlocked --------------------------------------------------------------

int64_t attrPositive(const ir::Node& n, const char* name) {
  int64_t v = n.attrInt(name);
  GRAFT_CHECK(v > 0 && v <= (int64_t{1} << 20), "{}: {} must be in [1, 2^20], got {}", n.describe(), name, v);
  return v;
}

Shape toBlockedShape(const std::string& what, const Shape& s, int64_t block) {
  GRAFT_CHECK(s.size() >= 3, "{}: input must be [N, C, spatial...] (rank >= 3), got {}", what, shapeToString(s));
  Shape p = s;
  p[1] = (s[1] + block - 1) / block;
  p.push_back(block);
  return p;
}

Shape fromBlockedShape(const std::string& what, const Shape& p, int64_t channels) {
  GRAFT_CHECK(p.size() >= 4, "{}: input must be [N, C/block, spatial..., block] (rank >= 4), got {}", what,
              shapeToString(p));
  int64_t block = p.back();
  GRAFT_CHECK(block > 0 && (channels + block - 1) / block == p[1], "{}: {} channels do not fill {} blocks of {}", what,
              channels, p[1], block);
  Shape s(p.begin(), p.end() - 1);
  s[1] = channels;
  return s;
}

// Copies between [N, C, S] and [N, Cb, S, b] element by element (any element size).
void reblock(const NDArray& src, NDArray& dst, int64_t N, int64_t C, int64_t S, int64_t b, bool toBlocked) {
  size_t es = dtypeSize(src.dtype());
  int64_t cb = (C + b - 1) / b;
  const char* sp = static_cast<const char*>(src.rawData());
  char* dp = static_cast<char*>(dst.rawData());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        int64_t plain = (n * C + c) * S + s, blocked = ((n * cb + c / b) * S + s) * b + c % b;
        if (toBlocked) std::memcpy(dp + blocked * es, sp + plain * es, es);
        else std::memcpy(dp + plain * es, sp + blocked * es, es);
      }
}

std::vector<ir::ValueType> inferToBlocked(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                          const std::vector<const NDArray*>&) {
  ir::ValueType t = in.at(0);
  if (t.info.isStatic()) t.info = TensorInfo(t.info.dataType(), toBlockedShape(n.describe(), t.info.shape(), attrPositive(n, "block")));
  else t.info = TensorInfo::unranked(t.info.dataType());
  return {t};
}

std::vector<ir::ValueType> inferFromBlocked(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                            const std::vector<const NDArray*>&) {
  ir::ValueType t = in.at(0);
  if (t.info.isStatic())
    t.info = TensorInfo(t.info.dataType(), fromBlockedShape(n.describe(), t.info.shape(), attrPositive(n, "channels")));
  else t.info = TensorInfo::unranked(t.info.dataType());
  return {t};
}

std::vector<ir::ValueType> inferReblock(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                        const std::vector<const NDArray*>&) {
  ir::ValueType t = in.at(0);
  if (t.info.isStatic()) {
    Shape plain = fromBlockedShape(n.describe(), t.info.shape(), attrPositive(n, "channels"));
    t.info = TensorInfo(t.info.dataType(), toBlockedShape(n.describe(), plain, attrPositive(n, "block")));
  } else {
    t.info = TensorInfo::unranked(t.info.dataType());
  }
  return {t};
}

KernelFn toBlockedKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  int64_t block = attrPositive(n, "block");
  return [block, what = n.describe()](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() != DataType::String, "{}: string tensors cannot be blocked", what);
    Shape p = toBlockedShape(what, x.shape(), block);
    NDArray& y = k.allocOutput(0, x.dtype(), p);  // zero-filled: the padding channels stay 0
    reblock(x, y, x.dim(0), x.dim(1), x.numel() / std::max<int64_t>(1, x.dim(0) * x.dim(1)), block, true);
  };
}

KernelFn fromBlockedKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  int64_t channels = attrPositive(n, "channels");
  return [channels, what = n.describe()](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() != DataType::String, "{}: string tensors cannot be blocked", what);
    Shape s = fromBlockedShape(what, x.shape(), channels);
    NDArray& y = k.allocOutputUninit(0, x.dtype(), s);
    int64_t S = 1;
    for (size_t i = 2; i < s.size(); ++i) S *= s[i];
    reblock(x, y, s[0], channels, S, x.shape().back(), false);
  };
}

KernelFn reblockKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  int64_t channels = attrPositive(n, "channels"), block = attrPositive(n, "block");
  return [channels, block, what = n.describe()](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() != DataType::String, "{}: string tensors cannot be blocked", what);
    Shape s = fromBlockedShape(what, x.shape(), channels);
    int64_t S = 1;
    for (size_t i = 2; i < s.size(); ++i) S *= s[i];
    NDArray plain = NDArray::uninitialized(x.dtype(), s);
    reblock(x, plain, s[0], channels, S, x.shape().back(), false);
    NDArray& y = k.allocOutput(0, x.dtype(), toBlockedShape(what, s, block));  // zero-filled padding
    reblock(plain, y, s[0], channels, S, block, true);
  };
}

// ---- compositions -------------------------------------------------------------------------

ir::Attributes pick(const ir::Node& n, std::initializer_list<const char*> names) {
  ir::Attributes a;
  for (const char* name : names)
    if (const ir::AttrValue* v = n.attrs().find(name)) a.set(name, *v);
  return a;
}

ir::Tensor* unblock(ir::Graph& g, ir::Tensor* t, int64_t channels) {
  ir::Attributes a;
  a.set("channels", channels);
  return addInner(g, "FromBlocked", kGraftDomain, {t}, a);
}

ir::Tensor* block(ir::Graph& g, ir::Tensor* t, int64_t b) {
  ir::Attributes a;
  a.set("block", b);
  return addInner(g, "ToBlocked", kGraftDomain, {t}, a);
}

// The activation named by the node's activation attributes, applied to t.
ir::Tensor* activation(const ir::Node& n, ir::Graph& g, ir::Tensor* t) {
  std::string act = n.attrString("activation", ""), dom = n.attrString("activation_domain", "");
  if (act.empty()) return t;
  float alpha = n.attrFloat("activation_alpha", 0.f), beta = n.attrFloat("activation_beta", 0.f);
  GRAFT_CHECK(dom.empty() || dom == kGraphcoreDomain || dom == kGraftDomain,
              "{}: activation_domain must be \"\", ai.graphcore or ai.graft, got '{}'", n.describe(), dom);
  ir::Attributes a;
  std::vector<ir::Tensor*> in{t};
  if (dom.empty() && act == "Clip") {
    in.push_back(addScalar(g, alpha));
    in.push_back(addScalar(g, beta));
  } else {
    const ew::Row* row = ew::find(dom, act);
    GRAFT_CHECK(row && row->postOp(), "{}: unsupported activation '{}{}'", n.describe(),
                dom.empty() ? "" : dom + "::", act);
    if (row->p0[0]) a.set(row->p0, alpha);
    if (row->p1[0]) a.set(row->p1, beta);
  }
  return addInner(g, act, dom, in, a);
}

int64_t outChannels(const ir::Node& n, const ir::Tensor* w) {
  GRAFT_CHECK(w && w->info().hasShape() && w->info().rank() >= 1 && w->info().dims()[0].known(),
              "{}: W needs a known first dimension", n.describe());
  return w->info().dims()[0].value;
}

// t as FLOAT where it is a BFLOAT16 activation (FusedConv's X and Sum may be: exact).
ir::Tensor* asFloat(ir::Graph& g, ir::Tensor* t) {
  if (!t || t->info().dataType() != DataType::BFloat16) return t;
  ir::Attributes a;
  a.set("to", static_cast<int64_t>(DataType::Float));
  return addInner(g, "Cast", "", {t}, a);
}

std::vector<ir::Tensor*> fusedConv(const ir::Node& n, ir::Graph& g, const std::vector<ir::Tensor*>& in) {
  int64_t xb = n.attrInt("x_block", 0), yb = n.attrInt("y_block", 0);
  GRAFT_CHECK(xb >= 0 && yb >= 0, "{}: x_block and y_block must be >= 0", n.describe());
  // y_dtype: the type Y is stored in, FLOAT (1, the default) or BFLOAT16 (16: rounded to nearest
  // even); the arithmetic is float32's either way.
  const auto kFloat = static_cast<int64_t>(DataType::Float), kBf16 = static_cast<int64_t>(DataType::BFloat16);
  int64_t yType = n.attrInt("y_dtype", kFloat);
  GRAFT_CHECK(yType == kFloat || yType == kBf16, "{}: y_dtype must be {} (FLOAT) or {} (BFLOAT16), got {}",
              n.describe(), kFloat, kBf16, yType);
  ir::Tensor* x = asFloat(g, in.at(0));
  GRAFT_CHECK(x && in.size() >= 2 && in[1], "{}: FusedConv needs X and W", n.describe());
  if (xb) {
    const auto& w = in[1]->info();
    GRAFT_CHECK(w.hasShape() && w.rank() >= 2 && w.dims()[1].known(), "{}: W needs a known shape", n.describe());
    x = unblock(g, x, w.dims()[1].value * n.attrInt("group", 1));
  }
  std::vector<ir::Tensor*> convIn{x, in[1]};
  if (in.size() > 2 && in[2]) convIn.push_back(in[2]);
  ir::Tensor* y = addInner(g, "Conv", "", convIn, pick(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}));
  if (in.size() > 3 && in[3]) {
    ir::Tensor* s = asFloat(g, yb ? unblock(g, in[3], outChannels(n, in[1])) : in[3]);
    y = addInner(g, "Add", "", {y, s});
  }
  y = activation(n, g, y);
  if (yType != kFloat) {
    ir::Attributes a;
    a.set("to", yType);
    y = addInner(g, "Cast", "", {y}, a);
  }
  if (yb) y = block(g, y, yb);
  return {y};
}

std::vector<ir::Tensor*> fusedConvChain(const ir::Node& n, ir::Graph& g, const std::vector<ir::Tensor*>& in) {
  return {buildConvChain(n, g, in).back()->output(0)};
}

// The stages' convolutions, from the stand-in graph of n's input types.
double convChainCost(const ir::Node& n) {
  std::vector<ir::ValueType> types;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    const ir::Tensor* t = n.hasInput(i) ? n.input(i) : nullptr;
    const bool usable = t && t->info().isStatic();
    if (!usable && i != kChainSum) return 0;
    types.push_back(usable ? t->type() : ir::ValueType{});
  }
  ir::Graph g(n.type());
  double flops = 0;
  for (const ir::Node* stage : buildConvChain(n, g, types))
    flops += cost::convolution(stage->output(0), stage->input(1));
  return flops;
}

std::vector<ir::Tensor*> fusedMatMul(const ir::Node& n, ir::Graph& g, const std::vector<ir::Tensor*>& in) {
  GRAFT_CHECK(in.size() >= 2 && in[0] && in[1], "{}: FusedMatMul needs A and B", n.describe());
  auto permuted = [&](ir::Tensor* t, const char* attr) {
    if (!n.attrs().has(attr)) return t;
    ir::Attributes a;
    a.set("perm", n.attrInts(attr));
    return addInner(g, "Transpose", "", {t}, a);
  };
  ir::Tensor* y = addInner(g, "MatMul", "", {permuted(in[0], "perm_a"), permuted(in[1], "perm_b")});
  if (in.size() > 2 && in[2]) y = addInner(g, "Add", "", {y, in[2]});
  return {permuted(activation(n, g, y), "perm_y")};
}

std::vector<ir::Tensor*> fusedGemm(const ir::Node& n, ir::Graph& g, const std::vector<ir::Tensor*>& in) {
  GRAFT_CHECK(in.size() >= 2 && in[0] && in[1], "{}: FusedGemm needs A and B", n.describe());
  std::vector<ir::Tensor*> gi{in[0], in[1]};
  if (in.size() > 2 && in[2]) gi.push_back(in[2]);
  ir::Tensor* y = addInner(g, "Gemm", "", gi, pick(n, {"alpha", "beta", "transA", "transB"}));
  return {activation(n, g, y)};
}

std::vector<ir::Tensor*> channelBlocked(const ir::Node& n, ir::Graph& g, const std::vector<ir::Tensor*>& in) {
  std::string op = n.attrString("op"), opDomain = n.attrString("op_domain", "");
  int64_t b = attrPositive(n, "block"), channels = attrPositive(n, "channels");
  GRAFT_CHECK(!in.empty() && in[0], "{}: ChannelBlocked needs input 0", n.describe());
  GRAFT_CHECK(opDomain.empty() || opDomain == kGraftDomain, "{}: op_domain must be \"\" or {}, got '{}'", n.describe(),
              kGraftDomain, opDomain);
  std::vector<int64_t> blockedIn = n.attrInts("blocked_inputs", {0});
  std::vector<int64_t> inChannels = n.attrInts("input_channels", std::vector<int64_t>(blockedIn.size(), channels));
  GRAFT_CHECK(inChannels.size() == blockedIn.size(), "{}: input_channels must have one value per blocked input",
              n.describe());
  ir::Attributes a = n.attrs();
  for (const char* name :
       {"op", "op_domain", "block", "channels", "blocked_inputs", "input_channels", "blocked_output"})
    a.erase(name);
  std::vector<ir::Tensor*> inner = in;
  for (size_t k = 0; k < blockedIn.size(); ++k) {
    int64_t i = blockedIn[k];
    GRAFT_CHECK(i >= 0 && static_cast<size_t>(i) < in.size() && in[i], "{}: blocked input {} is not an input",
                n.describe(), i);
    GRAFT_CHECK(inChannels[k] > 0, "{}: input_channels must be > 0", n.describe());
    inner[i] = unblock(g, in[i], inChannels[k]);
  }
  std::vector<ir::Tensor*> outs;
  addInner(g, op, opDomain, inner, a, &outs, n.numOutputs());
  if (!outs.empty() && outs[0] && n.attrInt("blocked_output", 1)) outs[0] = block(g, outs[0], b);
  return outs;
}

InferFn inferOf(const CompositeBuilder& b) {
  return [b](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
    return inferComposite(n, in, b);
  };
}

KernelFactory referenceOf(const CompositeBuilder& b) {
  return [b](CompileContext& c) { return compileComposite(c, b); };
}

}  // namespace

std::string convChainAttrName(int64_t stage, std::string_view name) { return fmt::format("s{}_{}", stage, name); }

int64_t convChainStages(const ir::Node& n) {
  int64_t stages = n.attrInt("stages", 0);
  GRAFT_CHECK(stages >= 1 && stages <= 64, "{}: stages must be in [1, 64], got {}", n.describe(), stages);
  GRAFT_CHECK(n.numInputs() == chainWeightInput(stages),
              "{}: {} stages need {} inputs (X, Sum, then W and B of each stage), got {}", n.describe(), stages,
              chainWeightInput(stages), n.numInputs());
  return stages;
}

ir::Attributes convChainStageAttrs(const ir::Node& n, int64_t stage) {
  const std::string prefix = convChainAttrName(stage, "");
  ir::Attributes a;
  for (const auto& [name, value] : n.attrs().all())
    if (name.compare(0, prefix.size(), prefix) == 0) a.set(name.substr(prefix.size()), value);
  return a;
}

std::vector<ir::Node*> buildConvChain(const ir::Node& n, ir::Graph& g, const std::vector<ir::Tensor*>& in) {
  const int64_t stages = convChainStages(n);
  GRAFT_CHECK(in.size() == n.numInputs() && in[kChainX], "{}: FusedConvChain needs X", n.describe());
  std::vector<ir::Node*> out;
  ir::Tensor* y = in[kChainX];
  for (int64_t i = 0; i < stages; ++i) {
    ir::Tensor* w = in[chainWeightInput(i)];
    ir::Tensor* b = in[chainBiasInput(i)];
    GRAFT_CHECK(w && b, "{}: stage {} needs its W and B (inputs {} and {})", n.describe(), i, chainWeightInput(i),
                chainBiasInput(i));
    std::vector<ir::Tensor*> stageIn{y, w, b};
    if (i + 1 == stages && in[kChainSum]) stageIn.push_back(in[kChainSum]);
    y = addInner(g, "FusedConv", kGraftDomain, stageIn, convChainStageAttrs(n, i));
    out.push_back(y->producer());
  }
  return out;
}

std::vector<ir::Node*> buildConvChain(const ir::Node& n, ir::Graph& g, const std::vector<ir::ValueType>& inputTypes) {
  g.otherOpsets[kGraftDomain] = 1;
  std::vector<ir::Tensor*> in;
  for (size_t i = 0; i < inputTypes.size(); ++i)
    in.push_back(inputTypes[i].known() ? g.addTensor("in" + std::to_string(i), inputTypes[i], ir::TensorKind::Input)
                                       : nullptr);
  return buildConvChain(n, g, in);
}

GRAFT_REGISTER_OPS(fused) {
  r.add("ToBlocked", kGraftDomain).setInfer(inferToBlocked).setReference(toBlockedKernel);
  r.add("FromBlocked", kGraftDomain).setInfer(inferFromBlocked).setReference(fromBlockedKernel);
  r.add("Reblock", kGraftDomain).setInfer(inferReblock).setReference(reblockKernel);
  // Y may take over Sum's buffer (the residual input, dead after it): the sum is then done in place.
  r.add("FusedConv", kGraftDomain)
      .setInfer(inferOf(fusedConv))
      .setReference(referenceOf(fusedConv))
      .inplace(3)
      .setCost([](const ir::Node& n) { return cost::convolution(n.output(0), n.input(1)); });
  r.add("FusedConvChain", kGraftDomain)
      .setInfer(inferOf(fusedConvChain))
      .setReference(referenceOf(fusedConvChain))
      .setCost(convChainCost);
  r.add("FusedMatMul", kGraftDomain)
      .setInfer(inferOf(fusedMatMul))
      .setReference(referenceOf(fusedMatMul))
      .setCost(cost::matmul);
  r.add("FusedGemm", kGraftDomain)
      .setInfer(inferOf(fusedGemm))
      .setReference(referenceOf(fusedGemm))
      .setCost(cost::gemm);
  r.add("ChannelBlocked", kGraftDomain).setInfer(inferOf(channelBlocked)).setReference(referenceOf(channelBlocked));
}

}  // namespace graft::ops
