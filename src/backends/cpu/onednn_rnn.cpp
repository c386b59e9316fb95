// oneDNN recurrent layers for ai.onnx RNN, GRU and LSTM where oneDNN's cells compute ONNX's:
// float, layout 0 ([seq, batch, ...]), no clip, no input_forget, the default activations (RNN:
// one of Tanh, Relu, Sigmoid for every direction), forward, reverse and bidirectional.
// GRU's linear_before_reset=0 is oneDNN's GRU (its candidate bias is Wb_h + Rb_h),
// linear_before_reset=1 is oneDNN's LBR-GRU. LSTM peepholes are supported. sequence_lens with
// every length equal to seq_length runs here; other lengths (known only at run time) run the
// reference kernel.
//
// Weights are repacked from ONNX's [dirs, gates*hidden, in] (gates iofc for LSTM, zrh for GRU)
// into oneDNN's [layers, dirs, in, gates, hidden] (gates ifco for LSTM, urc for GRU), then
// reordered into the primitive's layout: once at compile time when W, R, B and P are constant,
// on every run otherwise.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "ops/registry.hpp"
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
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool hasShape(const ir::Node& n, size_t i, const Shape& s) { return isStaticFloat(n.input(i)) && n.input(i)->info().shape() == s; }

std::optional<RnnConfig> rnnConfig(const ir::Node& n) {
  if (!n.domain().empty()) return std::nullopt;
  RnnConfig c;
  if (n.type() == "RNN") c.cell = Cell::Rnn;
  else if (n.type() == "GRU") c.cell = n.attrInt("linear_before_reset", 0) ? Cell::LbrGru : Cell::Gru;
  else if (n.type() == "LSTM") c.cell = Cell::Lstm;
  else return std::nullopt;
  bool lstm = c.cell == Cell::Lstm;
  c.G = c.cell == Cell::Rnn ? 1 : lstm ? 4 : 3;
  if (n.attrInt("layout", 0) != 0 || n.attrs().has("clip") || n.attrInt("input_forget", 0) != 0) return std::nullopt;
  std::string dir = n.attrString("direction", "forward");
  c.D = dir == "bidirectional" ? 2 : 1;
  if (dir == "forward") c.dir = dnnl::rnn_direction::unidirectional_left2right;
  else if (dir == "reverse") c.dir = dnnl::rnn_direction::unidirectional_right2left;
  else if (dir == "bidirectional") c.dir = dnnl::rnn_direction::bidirectional_concat;
  else return std::nullopt;
  // Activations: the defaults, or for RNN one of tanh/relu/sigmoid shared by the directions.
  auto acts = n.attrStrings("activations", {});
  for (auto& a : acts) a = lower(a);
  std::vector<std::string> def = c.cell == Cell::Rnn ? std::vector<std::string>{"tanh"}
                                 : lstm             ? std::vector<std::string>{"sigmoid", "tanh", "tanh"}
                                                    : std::vector<std::string>{"sigmoid", "tanh"};
  if (acts.empty()) acts = def;
  if (acts.size() == def.size() * 2 && std::equal(acts.begin(), acts.begin() + def.size(), acts.begin() + def.size()))
    acts.resize(def.size());
  if (acts.size() != def.size()) return std::nullopt;
  if (c.cell == Cell::Rnn) {
    if (acts[0] == "tanh") c.act = dnnl::algorithm::eltwise_tanh;
    else if (acts[0] == "relu") c.act = dnnl::algorithm::eltwise_relu;
    else if (acts[0] == "sigmoid") c.act = dnnl::algorithm::eltwise_logistic;
    else return std::nullopt;
  } else if (acts != def) {
    return std::nullopt;
  }
  if (!isStaticFloat(n.input(0)) || !isStaticFloat(n.input(1)) || !isStaticFloat(n.input(2))) return std::nullopt;
  Shape x = n.input(0)->info().shape(), w = n.input(1)->info().shape(), r = n.input(2)->info().shape();
  if (x.size() != 3 || w.size() != 3 || r.size() != 3) return std::nullopt;
  c.T = x[0];
  c.N = x[1];
  c.I = x[2];
  c.H = r[2];
  if (c.T <= 0 || c.N <= 0 || c.I <= 0 || c.H <= 0) return std::nullopt;
  if (n.attrs().has("hidden_size") && n.attrInt("hidden_size") != c.H) return std::nullopt;
  if (w != Shape{c.D, c.G * c.H, c.I} || r != Shape{c.D, c.G * c.H, c.H}) return std::nullopt;
  c.bias = n.hasInput(3);
  if (c.bias && !hasShape(n, 3, {c.D, 2 * c.G * c.H})) return std::nullopt;
  c.seqLens = n.hasInput(4);
  if (c.seqLens) {
    const ir::Tensor* s = n.input(4);
    if (s->info().dataType() != DataType::Int32 || !s->info().isStatic() || s->info().shape() != Shape{c.N}) return std::nullopt;
  }
  c.h0 = n.hasInput(5);
  if (c.h0 && !hasShape(n, 5, {c.D, c.N, c.H})) return std::nullopt;
  c.c0 = lstm && n.hasInput(6);
  if (c.c0 && !hasShape(n, 6, {c.D, c.N, c.H})) return std::nullopt;
  c.peephole = lstm && n.hasInput(7);
  if (c.peephole && !hasShape(n, 7, {c.D, 3 * c.H})) return std::nullopt;
  if (n.numInputs() > (lstm ? 8u : 6u) || n.numOutputs() > (lstm ? 3u : 2u)) return std::nullopt;
  Shape yh{c.D, c.N, c.H};
  if (n.hasOutput(0) && (!isStaticFloat(n.output(0)) || n.output(0)->info().shape() != Shape{c.T, c.D, c.N, c.H}))
    return std::nullopt;
  for (size_t i = 1; i < n.numOutputs(); ++i)
    if (n.hasOutput(i) && (!isStaticFloat(n.output(i)) || n.output(i)->info().shape() != yh)) return std::nullopt;
  return c;
}

bool supportsRnn(const ir::Node& n) { return rnnConfig(n).has_value(); }

// oneDNN's gate of each ONNX gate.
std::vector<int64_t> gateMap(Cell cell) {
  if (cell == Cell::Lstm) return {0, 3, 1, 2};  // ONNX i o f c -> oneDNN i f c o
  if (cell == Cell::Rnn) return {0};
  return {0, 1, 2};  // z r h -> u r c
}

struct RnnState {
  RnnConfig c;
  dnnl::primitive prim;
  memory::desc xDesc, hDesc, yDesc, wlUser, wiUser, bDesc, pDesc;
  PackedOperand wl, wi;
  // Plain repacked weights (filled at compile time when constant, else each run).
  NDArray wlPlain, wiPlain, bPlain, pPlain;
  bool constant = false;
  ops::KernelFn fallback;
  int threads = 1;

  // ONNX W, R, B, P -> oneDNN ldigo weights, ldgo bias, peephole.
  void pack(const NDArray& W, const NDArray& R, const NDArray* B, const NDArray* P) {
    const int64_t D = c.D, G = c.G, H = c.H, I = c.I;
    auto map = gateMap(c.cell);
    const float* wp = W.data<float>();
    const float* rp = R.data<float>();
    float* wl = wlPlain.data<float>();
    float* wi = wiPlain.data<float>();
    for (int64_t d = 0; d < D; ++d)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t h = 0; h < H; ++h) {
          int64_t row = (d * G + g) * H + h, gd = map[g];
          for (int64_t i = 0; i < I; ++i) wl[((d * I + i) * G + gd) * H + h] = wp[row * I + i];
          for (int64_t j = 0; j < H; ++j) wi[((d * H + j) * G + gd) * H + h] = rp[row * H + j];
        }
    int64_t Gb = c.cell == Cell::LbrGru ? 4 : G;
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
};

ops::KernelFn makeRnn(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto cfg = rnnConfig(n);
  GRAFT_ASSERT(cfg, "{}: makeRnn on an unsupported node", n.describe());
  auto st = std::make_shared<RnnState>();
  RnnConfig& c = st->c;
  c = *cfg;
  st->threads = ctx.pool().numThreads();
  st->fallback = referenceKernel(ctx);
  setThreads(st->threads);
  auto f32 = memory::data_type::f32;
  using tag = memory::format_tag;
  int64_t Gb = c.cell == Cell::LbrGru ? 4 : c.G;
  st->xDesc = memory::desc({c.T, c.N, c.I}, f32, tag::tnc);
  st->hDesc = memory::desc({1, c.D, c.N, c.H}, f32, tag::ldnc);
  st->yDesc = memory::desc({c.T, c.N, c.D * c.H}, f32, tag::tnc);
  st->wlUser = memory::desc({1, c.D, c.I, c.G, c.H}, f32, tag::ldigo);
  st->wiUser = memory::desc({1, c.D, c.H, c.G, c.H}, f32, tag::ldigo);
  st->bDesc = memory::desc({1, c.D, Gb, c.H}, f32, tag::ldgo);
  st->pDesc = c.peephole ? memory::desc({1, c.D, 3, c.H}, f32, tag::ldgo) : memory::desc();
  st->wlPlain = NDArray(DataType::Float, {c.D * c.I * c.G * c.H});
  st->wiPlain = NDArray(DataType::Float, {c.D * c.H * c.G * c.H});
  st->bPlain = NDArray(DataType::Float, {c.D * Gb * c.H});
  if (c.peephole) st->pPlain = NDArray(DataType::Float, {c.D * 3 * c.H});
  memory::desc wlAny({1, c.D, c.I, c.G, c.H}, f32, tag::any), wiAny({1, c.D, c.H, c.G, c.H}, f32, tag::any);
  memory::desc h = st->hDesc;
  bool lstm = c.cell == Cell::Lstm;
  // Initial states default to zero (an empty descriptor), final ones are computed when read.
  memory::desc srcIter = c.h0 ? h : memory::desc(), srcIterC = c.c0 ? h : memory::desc();
  memory::desc dstIter = n.hasOutput(1) ? h : memory::desc(), dstIterC = lstm && n.hasOutput(2) ? h : memory::desc();
  auto prop = dnnl::prop_kind::forward_inference;
  const NDArray *W = ctx.constantInput(1), *R = ctx.constantInput(2), *B = c.bias ? ctx.constantInput(3) : nullptr,
                *P = c.peephole ? ctx.constantInput(7) : nullptr;
  st->constant = W && R && (!c.bias || B) && (!c.peephole || P);
  try {
    memory::desc wlWant, wiWant;
    switch (c.cell) {
      case Cell::Rnn: {
        dnnl::vanilla_rnn_forward::desc d(prop, c.act, c.dir, st->xDesc, srcIter, wlAny, wiAny, st->bDesc, st->yDesc, dstIter);
        dnnl::vanilla_rnn_forward::primitive_desc pd(d, engine());
        st->prim = dnnl::vanilla_rnn_forward(pd);
        wlWant = pd.weights_layer_desc();
        wiWant = pd.weights_iter_desc();
        break;
      }
      case Cell::Gru: {
        dnnl::gru_forward::desc d(prop, c.dir, st->xDesc, srcIter, wlAny, wiAny, st->bDesc, st->yDesc, dstIter);
        dnnl::gru_forward::primitive_desc pd(d, engine());
        st->prim = dnnl::gru_forward(pd);
        wlWant = pd.weights_layer_desc();
        wiWant = pd.weights_iter_desc();
        break;
      }
      case Cell::LbrGru: {
        dnnl::lbr_gru_forward::desc d(prop, c.dir, st->xDesc, srcIter, wlAny, wiAny, st->bDesc, st->yDesc, dstIter);
        dnnl::lbr_gru_forward::primitive_desc pd(d, engine());
        st->prim = dnnl::lbr_gru_forward(pd);
        wlWant = pd.weights_layer_desc();
        wiWant = pd.weights_iter_desc();
        break;
      }
      case Cell::Lstm: {
        dnnl::lstm_forward::desc d(prop, c.dir, st->xDesc, srcIter, srcIterC, wlAny, wiAny, st->pDesc, st->bDesc,
                                   st->yDesc, dstIter, dstIterC);
        dnnl::lstm_forward::primitive_desc pd(d, engine());
        st->prim = dnnl::lstm_forward(pd);
        wlWant = pd.weights_layer_desc();
        wiWant = pd.weights_iter_desc();
        break;
      }
    }
    if (st->constant) st->pack(*W, *R, B, P);
    st->wl.init(st->wlUser, wlWant, st->constant ? &st->wlPlain : nullptr);
    st->wi.init(st->wiUser, wiWant, st->constant ? &st->wiPlain : nullptr);
  } catch (const dnnl::error&) {
    return st->fallback;
  }
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
    NDArray yScratch, hScratch, cScratch;
    NDArray* y = nullptr;
    // Y is [T, D, N, H]; oneDNN writes [T, N, D*H]: the same bytes for one direction.
    if (k.wantsOutput(0) && c.D == 1) y = &k.allocOutputUninit(0, DataType::Float, {c.T, 1, c.N, c.H});
    else yScratch = NDArray::uninitialized(DataType::Float, {c.T, c.N, c.D * c.H});
    const NDArray& yArr = y ? *y : yScratch;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC_LAYER, wrap(st->xDesc, k.input(0))},
                                         {DNNL_ARG_WEIGHTS_LAYER, st->wl.get(st->wlPlain)},
                                         {DNNL_ARG_WEIGHTS_ITER, st->wi.get(st->wiPlain)},
                                         {DNNL_ARG_BIAS, wrap(st->bDesc, st->bPlain)},
                                         {DNNL_ARG_DST_LAYER, wrap(st->yDesc, yArr)}};
    if (c.h0) args[DNNL_ARG_SRC_ITER] = wrap(st->hDesc, k.input(5));
    if (c.c0) args[DNNL_ARG_SRC_ITER_C] = wrap(st->hDesc, k.input(6));
    if (c.peephole) args[DNNL_ARG_WEIGHTS_PEEPHOLE] = wrap(st->pDesc, st->pPlain);
    if (k.wantsOutput(1)) args[DNNL_ARG_DST_ITER] = wrap(st->hDesc, k.allocOutputUninit(1, DataType::Float, {c.D, c.N, c.H}));
    if (lstm && k.wantsOutput(2))
      args[DNNL_ARG_DST_ITER_C] = wrap(st->hDesc, k.allocOutputUninit(2, DataType::Float, {c.D, c.N, c.H}));
    execute(st->prim, args);
    if (k.wantsOutput(0) && c.D == 2) {
      NDArray& out = k.allocOutputUninit(0, DataType::Float, {c.T, 2, c.N, c.H});
      const float* src = yScratch.data<float>();
      float* dst = out.data<float>();
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t d = 0; d < 2; ++d)
          for (int64_t b = 0; b < c.N; ++b)
            std::memcpy(dst + ((t * 2 + d) * c.N + b) * c.H, src + (t * c.N + b) * 2 * c.H + d * c.H, c.H * sizeof(float));
    }
  };
}

}  // namespace
}  // namespace graft::backends::cpu::onednn

GRAFT_REGISTER_CPU_KERNELS(onednn_rnn) {
  using namespace graft::backends::cpu::onednn;
  r.add({"", "RNN", "onednn_rnn", supportsRnn, makeRnn});
  r.add({"", "GRU", "onednn_gru", supportsRnn, makeRnn});
  r.add({"", "LSTM", "onednn_lstm", supportsRnn, makeRnn});
}
