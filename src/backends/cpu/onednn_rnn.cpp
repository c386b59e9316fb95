// oneDNN recurrent layers for ai.onnx RNN, GRU and LSTM where oneDNN's cells compute ONNX's:
// float, layout 0 ([seq, batch, ...]), no clip, no input_forget, the default activations (RNN:
// one of Tanh, Relu, Sigmoid for every direction), forward, reverse and bidirectional.
// GRU's linear_before_reset=0 is oneDNN's GRU (its candidate bias is Wb_h + Rb_h),
// linear_before_reset=1 is oneDNN's LBR-GRU. LSTM peepholes are supported. sequence_lens with
// every length equal to seq_length runs here; other lengths (known only at run time) run the
// reference kernel.
//
// Weights are repacked from ONNX's [dirs, gates*hidden, in] (gates iofc for LSTM, zrh for GRU)
// into oneDNN's ldgoi [layers, dirs, gates, hidden, in] (gates ifco for LSTM, urc for GRU): the
// same layout with the gate blocks permuted, so whole blocks are copied. Then they are
// reordered into the primitive's layout: once at compile time when W, R, B and P are constant,
// on every run otherwise.
//
// The gradient ops RNNGrad, GRUGrad and LSTMGrad (ai.graft, rnn_grad.cpp) run here under the same
// conditions, on oneDNN's training forward and backward primitives (see makeRnnGrad).
#include <algorithm>
#include <cctype>
#include <cstring>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "ops/registry.hpp"
#include "ops/rnn_cell.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu::onednn {
namespace {

enum class Cell { Rnn, Gru, LbrGru, Lstm };

struct RnnConfig {
  Cell cell = Cell::Rnn;
  int64_t T = 0, N = 0, I = 0, H = 0, D = 1, G = 1;  // G: ONNX gates (1, 3, 4)
  dnnl::algorithm act = dnnl::algorithm::eltwise_tanh;
  dnnl::rnn_direction dir = dnnl::rnn_direction::unidirectional_left2right;
  bool bias = false, seqLens = false, h0 = false, c0 = false, peephole = false;
  bool grad = false;  // an RNNGrad, GRUGrad or LSTMGrad node
};

// Forward nodes (ai.onnx RNN, GRU, LSTM) and their gradient ops (ai.graft RNNGrad, GRUGrad,
// LSTMGrad, whose inputs are the gradients of the forward outputs followed by the forward inputs).
std::optional<RnnConfig> rnnConfig(const ir::Node& n) {
  RnnConfig c;
  std::string type = n.type();
  if (n.domain() == ops::kGraftDomain && type.size() > 4 && type.substr(type.size() - 4) == "Grad") {
    c.grad = true;
    type.resize(type.size() - 4);
  } else if (!n.domain().empty()) {
    return std::nullopt;
  }
  ops::rnn::Cell refCell;
  if (type == "RNN")
    refCell = ops::rnn::Cell::Rnn;
  else if (type == "GRU")
    refCell = ops::rnn::Cell::Gru;
  else if (type == "LSTM")
    refCell = ops::rnn::Cell::Lstm;
  else
    return std::nullopt;
  // The attributes as the reference kernel reads them (ops/rnn.cpp); what it refuses, the reference
  // kernel reports.
  ops::rnn::RnnParams p;
  try {
    p = ops::rnn::parseParams(n, refCell);
  } catch (const Error&) {
    return std::nullopt;
  }
  c.cell = refCell == ops::rnn::Cell::Rnn    ? Cell::Rnn
           : refCell == ops::rnn::Cell::Lstm ? Cell::Lstm
           : p.linearBeforeReset             ? Cell::LbrGru
                                             : Cell::Gru;
  bool lstm = c.cell == Cell::Lstm;
  c.G = p.gates;
  // The forward inputs start after the output gradients.
  const size_t o = c.grad ? (lstm ? 3 : 2) : 0;
  auto in = [&](size_t i) { return o + i < n.numInputs() ? n.input(o + i) : nullptr; };
  auto hasShape = [&](size_t i, const Shape& s) { return isStaticFloat(in(i)) && in(i)->info().shape() == s; };
  if (p.batchFirst || p.clip || p.inputForget) return std::nullopt;
  c.D = p.numDirections;
  c.dir = p.numDirections == 2 ? dnnl::rnn_direction::bidirectional_concat
          : p.forward          ? dnnl::rnn_direction::unidirectional_left2right
                               : dnnl::rnn_direction::unidirectional_right2left;
  // Activations: the defaults (f = sigmoid, g = h = tanh for GRU and LSTM), or for RNN one of
  // tanh, relu, sigmoid shared by the directions.
  using Kind = ops::rnn::Activation::Kind;
  if (c.cell == Cell::Rnn) {
    for (const ops::rnn::Activation& a : p.acts)
      if (a.kind != p.acts[0].kind) return std::nullopt;
  } else if (!p.defaultActivations()) {
    return std::nullopt;
  }
  if (c.cell == Cell::Rnn) {
    if (p.acts.empty()) return std::nullopt;
    switch (p.acts[0].kind) {
      case Kind::Tanh:
        c.act = dnnl::algorithm::eltwise_tanh;
        break;
      case Kind::Relu:
        c.act = dnnl::algorithm::eltwise_relu;
        break;
      case Kind::Sigmoid:
        c.act = dnnl::algorithm::eltwise_logistic;
        break;
      default:
        return std::nullopt;
    }
  }
  if (!isStaticFloat(in(0)) || !isStaticFloat(in(1)) || !isStaticFloat(in(2))) return std::nullopt;
  Shape x = in(0)->info().shape(), w = in(1)->info().shape(), r = in(2)->info().shape();
  if (x.size() != 3 || w.size() != 3 || r.size() != 3) return std::nullopt;
  c.T = x[0];
  c.N = x[1];
  c.I = x[2];
  c.H = r[2];
  if (c.T <= 0 || c.N <= 0 || c.I <= 0 || c.H <= 0) return std::nullopt;
  if (n.attrs().has("hidden_size") && n.attrInt("hidden_size") != c.H) return std::nullopt;
  if (w != Shape{c.D, c.G * c.H, c.I} || r != Shape{c.D, c.G * c.H, c.H}) return std::nullopt;
  c.bias = in(3) != nullptr;
  if (c.bias && !hasShape(3, {c.D, 2 * c.G * c.H})) return std::nullopt;
  c.seqLens = in(4) != nullptr;
  if (c.seqLens) {
    const ir::Tensor* s = in(4);
    if (s->info().dataType() != DataType::Int32 || !s->info().isStatic() || s->info().shape() != Shape{c.N})
      return std::nullopt;
  }
  c.h0 = in(5) != nullptr;
  if (c.h0 && !hasShape(5, {c.D, c.N, c.H})) return std::nullopt;
  c.c0 = lstm && in(6) != nullptr;
  if (c.c0 && !hasShape(6, {c.D, c.N, c.H})) return std::nullopt;
  c.peephole = lstm && in(7) != nullptr;
  if (c.peephole && !hasShape(7, {c.D, 3 * c.H})) return std::nullopt;
  // LSTMGrad may end with the forward's Y (rnn_grad.cpp), which this kernel does not read.
  if (n.numInputs() > o + (lstm ? (c.grad ? 9u : 8u) : 6u)) return std::nullopt;
  Shape yh{c.D, c.N, c.H}, y{c.T, c.D, c.N, c.H};
  auto outputIs = [&](size_t i, const Shape& s) {
    return !n.hasOutput(i) || (isStaticFloat(n.output(i)) && n.output(i)->info().shape() == s);
  };
  if (c.grad) {
    // dY, dY_h (, dY_c) -> dX, dW, dR, dB, dinitial_h (, dinitial_c, dP).
    auto dyIs = [&](size_t i, const Shape& s) {
      return !n.hasInput(i) || (isStaticFloat(n.input(i)) && n.input(i)->info().shape() == s);
    };
    if (!dyIs(0, y) || !dyIs(1, yh) || (lstm && !dyIs(2, yh))) return std::nullopt;
    if (n.numOutputs() > (lstm ? 7u : 5u)) return std::nullopt;
    std::vector<Shape> outs{{c.T, c.N, c.I}, {c.D, c.G * c.H, c.I}, {c.D, c.G * c.H, c.H}, {c.D, 2 * c.G * c.H}, yh, yh,
                            {c.D, 3 * c.H}};
    for (size_t i = 0; i < n.numOutputs(); ++i)
      if (!outputIs(i, outs[i])) return std::nullopt;
    return c;
  }
  if (n.numOutputs() > (lstm ? 3u : 2u) || !outputIs(0, y)) return std::nullopt;
  for (size_t i = 1; i < n.numOutputs(); ++i)
    if (!outputIs(i, yh)) return std::nullopt;
  return c;
}

bool supportsRnn(const ir::Node& n) { return rnnConfig(n).has_value(); }

// oneDNN's gate of each ONNX gate.
std::vector<int64_t> gateMap(Cell cell) {
  if (cell == Cell::Lstm) return {0, 3, 1, 2};  // ONNX i o f c -> oneDNN i f c o
  if (cell == Cell::Rnn) return {0};
  return {0, 1, 2};  // z r h -> u r c
}

// Bias gates in oneDNN: LBR-GRU keeps the candidate's recurrent bias apart (scaled by the reset gate).
int64_t biasGates(const RnnConfig& c) { return c.cell == Cell::LbrGru ? 4 : c.G; }

// ONNX W, R, B, P -> oneDNN ldgoi weights, ldgo bias, peephole (plain arrays of the right sizes).
void packWeights(const RnnConfig& c, const NDArray& W, const NDArray& R, const NDArray* B, const NDArray* P,
                 NDArray& wlPlain, NDArray& wiPlain, NDArray& bPlain, NDArray& pPlain) {
  const int64_t D = c.D, G = c.G, H = c.H, I = c.I;
  auto map = gateMap(c.cell);
  const float* wp = W.data<float>();
  const float* rp = R.data<float>();
  float* wl = wlPlain.data<float>();
  float* wi = wiPlain.data<float>();
  for (int64_t d = 0; d < D; ++d)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t from = d * G + g, to = d * G + map[g];
      std::memcpy(wl + to * H * I, wp + from * H * I, H * I * sizeof(float));
      std::memcpy(wi + to * H * H, rp + from * H * H, H * H * sizeof(float));
    }
  int64_t Gb = biasGates(c);
  float* bp = bPlain.data<float>();
  std::fill(bp, bp + D * Gb * H, 0.f);
  if (B) {
    const float* src = B->data<float>();
    for (int64_t d = 0; d < D; ++d)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t h = 0; h < H; ++h) {
          float wb = src[d * 2 * G * H + g * H + h], rb = src[d * 2 * G * H + (G + g) * H + h];
          if (c.cell == Cell::LbrGru && g == 2) {
            bp[(d * Gb + 2) * H + h] = wb;  // the candidate's input part
            bp[(d * Gb + 3) * H + h] = rb;  // its recurrent part, scaled by the reset gate
          } else {
            bp[(d * Gb + map[g]) * H + h] = wb + rb;
          }
        }
  }
  if (P) {
    const float* src = P->data<float>();
    float* pp = pPlain.data<float>();
    static const int64_t kPeep[3] = {0, 2, 1};  // oneDNN i f o <- ONNX i o f
    for (int64_t d = 0; d < D; ++d)
      for (int64_t k = 0; k < 3; ++k)
        for (int64_t h = 0; h < H; ++h) pp[(d * 3 + k) * H + h] = src[d * 3 * H + kPeep[k] * H + h];
  }
}

// What the forward and gradient kernels share: the node's configuration, the user-side memory
// descriptors (ONNX's layouts as oneDNN sees them) and the weights repacked for oneDNN.
struct RnnCommon {
  RnnConfig c;
  memory::desc xDesc, hDesc, yDesc, wlUser, wiUser, bDesc, pDesc;
  // Plain repacked weights (filled at compile time when constant, else each run).
  NDArray wlPlain, wiPlain, bPlain, pPlain;
  ops::KernelFn fallback;
  int threads = 1;

  void init(const RnnConfig& cfg, ops::CompileContext& ctx) {
    c = cfg;
    threads = ctx.pool().numThreads();
    // Run time only: a batch whose sequence_lens are shorter than T needs masking, which oneDNN's
    // primitives do not do; those batches run the op's reference kernel (data-dependent, so it
    // cannot be a compile-time choice).
    const ops::OpDef* def = ops::Registry::instance().find(ctx.node());
    GRAFT_ASSERT(def && def->reference, "{}: no reference kernel", ctx.node().describe());
    fallback = def->reference(ctx);
    setThreads(threads);
    auto f32 = memory::data_type::f32;
    using tag = memory::format_tag;
    const int64_t Gb = biasGates(c);
    xDesc = memory::desc({c.T, c.N, c.I}, f32, tag::tnc);
    hDesc = memory::desc({1, c.D, c.N, c.H}, f32, tag::ldnc);
    yDesc = memory::desc({c.T, c.N, c.D * c.H}, f32, tag::tnc);
    wlUser = memory::desc({1, c.D, c.I, c.G, c.H}, f32, tag::ldgoi);
    wiUser = memory::desc({1, c.D, c.H, c.G, c.H}, f32, tag::ldgoi);
    bDesc = memory::desc({1, c.D, Gb, c.H}, f32, tag::ldgo);
    pDesc = c.peephole ? memory::desc({1, c.D, 3, c.H}, f32, tag::ldgo) : memory::desc();
    wlPlain = NDArray(DataType::Float, {c.D * c.I * c.G * c.H});
    wiPlain = NDArray(DataType::Float, {c.D * c.H * c.G * c.H});
    bPlain = NDArray(DataType::Float, {c.D * Gb * c.H});
    if (c.peephole) pPlain = NDArray(DataType::Float, {c.D * 3 * c.H});
  }

  void pack(const NDArray& W, const NDArray& R, const NDArray* B, const NDArray* P) {
    packWeights(c, W, R, B, P, wlPlain, wiPlain, bPlain, pPlain);
  }
};

// d (float32, a plain layout given by its strides) with bf16 elements.
memory::desc asBf16(const memory::desc& d) {
  const auto& strides = d.data.format_desc.blocking.strides;
  return memory::desc(d.dims(), memory::data_type::bf16, memory::dims(strides, strides + d.data.ndims));
}

struct RnnState : RnnCommon {
  dnnl::primitive prim;
  PackedOperand wl, wi;
  bool constant = false;
  // X, h (h0 in, h_T out) and Y as the primitive takes them: as they are, or under
  // bf16Compute() converted at the node to and from bf16 (the cell states, bias and peepholes stay
  // float32).
  Adapter x, h, y;
};

// The primitive of descriptor d, with the weight layouts it wants; returns its implementation.
template <class Prim>
std::string adopt(const typename Prim::desc& d, dnnl::primitive& prim, memory::desc& wl, memory::desc& wi) {
  typename Prim::primitive_desc pd(d, engine());
  prim = Prim(pd);
  wl = pd.weights_layer_desc();
  wi = pd.weights_iter_desc();
  return pd.impl_info_str();
}

ops::KernelFn makeRnn(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto cfg = rnnConfig(n);
  GRAFT_ASSERT(cfg, "{}: makeRnn on an unsupported node", n.describe());
  auto st = std::make_shared<RnnState>();
  st->init(*cfg, ctx);
  const RnnConfig& c = st->c;
  using tag = memory::format_tag;
  bool lstm = c.cell == Cell::Lstm;
  auto prop = dnnl::prop_kind::forward_inference;
  const NDArray *W = ctx.constantInput(1), *R = ctx.constantInput(2), *B = c.bias ? ctx.constantInput(3) : nullptr,
                *P = c.peephole ? ctx.constantInput(7) : nullptr;
  st->constant = W && R && (!c.bias || B) && (!c.peephole || P);
  if (st->constant) st->pack(*W, *R, B, P);
  auto create = [&](bool bf16) {
    auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    memory::desc x = bf16 ? asBf16(st->xDesc) : st->xDesc, h = bf16 ? asBf16(st->hDesc) : st->hDesc,
                 y = bf16 ? asBf16(st->yDesc) : st->yDesc;
    memory::desc wlAny({1, c.D, c.I, c.G, c.H}, dt, tag::any), wiAny({1, c.D, c.H, c.G, c.H}, dt, tag::any);
    // Initial states default to zero (an empty descriptor), final ones are computed when read.
    // LSTM's cell states stay float32.
    memory::desc srcIter = c.h0 ? h : memory::desc(), srcIterC = c.c0 ? st->hDesc : memory::desc();
    memory::desc dstIter = n.hasOutput(1) ? h : memory::desc();
    memory::desc dstIterC = lstm && n.hasOutput(2) ? st->hDesc : memory::desc();
    try {
      memory::desc wlWant, wiWant;
      std::string impl;
      switch (c.cell) {
        case Cell::Rnn:
          impl = adopt<dnnl::vanilla_rnn_forward>(
              dnnl::vanilla_rnn_forward::desc(prop, c.act, c.dir, x, srcIter, wlAny, wiAny, st->bDesc, y, dstIter),
              st->prim, wlWant, wiWant);
          break;
        case Cell::Gru:
          impl = adopt<dnnl::gru_forward>(
              dnnl::gru_forward::desc(prop, c.dir, x, srcIter, wlAny, wiAny, st->bDesc, y, dstIter), st->prim, wlWant,
              wiWant);
          break;
        case Cell::LbrGru:
          impl = adopt<dnnl::lbr_gru_forward>(
              dnnl::lbr_gru_forward::desc(prop, c.dir, x, srcIter, wlAny, wiAny, st->bDesc, y, dstIter), st->prim,
              wlWant, wiWant);
          break;
        case Cell::Lstm:
          impl = adopt<dnnl::lstm_forward>(dnnl::lstm_forward::desc(prop, c.dir, x, srcIter, srcIterC, wlAny, wiAny,
                                                                    st->pDesc, st->bDesc, y, dstIter, dstIterC),
                                           st->prim, wlWant, wiWant);
          break;
      }
      if (!acceptImplementation(impl, bf16)) return false;
      st->x.init(st->xDesc, x, true, false);
      st->h.init(st->hDesc, h, true, true);
      st->y.init(st->yDesc, y, false, true);
      st->wl.init(st->wlUser, wlWant, st->constant ? &st->wlPlain : nullptr);
      st->wi.init(st->wiUser, wiWant, st->constant ? &st->wiPlain : nullptr);
    } catch (const dnnl::error&) {
      return false;
    }
    return true;
  };
  if (!createPreferringBf16(create)) return decline();
  return [st](ops::KernelContext& k) {
    const RnnConfig& c = st->c;
    if (c.seqLens) {
      const NDArray& s = k.input(4);
      const int32_t* sp = s.data<int32_t>();
      for (int64_t i = 0; i < s.numel(); ++i)
        if (sp[i] != c.T) return st->fallback(k);  // shorter sequences: the reference masks them
    }
    setThreads(st->threads);
    if (!st->constant)
      st->pack(k.input(1), k.input(2), c.bias ? &k.input(3) : nullptr, c.peephole ? &k.input(7) : nullptr);
    bool lstm = c.cell == Cell::Lstm;
    NDArray yScratch;
    NDArray* y = nullptr;
    // Y is [T, D, N, H]; oneDNN writes [T, N, D*H]: the same bytes for one direction.
    if (k.wantsOutput(0) && c.D == 1)
      y = &k.allocOutputUninit(0, DataType::Float, {c.T, 1, c.N, c.H});
    else
      yScratch = NDArray::uninitialized(DataType::Float, {c.T, c.N, c.D * c.H});
    NDArray& yArr = y ? *y : yScratch;
    NDArray xB, h0B, yB, hTB;  // the conversions' scratch, where there are conversions
    memory yMem = st->y.output(yArr, yB);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC_LAYER, st->x.input(k.input(0), xB)},
                                         {DNNL_ARG_WEIGHTS_LAYER, st->wl.get(st->wlPlain)},
                                         {DNNL_ARG_WEIGHTS_ITER, st->wi.get(st->wiPlain)},
                                         {DNNL_ARG_BIAS, wrap(st->bDesc, st->bPlain)},
                                         {DNNL_ARG_DST_LAYER, yMem}};
    if (c.h0) args[DNNL_ARG_SRC_ITER] = st->h.input(k.input(5), h0B);
    if (c.c0) args[DNNL_ARG_SRC_ITER_C] = wrap(st->hDesc, k.input(6));
    if (c.peephole) args[DNNL_ARG_WEIGHTS_PEEPHOLE] = wrap(st->pDesc, st->pPlain);
    NDArray* hT = k.wantsOutput(1) ? &k.allocOutputUninit(1, DataType::Float, {c.D, c.N, c.H}) : nullptr;
    if (hT) args[DNNL_ARG_DST_ITER] = st->h.output(*hT, hTB);
    if (lstm && k.wantsOutput(2))
      args[DNNL_ARG_DST_ITER_C] = wrap(st->hDesc, k.allocOutputUninit(2, DataType::Float, {c.D, c.N, c.H}));
    execute(st->prim, args);
    st->y.written(yMem, yArr);
    if (hT) st->h.written(args.at(DNNL_ARG_DST_ITER), *hT);
    if (k.wantsOutput(0) && c.D == 2) {
      NDArray& out = k.allocOutputUninit(0, DataType::Float, {c.T, 2, c.N, c.H});
      const float* src = yScratch.data<float>();
      float* dst = out.data<float>();
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t d = 0; d < 2; ++d)
          for (int64_t b = 0; b < c.N; ++b)
            std::memcpy(dst + ((t * 2 + d) * c.N + b) * c.H, src + (t * c.N + b) * 2 * c.H + d * c.H,
                        c.H * sizeof(float));
    }
  };
}

// The gradient ops (ai.graft RNNGrad, GRUGrad, LSTMGrad) run oneDNN's training forward
// (recomputing the forward: its workspace holds the gates the backward pass reads) and then its
// backward pass. Absent initial states, output gradients and bias are given as zeros, so one
// primitive pair serves every combination of optional inputs. oneDNN accumulates the weight
// gradients, hence the zero-filled arrays.
struct RnnGradState : RnnCommon {
  dnnl::primitive fwd, bwd;
  memory::desc wsDesc;
  // The weight gradients come in ldigo (oneDNN 2.6 turns down ldgoi for them): reordered to ldgoi.
  memory::desc dwlDesc, dwiDesc;
  dnnl::reorder dwlToUser, dwiToUser;
  PackedOperand fwdWl, fwdWi, bwdWl, bwdWi;
};

ops::KernelFn makeRnnGrad(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto cfg = rnnConfig(n);
  GRAFT_ASSERT(cfg && cfg->grad, "{}: makeRnnGrad on an unsupported node", n.describe());
  auto st = std::make_shared<RnnGradState>();
  st->init(*cfg, ctx);
  const RnnConfig& c = st->c;
  auto f32 = memory::data_type::f32;
  using tag = memory::format_tag;
  memory::desc wlAny({1, c.D, c.I, c.G, c.H}, f32, tag::any), wiAny({1, c.D, c.H, c.G, c.H}, f32, tag::any);
  const memory::desc &x = st->xDesc, &h = st->hDesc, &y = st->yDesc, &b = st->bDesc, &p = st->pDesc;
  const memory::desc &wl = st->wlUser, &wi = st->wiUser;
  st->dwlDesc = memory::desc({1, c.D, c.I, c.G, c.H}, f32, tag::ldigo);
  st->dwiDesc = memory::desc({1, c.D, c.H, c.G, c.H}, f32, tag::ldigo);
  const memory::desc &dl = st->dwlDesc, &di = st->dwiDesc;
  const auto fp = dnnl::prop_kind::forward_training, bp = dnnl::prop_kind::backward;
  auto finish = [&](const auto& fpd, const auto& bpd) {
    st->fwd = dnnl::primitive(fpd);
    st->bwd = dnnl::primitive(bpd);
    st->wsDesc = fpd.workspace_desc();
    st->fwdWl.init(wl, fpd.weights_layer_desc(), nullptr);
    st->fwdWi.init(wi, fpd.weights_iter_desc(), nullptr);
    st->bwdWl.init(wl, bpd.weights_layer_desc(), nullptr);
    st->bwdWi.init(wi, bpd.weights_iter_desc(), nullptr);
    if (bpd.diff_weights_layer_desc() != dl || bpd.diff_weights_iter_desc() != di)
      throw dnnl::error(dnnl_unimplemented, "diff weights layout");
    st->dwlToUser = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), dl, engine(), wl));
    st->dwiToUser = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), di, engine(), wi));
  };
  try {
    switch (c.cell) {
      case Cell::Rnn: {
        dnnl::vanilla_rnn_forward::desc fd(fp, c.act, c.dir, x, h, wlAny, wiAny, b, y, h);
        dnnl::vanilla_rnn_forward::primitive_desc fpd(fd, engine());
        dnnl::vanilla_rnn_backward::desc bd(bp, c.act, c.dir, x, h, wlAny, wiAny, b, y, h, x, h, dl, di, b, y, h);
        finish(fpd, dnnl::vanilla_rnn_backward::primitive_desc(bd, engine(), fpd));
        break;
      }
      case Cell::Gru: {
        dnnl::gru_forward::desc fd(fp, c.dir, x, h, wlAny, wiAny, b, y, h);
        dnnl::gru_forward::primitive_desc fpd(fd, engine());
        dnnl::gru_backward::desc bd(bp, c.dir, x, h, wlAny, wiAny, b, y, h, x, h, dl, di, b, y, h);
        finish(fpd, dnnl::gru_backward::primitive_desc(bd, engine(), fpd));
        break;
      }
      case Cell::LbrGru: {
        dnnl::lbr_gru_forward::desc fd(fp, c.dir, x, h, wlAny, wiAny, b, y, h);
        dnnl::lbr_gru_forward::primitive_desc fpd(fd, engine());
        dnnl::lbr_gru_backward::desc bd(bp, c.dir, x, h, wlAny, wiAny, b, y, h, x, h, dl, di, b, y, h);
        finish(fpd, dnnl::lbr_gru_backward::primitive_desc(bd, engine(), fpd));
        break;
      }
      case Cell::Lstm: {
        dnnl::lstm_forward::desc fd(fp, c.dir, x, h, h, wlAny, wiAny, p, b, y, h, h);
        dnnl::lstm_forward::primitive_desc fpd(fd, engine());
        dnnl::lstm_backward::desc bd(bp, c.dir, x, h, h, wlAny, wiAny, p, b, y, h, h, x, h, h, dl, di, p, b, y, h, h);
        finish(fpd, dnnl::lstm_backward::primitive_desc(bd, engine(), fpd));
        break;
      }
    }
  } catch (const dnnl::error&) {
    return decline();
  }
  return [st](ops::KernelContext& k) {
    const RnnConfig& c = st->c;
    const bool lstm = c.cell == Cell::Lstm;
    const size_t o = lstm ? 3 : 2;  // forward input i is input o + i
    const int64_t T = c.T, N = c.N, I = c.I, H = c.H, D = c.D, G = c.G, Gb = biasGates(c);
    if (c.seqLens) {
      const NDArray& s = k.input(o + 4);
      const int32_t* sp = s.data<int32_t>();
      for (int64_t i = 0; i < s.numel(); ++i)
        if (sp[i] != T) return st->fallback(k);  // shorter sequences: the reference masks them
    }
    setThreads(st->threads);
    packWeights(c, k.input(o + 1), k.input(o + 2), c.bias ? &k.input(o + 3) : nullptr,
                c.peephole ? &k.input(o + 7) : nullptr, st->wlPlain, st->wiPlain, st->bPlain, st->pPlain);
    const DataType f = DataType::Float;
    const Shape state{D, N, H};
    auto stateOr = [&](bool has, size_t i) { return has ? k.input(i) : NDArray(f, state); };
    NDArray h0 = stateOr(c.h0, o + 5), c0 = stateOr(c.c0, o + 6);
    NDArray y = NDArray::uninitialized(f, {T, N, D * H}), hT = NDArray::uninitialized(f, state),
            cT = NDArray::uninitialized(f, state);
    NDArray ws = NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(st->wsDesc.get_size())});
    memory wlF = st->fwdWl.get(st->wlPlain), wiF = st->fwdWi.get(st->wiPlain);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC_LAYER, wrap(st->xDesc, k.input(o))},
                                         {DNNL_ARG_SRC_ITER, wrap(st->hDesc, h0)},
                                         {DNNL_ARG_WEIGHTS_LAYER, wlF},
                                         {DNNL_ARG_WEIGHTS_ITER, wiF},
                                         {DNNL_ARG_BIAS, wrap(st->bDesc, st->bPlain)},
                                         {DNNL_ARG_DST_LAYER, wrap(st->yDesc, y)},
                                         {DNNL_ARG_DST_ITER, wrap(st->hDesc, hT)},
                                         {DNNL_ARG_WORKSPACE, wrap(st->wsDesc, ws)}};
    if (lstm) {
      args[DNNL_ARG_SRC_ITER_C] = wrap(st->hDesc, c0);
      args[DNNL_ARG_DST_ITER_C] = wrap(st->hDesc, cT);
    }
    if (c.peephole) args[DNNL_ARG_WEIGHTS_PEEPHOLE] = wrap(st->pDesc, st->pPlain);
    execute(st->fwd, args);

    // dY [T, D, N, H] -> oneDNN's [T, N, D*H] (the same bytes for one direction).
    NDArray dy;
    if (!k.hasInput(0)) {
      dy = NDArray(f, {T, N, D * H});
    } else if (D == 1) {
      dy = k.input(0);
    } else {
      dy = NDArray::uninitialized(f, {T, N, D * H});
      const float* src = k.input(0).data<float>();
      float* dst = dy.data<float>();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          for (int64_t bb = 0; bb < N; ++bb)
            std::memcpy(dst + (t * N + bb) * D * H + d * H, src + ((t * D + d) * N + bb) * H, H * sizeof(float));
    }
    NDArray dhT = k.hasInput(1) ? k.input(1) : NDArray(f, state);
    NDArray dcT = lstm && k.hasInput(2) ? k.input(2) : NDArray(f, state);
    auto out = [&](size_t i, Shape s) {
      return k.wantsOutput(i) ? k.allocOutputUninit(i, f, std::move(s)) : NDArray::uninitialized(f, std::move(s));
    };
    NDArray dx = out(0, {T, N, I}), dh0 = out(4, state), dc0 = lstm ? out(5, state) : NDArray(f, state);
    NDArray dwl(f, {D * I * G * H}), dwi(f, {D * H * G * H}), db(f, {D * Gb * H});
    NDArray dp = c.peephole ? NDArray(f, {D * 3 * H}) : NDArray();
    args[DNNL_ARG_WEIGHTS_LAYER] = st->bwdWl.get(st->wlPlain);
    args[DNNL_ARG_WEIGHTS_ITER] = st->bwdWi.get(st->wiPlain);
    args[DNNL_ARG_DIFF_SRC_LAYER] = wrap(st->xDesc, dx);
    args[DNNL_ARG_DIFF_SRC_ITER] = wrap(st->hDesc, dh0);
    args[DNNL_ARG_DIFF_WEIGHTS_LAYER] = wrap(st->dwlDesc, dwl);
    args[DNNL_ARG_DIFF_WEIGHTS_ITER] = wrap(st->dwiDesc, dwi);
    args[DNNL_ARG_DIFF_BIAS] = wrap(st->bDesc, db);
    args[DNNL_ARG_DIFF_DST_LAYER] = wrap(st->yDesc, dy);
    args[DNNL_ARG_DIFF_DST_ITER] = wrap(st->hDesc, dhT);
    if (lstm) {
      args[DNNL_ARG_DIFF_SRC_ITER_C] = wrap(st->hDesc, dc0);
      args[DNNL_ARG_DIFF_DST_ITER_C] = wrap(st->hDesc, dcT);
    }
    if (c.peephole) args[DNNL_ARG_DIFF_WEIGHTS_PEEPHOLE] = wrap(st->pDesc, dp);
    execute(st->bwd, args);

    // oneDNN's gradients back to ONNX's layouts and gate orders (the inverse of packWeights).
    auto map = gateMap(c.cell);
    if (k.wantsOutput(1) || k.wantsOutput(2)) {
      NDArray dwlUser = NDArray::uninitialized(f, {D * G * H * I}),
              dwiUser = NDArray::uninitialized(f, {D * G * H * H});
      execute(st->dwlToUser, {{DNNL_ARG_FROM, wrap(st->dwlDesc, dwl)}, {DNNL_ARG_TO, wrap(st->wlUser, dwlUser)}});
      execute(st->dwiToUser, {{DNNL_ARG_FROM, wrap(st->dwiDesc, dwi)}, {DNNL_ARG_TO, wrap(st->wiUser, dwiUser)}});
      dwl = dwlUser;
      dwi = dwiUser;
      NDArray& dW = k.allocOutputUninit(1, f, {D, G * H, I});
      NDArray& dR = k.allocOutputUninit(2, f, {D, G * H, H});
      const float *wlp = dwl.data<float>(), *wip = dwi.data<float>();
      float *dWp = dW.data<float>(), *dRp = dR.data<float>();
      for (int64_t d = 0; d < D; ++d)
        for (int64_t g = 0; g < G; ++g) {
          const int64_t to = d * G + g, from = d * G + map[g];
          std::memcpy(dWp + to * H * I, wlp + from * H * I, H * I * sizeof(float));
          std::memcpy(dRp + to * H * H, wip + from * H * H, H * H * sizeof(float));
        }
    }
    if (k.wantsOutput(3)) {
      NDArray& dB = k.allocOutputUninit(3, f, {D, 2 * G * H});
      const float* src = db.data<float>();
      float* dst = dB.data<float>();
      // Wb and Rb enter each gate summed: both get the gate's bias gradient (LBR-GRU's candidate
      // keeps them apart).
      for (int64_t d = 0; d < D; ++d)
        for (int64_t g = 0; g < G; ++g)
          for (int64_t hh = 0; hh < H; ++hh) {
            bool split = c.cell == Cell::LbrGru && g == 2;
            float wb = src[(d * Gb + map[g]) * H + hh], rb = split ? src[(d * Gb + 3) * H + hh] : wb;
            dst[d * 2 * G * H + g * H + hh] = wb;
            dst[d * 2 * G * H + (G + g) * H + hh] = rb;
          }
    }
    if (lstm && k.wantsOutput(6)) {
      // Like the reference: an absent P gets a zero gradient.
      NDArray& dP = k.allocOutput(6, f, {D, 3 * H});
      if (c.peephole) {
        static const int64_t kPeep[3] = {0, 2, 1};  // oneDNN i f o <- ONNX i o f
        const float* src = dp.data<float>();
        float* dst = dP.data<float>();
        for (int64_t d = 0; d < D; ++d)
          for (int64_t q = 0; q < 3; ++q)
            for (int64_t hh = 0; hh < H; ++hh) dst[d * 3 * H + kPeep[q] * H + hh] = src[(d * 3 + q) * H + hh];
      }
    }
  };
}

}  // namespace
}  // namespace graft::backends::cpu::onednn

GRAFT_REGISTER_CPU_KERNELS(onednn_rnn) {
  using namespace graft::backends::cpu::onednn;
  // RNN and LSTM honour bf16Compute() (the last field); oneDNN 2.6's bf16 GRU is only its
  // reference implementation, so GRU stays float32.
  r.add({"", "RNN", "onednn_rnn", supportsRnn, makeRnn, 0, true});
  r.add({"", "GRU", "onednn_gru", supportsRnn, makeRnn});
  r.add({"", "LSTM", "onednn_lstm", supportsRnn, makeRnn, 0, true});
  r.add({graft::ops::kGraftDomain, "RNNGrad", "onednn_rnn_grad", supportsRnn, makeRnnGrad});
  r.add({graft::ops::kGraftDomain, "GRUGrad", "onednn_gru_grad", supportsRnn, makeRnnGrad});
  r.add({graft::ops::kGraftDomain, "LSTMGrad", "onednn_lstm_grad", supportsRnn, makeRnnGrad});
}
