// Convolution chains: the cpu-conv-chains pass and the kernel of ai.graft::FusedConvChain.
//
// An inverted-residual block (mobilenet_v2: a 1x1 expansion, a 3x3 depthwise convolution, a 1x1
// projection) run node by node writes its expanded activation to memory and reads it back: at
// 112x112x96 that is 4.8 MB an image, beyond the caches, and the block is bound by memory (on the
// half-rate AVX-512 EPYC, graft's three convolutions of mobilenet_v2's second block took 8.3 ms at
// batch 8, for 0.4 GFLOP). The pass joins such runs of channels-last FusedConvs into one
// FusedConvChain, and its kernel runs the stages one tile of output rows at a time: each stage's
// rows for the tile go to a small per-thread buffer that the next stage reads from the cache. The
// tiles (image, band of rows) are claimed one by one by the pool's threads.
//
// A chain: FusedConvs in a row, each intermediate read only by the next stage (as its X), float32,
// 2-D, channels last (the cpu-layout pass's x_block = C), constant weights and biases, no
// Winograd; at most two stages are spatial (a kernel, stride or padding other than 1x1/1/0), the
// second right after the first (mobilenet_v2's stem and the depthwise convolution after it), at
// most one pointwise stage follows them, and only the last stage may add a residual (Sum). A tile
// computes each stage's rows backwards from the last stage's (stageRows): the stages before a
// spatial one recompute its halo rows, 2 rows of the expansion per tile of an inverted residual
// block, and of the stem with two spatial stages. The pass fuses
// a chain where an intermediate holds at least kChainMinBytes an image (smaller ones stay in the
// cache anyway: mobilenet_v2's 28x28 blocks gained nothing); GRAFT_CONV_CHAINS=off leaves every
// chain, =on fuses every one (tests), auto (the default) as said.
//
// Each stage's fused activation is its FusedConv's: a oneDNN post-op where that keeps NaN, else
// graft's own pass (fused_activation.hpp) over the tile's rows, while they are in the cache.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/fused_activation.hpp"
#include "backends/cpu/onednn_conv.hpp"
#include "ops/conv_chain.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/fuse_util.hpp"
#include "passes/pass.hpp"
#include "support/check.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends::cpu::onednn {

namespace {

// GRAFT_CONV_CHAINS: off, auto (the default: the chains whose intermediates hold at least
// kChainMinBytes an image) or on (every chain).
KernelMode convChainMode() { return kernelModeFromEnv("GRAFT_CONV_CHAINS"); }

constexpr int64_t kChainMinBytes = int64_t{1} << 20;
// Spatial stages a chain may have (each one before the last recomputes its halo rows per tile).
constexpr int kChainMaxSpatial = 2;
// A tile's rows of one stage's output (its per-thread buffer) hold at most this many bytes.
constexpr int64_t kChainTileBytes = int64_t{384} << 10;

// Whether stage c moves rows: a kernel, stride or padding other than 1x1 / 1 / 0.
bool isSpatial(const ConvConfig& c) {
  for (size_t d = 0; d < 2; ++d)
    if (c.win.kernel[d] != 1 || c.win.strides[d] != 1 || c.win.padBegin[d] != 0 || c.win.padEnd[d] != 0) return true;
  return false;
}

// The input rows `rows` output rows of c read, padding included.
int64_t inputRows(const ConvConfig& c, int64_t rows) {
  return (rows - 1) * c.win.strides[0] + (c.win.kernel[0] - 1) * (c.win.dilation[0] + 1) + 1;
}

// The rows of one stage's input and output a tile of the chain computes, with the padding rows
// its primitive adds (a spatial stage at the top or bottom of the image).
struct StageRows {
  int64_t x0 = 0, x1 = 0, y0 = 0, y1 = 0, padTop = 0, padBottom = 0;
};

// For the last stage's output rows [a, b): every stage's rows, last to first (each stage's
// output rows are the next one's input rows: its halo included, within the image); nullopt where
// a stage would read no row.
std::optional<std::vector<StageRows>> stageRows(const std::vector<ConvConfig>& stages, int64_t a, int64_t b) {
  std::vector<StageRows> rows(stages.size());
  for (size_t i = stages.size(); i-- > 0;) {
    const ConvConfig& c = stages[i];
    StageRows& r = rows[i];
    r.y0 = a;
    r.y1 = b;
    if (isSpatial(c)) {
      const int64_t first = a * c.win.strides[0] - c.win.padBegin[0], last = first + inputRows(c, b - a);
      r.x0 = std::max<int64_t>(0, first);
      r.x1 = std::min(c.x[2], last);
      if (r.x1 <= r.x0) return std::nullopt;
      r.padTop = r.x0 - first;
      r.padBottom = last - r.x1;
    } else {
      r.x0 = a;
      r.x1 = b;
    }
    a = r.x0;
    b = r.x1;
  }
  return rows;
}

// The rows of the last stage's output a tile of the chain `stages` holds (>= 1): as many as keep
// every intermediate's rows (the halo the spatial stages after it need included) under
// kChainTileBytes in every tile.
int64_t chainTileRows(const std::vector<ConvConfig>& stages) {
  const int64_t OH = stages.back().y[2];
  for (int64_t rows = OH; rows > 1; --rows) {
    bool fits = true;
    for (int64_t a = 0; a < OH && fits; a += rows) {
      auto r = stageRows(stages, a, std::min(OH, a + rows));
      for (size_t i = 0; r && i + 1 < stages.size() && fits; ++i)
        fits = ((*r)[i].y1 - (*r)[i].y0) * stages[i].y[3] * stages[i].y[1] * static_cast<int64_t>(sizeof(float)) <=
               kChainTileBytes;
    }
    if (fits) return rows;
  }
  return 1;
}

// The layout and types every stage has: 2-D, channels last (cpu-layout's x_block = C), float32,
// with a bias.
bool channelsLastFloatStage(const ConvConfig& c) {
  return c.x.size() == 4 && c.xBlock == c.x[1] && c.yBlock == c.y[1] && c.xType == memory::data_type::f32 &&
         c.yType == memory::data_type::f32 && c.bias;
}

// A FusedConv that can be a stage of a chain: its configuration, else nullopt.
std::optional<ConvConfig> stageConfig(const ir::Node* n, const passes::PassContext& ctx) {
  if (!passes::fuse::isGraftOp(n, "FusedConv") || n->numOutputs() != 1 || n->attrInt("winograd", 0) == 1)
    return std::nullopt;
  auto c = convConfig(*n);
  if (!c || !channelsLastFloatStage(*c) || c->win.dilation != Dims{0, 0}) return std::nullopt;
  if (c->group != 1 && !isDepthwise(*c)) return std::nullopt;
  if (!passes::fuse::isConstant(n->input(1), ctx) || !passes::fuse::isConstant(n->input(2), ctx)) return std::nullopt;
  return c;
}

class CpuConvChains : public passes::Pass {
 public:
  explicit CpuConvChains(bool bf16 = false) : bf16_(bf16) {}
  std::string_view name() const override { return bf16_ ? "cpu-conv-chains-bf16" : "cpu-conv-chains"; }
  bool run(ir::Graph& g, passes::PassContext& ctx) override {
    const KernelMode mode = convChainMode();
    if (mode == KernelMode::Off) return false;
    // Collected first, then replaced (replacing deletes nodes of the schedule).
    std::vector<std::vector<ir::Node*>> chains;
    std::set<const ir::Node*> taken;
    for (ir::Node* n : g.schedule()) {
      if (taken.count(n)) continue;
      auto first = stageConfig(n, ctx);
      if (!first) continue;
      std::vector<ir::Node*> chain{n};
      std::vector<ConvConfig> cfgs{*first};
      int spatial = isSpatial(*first) ? 1 : 0, after = 0;
      while (!cfgs.back().sum) {
        ir::Tensor* t = chain.back()->output(0);
        ir::Node* next = t->isGraphOutput() ? nullptr : passes::fuse::soleConsumer(t);
        auto c = next && next->input(0) == t ? stageConfig(next, ctx) : std::nullopt;
        if (!c || c->x[0] != first->x[0]) break;
        // At most two spatial stages, the second right after the first (a stem and the depthwise
        // convolution after it), and at most one pointwise stage after them.
        const bool s = isSpatial(*c);
        if (after >= 1 || (s && spatial == kChainMaxSpatial)) break;
        if (s)
          ++spatial;
        else if (spatial)
          ++after;
        chain.push_back(next);
        cfgs.push_back(*c);
      }
      if (chain.size() < 2 || (mode == KernelMode::Auto && !gains(cfgs))) continue;
      // A bf16 backend runs the chain in float32: only where a stage is depthwise (float32 there
      // anyway). resnet50 b8's one chain (layer2.0: 1x1, 3x3 of stride 2, 1x1) cost 160 -> 185 ms
      // a step so; mobilenet_v2 b8's gained 30.9 -> 25.4.
      if (bf16_ && std::none_of(cfgs.begin(), cfgs.end(), isDepthwise)) continue;
      taken.insert(chain.begin(), chain.end());
      chains.push_back(std::move(chain));
    }
    for (const auto& chain : chains) {
      ir::Node* last = chain.back();
      std::vector<ir::Tensor*> ins{chain.front()->input(0), last->hasInput(3) ? last->input(3) : nullptr};
      ir::Attributes attrs;
      attrs.set("stages", static_cast<int64_t>(chain.size()));
      for (size_t i = 0; i < chain.size(); ++i) {
        ins.push_back(chain[i]->input(1));
        ins.push_back(chain[i]->input(2));
        for (const auto& [name, value] : chain[i]->attrs().all())
          attrs.set(ops::convChainAttrName(static_cast<int64_t>(i), name), value);
      }
      ir::Node* fused = passes::fuse::replaceChain(g, chain, "FusedConvChain", ins, std::move(attrs));
      ops::inferNode(*fused, ctx.weightsAreConstant);
    }
    return !chains.empty();
  }

 private:
  bool bf16_;
  // Whether an intermediate of the chain holds at least kChainMinBytes an image.
  static bool gains(const std::vector<ConvConfig>& cfgs) {
    for (size_t i = 0; i + 1 < cfgs.size(); ++i)
      if (cfgs[i].y[1] * cfgs[i].y[2] * cfgs[i].y[3] * static_cast<int64_t>(sizeof(float)) >= kChainMinBytes)
        return true;
    return false;
  }
};

// ---- the kernel ---------------------------------------------------------------------------

struct ChainState {
  struct Stage {
    ConvConfig c;
    memory::desc biasDesc;
    ActivationFn act;   // applied after the primitive, over the tile's rows
    size_t buffer = 0;  // offset of its output rows in a task's buffer (floats; not the last stage)
  };
  // One primitive per distinct band geometry of a stage.
  struct Prim {
    dnnl::primitive prim;
    memory::desc x, y;
    size_t weights = 0;
    memory::desc scratch;
  };
  struct Weights {
    size_t stage = 0;
    memory::desc layout;
    PackedOperand packed;
  };
  // A stage's work in a tile: primitive, its input rows from xRow (of the stage's input: the
  // chain's X for stage 0, the task's buffer otherwise) and output rows from yRow (of Y for the
  // last stage; the buffer starts at the tile's first row otherwise).
  struct Step {
    size_t prim = 0;
    int64_t xRow = 0, yRow = 0, yRows = 0;
  };
  std::vector<Stage> stages;
  std::vector<Prim> prims;
  std::vector<Weights> weights;
  std::vector<std::vector<Step>> tiles;  // [tile][stage]
  int64_t images = 0;
  size_t bufferFloats = 0, scratchBytes = 0;
  std::vector<NDArray> buffers, scratch;  // one each per task
  Shape yShape;
  bool sum = false;
  int threads = 1;
};

ops::KernelFn makeConvChain(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  const int64_t count = ops::convChainStages(n);
  // The stages as FusedConv nodes of a stand-in graph, for their configurations and post-ops.
  std::vector<ir::ValueType> types;
  for (size_t i = 0; i < n.numInputs(); ++i) types.push_back(n.hasInput(i) ? ctx.inputType(i) : ir::ValueType{});
  ir::Graph g(n.type());
  std::vector<ir::Node*> stageNodes = ops::buildConvChain(n, g, types);
  auto st = std::make_shared<ChainState>();
  st->threads = ctx.pool().numThreads();
  st->sum = n.hasInput(ops::kChainSum);
  st->yShape = n.output(0)->info().shape();
  std::vector<const NDArray*> constW;
  for (int64_t i = 0; i < count; ++i) {
    auto c = convConfig(*stageNodes[static_cast<size_t>(i)]);
    const NDArray* w = ctx.constantInput(ops::chainWeightInput(i));
    if (!c || !w || !channelsLastFloatStage(*c)) return decline();
    ChainState::Stage s;
    s.c = *c;
    s.biasDesc = plainDesc({c->w[0]});
    if (activationAfterPrimitive(*stageNodes[static_cast<size_t>(i)]))
      s.act = fusedActivation(*stageNodes[static_cast<size_t>(i)]);
    st->stages.push_back(std::move(s));
    constW.push_back(w);
  }
  std::vector<ConvConfig> cfgs;
  for (const auto& s : st->stages) cfgs.push_back(s.c);
  const int64_t tileRows = chainTileRows(cfgs);
  const ConvConfig& lastCfg = cfgs.back();
  const int64_t OH = lastCfg.y[2];
  st->images = lastCfg.y[0];

  // The tiles' geometry; primitives made once per distinct (stage, rows in, rows out, pads).
  std::map<std::tuple<size_t, int64_t, int64_t, int64_t, int64_t>, size_t> primOf;
  std::vector<int64_t> bufferRows(cfgs.size(), 0);
  setThreads(1);  // each primitive runs on one thread
  try {
    for (int64_t a = 0; a < OH; a += tileRows) {
      auto rows = stageRows(cfgs, a, std::min(OH, a + tileRows));
      if (!rows) throw dnnl::error(dnnl_unimplemented, "a stage reads no row");
      std::vector<ChainState::Step> steps;
      for (size_t i = 0; i < cfgs.size(); ++i) {
        const StageRows& r = (*rows)[i];
        ConvConfig bc = cfgs[i];
        bc.x[0] = bc.y[0] = 1;
        bc.x[2] = r.x1 - r.x0;
        bc.y[2] = r.y1 - r.y0;
        bc.win.out[0] = r.y1 - r.y0;
        bc.win.padBegin[0] = r.padTop;
        bc.win.padEnd[0] = r.padBottom;
        auto key = std::make_tuple(i, bc.x[2], bc.y[2], bc.win.padBegin[0], bc.win.padEnd[0]);
        auto found = primOf.find(key);
        if (found == primOf.end()) {
          ChainState::Prim p;
          p.x = layoutDesc(bc.x, static_cast<int>(bc.x[1]));
          p.y = layoutDesc(bc.y, static_cast<int>(bc.y[1]));
          dnnl::primitive_attr attr = postOpsAttr(*stageNodes[i], bc);
          attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
          memory::desc wAny(weightDims(bc.w, bc.group), memory::data_type::f32, memory::format_tag::any);
          using CF = dnnl::convolution_forward;
          CF::primitive_desc pd(forwardDesc(bc, p.x, wAny, &st->stages[i].biasDesc, p.y), attr, engine());
          if (isReferenceImplementation(pd.impl_info_str())) throw dnnl::error(dnnl_unimplemented, "reference kernel");
          if (i == 0 && st->prims.empty()) noteImplementation(pd.impl_info_str());
          p.prim = CF(pd);
          p.scratch = pd.scratchpad_desc();
          st->scratchBytes = std::max(st->scratchBytes, p.scratch.get_size());
          auto same = std::find_if(st->weights.begin(), st->weights.end(), [&](const ChainState::Weights& w) {
            return w.stage == i && w.layout == pd.weights_desc();
          });
          p.weights = static_cast<size_t>(same - st->weights.begin());
          if (same == st->weights.end()) {
            st->weights.push_back({i, pd.weights_desc(), {}});
            st->weights.back().packed.init(plainWeights(bc.w, bc.group), pd.weights_desc(), constW[i]);
          }
          found = primOf.emplace(key, st->prims.size()).first;
          st->prims.push_back(std::move(p));
        }
        steps.push_back({found->second, r.x0, r.y0, r.y1 - r.y0});
        bufferRows[i] = std::max(bufferRows[i], r.y1 - r.y0);
      }
      st->tiles.push_back(std::move(steps));
    }
  } catch (const dnnl::error&) {
    setThreads(st->threads);
    return decline();
  }
  setThreads(st->threads);
  for (size_t i = 0; i + 1 < cfgs.size(); ++i) {
    st->stages[i].buffer = st->bufferFloats;
    st->bufferFloats += static_cast<size_t>(bufferRows[i] * cfgs[i].y[3] * cfgs[i].y[1]);
  }
  for (int t = 0; t < st->threads; ++t) {
    st->buffers.push_back(NDArray::uninitialized(DataType::Float, {static_cast<int64_t>(st->bufferFloats)}));
    st->scratch.push_back(NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(st->scratchBytes)}));
  }
  noteImplementation(fmt::format("{}, {} stages in tiles of {} rows", takeImplementation(), count, tileRows));

  return [st](ops::KernelContext& k) {
    const NDArray& x = k.input(ops::kChainX);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, st->yShape);
    const float* sum = st->sum ? k.input(ops::kChainSum).data<float>() : nullptr;
    const int64_t tiles = static_cast<int64_t>(st->tiles.size()), total = st->images * tiles;
    const size_t last = st->stages.size() - 1;
    const ConvConfig& first = st->stages.front().c;
    const ConvConfig& lastCfg = st->stages.back().c;
    const int64_t xImage = first.x[1] * first.x[2] * first.x[3], yImage = lastCfg.y[1] * lastCfg.y[2] * lastCfg.y[3];
    std::atomic<int64_t> next{0};
    auto* xp = const_cast<float*>(x.data<float>());
    float* yp = y.data<float>();
    k.pool().runTasks(st->threads, [&](int task) {
      setThreads(1);
      float* buffer = st->buffers[static_cast<size_t>(task)].data<float>();
      NDArray& scratch = st->scratch[static_cast<size_t>(task)];
      for (int64_t w = next.fetch_add(1); w < total; w = next.fetch_add(1)) {
        const int64_t image = w / tiles;
        const auto& steps = st->tiles[static_cast<size_t>(w % tiles)];
        for (size_t i = 0; i <= last; ++i) {
          const ChainState::Stage& s = st->stages[i];
          const ChainState::Step& step = steps[i];
          const ChainState::Prim& p = st->prims[step.prim];
          const int64_t rowIn = s.c.x[3] * s.c.x[1], rowOut = s.c.y[3] * s.c.y[1];
          float* src = i == 0 ? xp + image * xImage + step.xRow * rowIn : buffer + st->stages[i - 1].buffer;
          if (i > 0 && steps[i - 1].yRow != step.xRow) src += (step.xRow - steps[i - 1].yRow) * rowIn;
          float* dst = i == last ? yp + image * yImage + step.yRow * rowOut : buffer + s.buffer;
          if (i == last && sum)
            std::memcpy(dst, sum + (dst - yp), sizeof(float) * static_cast<size_t>(step.yRows * rowOut));
          std::unordered_map<int, memory> args{
              {DNNL_ARG_SRC, memory(p.x, engine(), src)},
              {DNNL_ARG_WEIGHTS,
               st->weights[p.weights].packed.get(k.input(ops::chainWeightInput(static_cast<int64_t>(i))))},
              {DNNL_ARG_BIAS, wrap(s.biasDesc, k.input(ops::chainBiasInput(static_cast<int64_t>(i))))},
              {DNNL_ARG_DST, memory(p.y, engine(), dst)}};
          if (scratch.numel() > 0) args[DNNL_ARG_SCRATCHPAD] = wrap(p.scratch, scratch);
          execute(p.prim, args);
          if (s.act) s.act(k.pool(), dst, step.yRows * rowOut);
        }
      }
    });
    setThreads(st->threads);
  };
}

bool supportsConvChain(const ir::Node& n) {
  if (n.numOutputs() != 1 || !n.output(0) || !isStaticFloat(n.output(0)) || !isStaticFloat(n.input(0))) return false;
  return !n.hasInput(ops::kChainSum) || isStaticFloat(n.input(ops::kChainSum));
}

}  // namespace

GRAFT_REGISTER_PASS("cpu-conv-chains", CpuConvChains);

// bf16 backends: the chains with a depthwise stage only (above).
class CpuConvChainsBf16 : public CpuConvChains {
 public:
  CpuConvChainsBf16() : CpuConvChains(true) {}
};
GRAFT_REGISTER_PASS("cpu-conv-chains-bf16", CpuConvChainsBf16);

}  // namespace graft::backends::cpu::onednn

GRAFT_REGISTER_CPU_KERNELS(onednn_conv_chain) {
  using namespace graft::backends::cpu::onednn;
  r.add({graft::ops::kGraftDomain, "FusedConvChain", "onednn_conv_chain", supportsConvChain, makeConvChain});
}
