// oneDNN convolutions: ai.onnx Conv and ConvTranspose, ai.graft FusedConv (bias, residual sum
// and activation as post-ops, activations optionally channel-blocked), and Conv's backward pass
// (ai.graft ConvGradInput, ConvGradWeight). Float only; 1-D to
// 3-D; any pads, strides, dilations and groups. Primitives and packed weights are made at
// compile time; combinations oneDNN has no implementation for run the reference kernel.
// Under bf16Compute() (SessionOptions.enableBf16) every one of them reads bf16 operands (the
// float32 activations converted where they enter, weights once when constant) and accumulates
// and writes float32; float32 where oneDNN has no fast bf16 implementation for the node. A
// FusedConv's X, Sum and Y may also be bf16 tensors (y_dtype; the cpu-bf16-activations pass):
// read and written as they are by a bf16 primitive, converted at the node by a float32 one.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/fused_activation.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/onednn_conv.hpp"
#include "backends/cpu/vec_common.hpp"
#include "ops/conv_util.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/cpu_features.hpp"
#include "support/spin_team.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends::cpu::onednn {
namespace {

// Why a depthwise convolution stays float32 under enableBf16 (the recorded implementation says it).
constexpr const char* kDepthwiseStaysF32 = "depthwise convolutions stay float32 (bound by memory, not FMAs)";

Shape spatial(const Shape& s) { return Shape(s.begin() + 2, s.end()); }

// A FusedConv's activations (X, Sum, Y) may be float32 or bf16 tensors.
std::optional<memory::data_type> activationType(const ir::Tensor* t, bool fused) {
  if (isStaticFloat(t)) return memory::data_type::f32;
  if (fused && t && t->type().isTensor() && t->info().isStatic() && t->info().dataType() == DataType::BFloat16)
    return memory::data_type::bf16;
  return std::nullopt;
}

}  // namespace

std::optional<ConvConfig> convConfig(const ir::Node& n) {
  bool fused = n.domain() == ops::kGraftDomain;
  auto xType = activationType(n.input(0), fused), yType = activationType(n.output(0), fused);
  if (!xType || !isStaticFloat(n.input(1)) || !yType) return std::nullopt;
  if (n.numOutputs() != 1) return std::nullopt;
  ConvConfig c;
  c.xType = *xType;
  c.yType = *yType;
  c.group = n.attrInt("group", 1);
  c.xBlock = fused ? static_cast<int>(n.attrInt("x_block", 0)) : 0;
  c.yBlock = fused ? static_cast<int>(n.attrInt("y_block", 0)) : 0;
  c.w = n.input(1)->info().shape();
  if (c.w.size() < 3 || c.w.size() > 5 || c.group < 1 || c.w[0] % c.group != 0 || c.w[0] == 0) return std::nullopt;
  Shape xp = n.input(0)->info().shape();
  if (c.xBlock) {
    if (xp.size() != c.w.size() + 1 || xp.back() != c.xBlock) return std::nullopt;
    c.x = unblockedShape(xp, c.w[1] * c.group);
    if (blockedShape(c.x, c.xBlock) != xp) return std::nullopt;
  } else {
    c.x = xp;
  }
  if (c.x.size() != c.w.size() || c.x[1] != c.w[1] * c.group || c.x[0] == 0) return std::nullopt;
  Shape kernel = spatial(c.w);
  auto ks = n.attrInts("kernel_shape", {});
  if (!ks.empty() && Shape(ks.begin(), ks.end()) != kernel) return std::nullopt;
  auto win = resolveWindow(n, spatial(c.x), kernel);
  if (!win) return std::nullopt;
  c.win = *win;
  c.y = {c.x[0], c.w[0]};
  c.y.insert(c.y.end(), c.win.out.begin(), c.win.out.end());
  if (n.output(0)->info().shape() != (c.yBlock ? blockedShape(c.y, c.yBlock) : c.y)) return std::nullopt;
  if (n.hasInput(2)) {
    if (!isStaticFloat(n.input(2)) || n.input(2)->info().shape() != Shape{c.w[0]}) return std::nullopt;
    c.bias = true;
  }
  if (fused && n.hasInput(3)) {
    if (activationType(n.input(3), fused) != c.yType || n.input(3)->info().shape() != n.output(0)->info().shape())
      return std::nullopt;
    c.sum = true;
  }
  if (n.numInputs() > (fused ? 4u : 3u)) return std::nullopt;
  if (fused) {
    dnnl::post_ops po;
    if (!appendActivation(n, po)) return std::nullopt;
  }
  return c;
}

namespace {

bool supportsConv(const ir::Node& n) { return convConfig(n).has_value(); }

}  // namespace

Dims weightDims(const Shape& w, int64_t group) {
  Dims d(w.begin(), w.end());
  if (group == 1) return d;
  d[0] /= group;
  d.insert(d.begin(), group);
  return d;
}

memory::desc plainWeights(const Shape& w, int64_t group) {
  Dims d = weightDims(w, group);
  Dims strides(d.size(), 1);
  for (int64_t i = static_cast<int64_t>(d.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * d[i + 1];
  return memory::desc(d, memory::data_type::f32, strides);
}

namespace {

struct ConvState {
  dnnl::primitive prim;
  PackedOperand weights;
  memory::desc biasDesc;
  Adapter src, dst;
  Shape yShape;
  DataType yType = DataType::Float;
  bool bias = false, sum = false;
  int threads = 1;
  ActivationFn act;       // applied after the primitive (activationAfterPrimitive), in each band where bands run
  bool reluBf16 = false;  // Relu after the primitive on a bf16 Y (reluBf16InPlace)
  // A channel-blocked output whose last block of channels is partial: its padding lanes (from
  // padLanes on) are zeroed after the primitive and the activation.
  int64_t padRows = 0, padBlock = 0, padLanes = 0, padSpatial = 0, padBlocks = 0;
  // Row bands (makeBands): single-threaded primitives over bands of output rows, run as the tasks
  // of the pool's spin team instead of `prim`'s OpenMP region.
  struct Band {
    dnnl::primitive prim;
    memory::desc x, y;
    int64_t xOffset = 0, yOffset = 0;  // in elements
    size_t weights = 0;                // into bandWeights (bands with the same layout share one)
    NDArray scratch;                   // the primitive's scratchpad (user mode: one per band)
    memory::desc scratchDesc;
  };
  std::vector<Band> bands;
  struct BandWeights {
    memory::desc layout;
    PackedOperand packed;
  };
  std::vector<BandWeights> bandWeights;
  // A Winograd primitive's direct twin, which runs instead where X (or a W not known at compile
  // time) holds a NaN or an infinity: oneDNN's Winograd transforms spread a non-finite input over
  // its whole output tile (inf - inf, x * 0), where the direct sums keep it to the windows that
  // hold it (the backend cases' *_bands_*_special_values). Its weights are packed at each such run.
  std::shared_ptr<ConvState> direct;
  bool wNonFinite = false;  // a constant W with a NaN or an infinity: always the direct twin
};

// Zeroes the padding lanes of a channel-blocked output [N, Cb, S..., b]. oneDNN computes them as
// the sum of inputs times zero weights, which is NaN where the window holds NaN or ±inf (its
// fused Relu used to hide that), and an activation with f(0) != 0 would make them nonzero: the
// layouts graft's blocked kernels read keep them zero.
void rezeroPadding(const ConvState& st, float* y) {
  for (int64_t i = 0; i < st.padRows; ++i) {
    float* last = y + (i * st.padBlocks + st.padBlocks - 1) * st.padSpatial * st.padBlock;
    for (int64_t s = 0; s < st.padSpatial; ++s)
      for (int64_t l = st.padLanes; l < st.padBlock; ++l) last[s * st.padBlock + l] = 0.f;
  }
}

// Relu's formula (x < 0 ? 0 : x: NaN and -0 kept) over n bf16 values in place: the negative
// finite values and -inf become +0.
void reluBf16InPlace(support::ThreadPool& pool, uint16_t* y, int64_t n) {
  pool.parallelFor(n, 1 << 14, [y](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint16_t v = y[i];
      uint16_t mag = v & 0x7fffu;
      bool negative = (v & 0x8000u) && static_cast<uint16_t>(mag - 1u) < 0x7f80u;
      y[i] = negative ? uint16_t{0} : v;
    }
  });
}

}  // namespace

bool isDepthwise(const ConvConfig& c) { return c.group > 1 && c.group == c.x[1] && c.group == c.y[1]; }

dnnl::primitive_attr postOpsAttr(const ir::Node& n, const ConvConfig& c) {
  dnnl::post_ops po;
  if (c.sum) po.append_sum(1.f);
  if (n.domain() == ops::kGraftDomain) appendActivation(n, po);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  return attr;
}

dnnl::convolution_forward::desc forwardDesc(const ConvConfig& c, const memory::desc& x, const memory::desc& w,
                                            const memory::desc* bias, const memory::desc& y, bool winograd) {
  using CF = dnnl::convolution_forward;
  auto prop = dnnl::prop_kind::forward_inference;
  auto alg = winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
  return bias ? CF::desc(prop, alg, x, w, *bias, y, c.win.strides, c.win.dilation, c.win.padBegin, c.win.padEnd)
              : CF::desc(prop, alg, x, w, y, c.win.strides, c.win.dilation, c.win.padBegin, c.win.padEnd);
}

namespace {

// Winograd convolutions (oneDNN's F(4x4, 3x3) / F(2x2, 3x3) kernels, AVX-512 only; float32),
// under winogradMode(). They can take a 2-D 3x3 convolution of stride 1, no dilation, no groups,
// float32 in and out, outside bf16 compute (winogradShape). The cpu-layout pass marks the
// inference convolutions where they gain ("winograd" = 1: winogradGains, and oneDNN has the
// kernel for 16-channel blocks, in which the pass then holds their activations), and the kernel
// runs those on it; with WinogradMode::On, every one of winogradShape (for tests); never with Off.
// Training graphs are not marked: there the forward convolutions' activations stay channels last
// for the backward pass, and converting them at each Winograd convolution made resnet18 b8's
// training step slower (239-252 ms against 264-271).
//
// winogradGains (the rule, below, public for its tests): on full-rate AVX-512 hosts
// kWinogradMinChannels input channels, at least kWinogradMinFlops of direct work and outputs of
// at least kWinogradMinSide on each side. Below those, the transforms and the conversions to and
// from its channel-blocked layout cost about what the FMAs saved do (the saving per output
// element grows with the input channels, a conversion's cost does not: squeezenet's 16- and
// 32-channel ones gained nothing in the model there). On half-rate hosts, where the direct
// convolution's FMAs cost twice as much: from kWinogradHalfRateMinChannels input channels, those
// of at least kWinogradHalfRateMinFlops of direct work (every resnet 3x3 layer gained, 0.23 GFLOP
// each at batch 1; squeezenet1_1's 16- to 64-channel ones gained at batch 8, 0.22-0.45 GFLOP,
// and lost at batch 1, 0.03-0.06, but for the 32-channel pair, 0.05). docs/cpu-backend.md,
// Winograd: measured per shape on a full-rate AVX-512 EPYC and on a half-rate one, 2 threads.
constexpr double kWinogradMinFlops = 4e8;
constexpr int64_t kWinogradMinSide = 14;
constexpr int64_t kWinogradMinChannels = 64;
constexpr double kWinogradHalfRateMinFlops = 1e8;
constexpr int64_t kWinogradHalfRateMinChannels = 16;

bool winogradShape(const ConvConfig& c) {
  if (winogradMode() == WinogradMode::Off || bf16Compute()) return false;
  return c.x.size() == 4 && c.group == 1 && c.win.kernel == Dims{3, 3} && c.win.strides == Dims{1, 1} &&
         c.win.dilation == Dims{0, 0} && c.xType == memory::data_type::f32 && c.yType == memory::data_type::f32;
}

bool takesWinograd(const ConvConfig& c) {
  return winogradMode() == WinogradMode::On || winogradGains(c.x[1], c.y, support::cpuFeatures().avx512HalfRate);
}

// Whether kernel n tries oneDNN's Winograd kernel first.
bool wantsWinograd(const ir::Node& n, const ConvConfig& c) {
  if (!winogradShape(c)) return false;
  return winogradMode() == WinogradMode::On || (n.domain() == ops::kGraftDomain && n.attrInt("winograd", 0) == 1);
}

bool isWinogradImplementation(const std::string& impl) { return impl.find("wino") != std::string::npos; }

// Whether the kernel can write Y as bf16: what runs after the primitive writes float32 (the
// re-zeroing of a partial channel block; the activations graft applies itself), except Relu,
// which has its bf16 form (reluBf16InPlace; it commutes with rounding: exact).
bool canWriteBf16(const ir::Node& n, const ConvConfig& c) {
  return !(c.yBlock && c.y[1] % c.yBlock != 0) && (!activationAfterPrimitive(n) || isPlainRelu(n));
}

// Row bands. At batch 1 under passive OpenMP waits, a convolution's parallel region wakes the
// sleeping worker and then, when the caller finishes its static share first, sleeps until the
// worker wakes it again: 50-80 us a region on the 2-vCPU VMs (a depthwise convolution of 17 us on
// two spinning threads took 76-110 us passive). A channels-last activation of batch 1 is a stack of
// contiguous rows, so a band of output rows reads a contiguous band of input rows (with its halo)
// and writes a contiguous band of the output: one single-threaded primitive per band (its own
// top and bottom padding), the bands claimed by the caller and the spin team's helper
// (support/spin_team.hpp), which stays awake between the convolutions of a step. A helper that
// wakes late leaves its bands to the caller. Float32, 2-D, activations channels last as given (no
// conversion at the node), constant weights, no Winograd; kBandsPerThread bands a thread, at least
// kMinBandRows output rows each. At larger batches the bands are whole images (a batch that splits
// evenly over the threads): on the half-rate AVX-512 host, sessions of both kinds alternated in one
// process, mobilenet_v2 b8 38.8-42.0 -> 35.3-38.5 ms, squeezenet1_1 b8 33.2 -> 32.2, resnet18 b8
// and resnet50 b8 unchanged (83.5 / 83.6, 260.3 / 261.3).
constexpr int64_t kBandsPerThread = 1;  // 2 a thread: mobilenet_v2 b1 9.3 ms (per-band overhead), 1: 5.2
constexpr int64_t kMinBandRows = 2;

// Only under passive OpenMP waits (ThreadPool::openMpWaitsPassively): with spinning ones libgomp's
// idle worker spins on the core the team's helper needs (resnet50 b1 on the half-rate AVX-512
// host: 76 ms with bands against 38.5 without), and the OpenMP region costs no wake anyway.
void makeBands(ConvState& st, const ir::Node& n, const ConvConfig& c, const NDArray* constW) {
  const bool channelsLast = c.x.size() == 4 && c.xBlock == c.x[1] && c.yBlock == c.y[1];
  if (st.threads < 2 || !channelsLast || !support::ThreadPool::openMpWaitsPassively() ||
      c.xType != memory::data_type::f32 || c.yType != memory::data_type::f32 || bf16Compute() || st.src.needed ||
      st.dst.needed || !constW || st.padRows)
    return;
  const int64_t N = c.x[0], OH = c.y[2], IH = c.x[2], IW = c.x[3], OW = c.y[3];
  // Batch 1: bands of output rows; larger batches: bands of whole images, where they split evenly.
  const bool images = N > 1;
  if (images && N % (kBandsPerThread * st.threads) != 0) return;
  const int64_t bands =
      images ? kBandsPerThread * st.threads : std::min<int64_t>(kBandsPerThread * st.threads, OH / kMinBandRows);
  if (bands < 2) return;
  const int64_t kh = (c.w[2] - 1) * (c.win.dilation[0] + 1) + 1, sh = c.win.strides[0], pt = c.win.padBegin[0];
  // A 1x1 convolution of stride 1 without padding maps each pixel to its own: at batch 1 its
  // bands can be runs of pixels, the image read as one row of OH * OW, where output rows do not
  // split evenly (resnet50's 7x7 layers: bands of 3 and 4 rows left a thread idle a seventh of
  // the time, 512 -> 2048 at 78% of the roof).
  const bool pointwise = c.w[2] == 1 && c.w[3] == 1 && c.win.strides[0] == 1 && c.win.strides[1] == 1 &&
                         c.win.padBegin[0] == 0 && c.win.padBegin[1] == 0 && c.win.padEnd[0] == 0 &&
                         c.win.padEnd[1] == 0;
  const bool pixels = !images && pointwise && OH % bands != 0 && OH * OW >= bands * kMinBandRows;
  dnnl::primitive_attr attr = postOpsAttr(n, c);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  memory::desc wAny(weightDims(c.w, c.group), memory::data_type::f32, memory::format_tag::any);
  std::vector<ConvState::Band> made;
  // A band: the convolution bc (a part of c) reading X from xOffset and writing Y from yOffset.
  auto addBand = [&](const ConvConfig& bc, int64_t xOffset, int64_t yOffset) {
    ConvState::Band band;
    std::tie(band.x, band.y) = activationDescs(bc.x, bc.xBlock, bc.y, bc.yBlock);
    using CF = dnnl::convolution_forward;
    CF::primitive_desc pd(forwardDesc(bc, band.x, wAny, c.bias ? &st.biasDesc : nullptr, band.y), attr, engine());
    if (isReferenceImplementation(pd.impl_info_str())) throw dnnl::error(dnnl_unimplemented, "reference kernel");
    band.prim = CF(pd);
    band.xOffset = xOffset;
    band.yOffset = yOffset;
    band.scratchDesc = pd.scratchpad_desc();
    band.scratch = NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(band.scratchDesc.get_size())});
    auto same = std::find_if(st.bandWeights.begin(), st.bandWeights.end(),
                             [&](const ConvState::BandWeights& w) { return w.layout == pd.weights_desc(); });
    band.weights = static_cast<size_t>(same - st.bandWeights.begin());
    if (same == st.bandWeights.end()) {
      st.bandWeights.push_back({pd.weights_desc(), {}});
      st.bandWeights.back().packed.init(plainWeights(c.w, c.group), pd.weights_desc(), constW);
    }
    made.push_back(std::move(band));
  };
  setThreads(1);  // each band's primitive runs on one thread
  try {
    for (int64_t b = 0; b < bands; ++b) {
      ConvConfig bc = c;
      if (images) {
        const int64_t n0 = N * b / bands, n1 = N * (b + 1) / bands;
        bc.x[0] = bc.y[0] = n1 - n0;
        addBand(bc, n0 * IH * IW * c.x[1], n0 * OH * OW * c.y[1]);
        continue;
      }
      if (pixels) {
        const int64_t p0 = OH * OW * b / bands, p1 = OH * OW * (b + 1) / bands;
        bc.x[2] = bc.y[2] = 1;
        bc.x[3] = bc.y[3] = p1 - p0;
        bc.win.out[0] = 1;
        bc.win.out[1] = p1 - p0;
        addBand(bc, p0 * c.x[1], p0 * c.y[1]);
        continue;
      }
      const int64_t oh0 = OH * b / bands, oh1 = OH * (b + 1) / bands;
      const int64_t first = oh0 * sh - pt, last = (oh1 - 1) * sh - pt + kh;  // input rows [first, last)
      const int64_t in0 = std::max<int64_t>(0, first), in1 = std::min(IH, last);
      if (in1 <= in0) throw dnnl::error(dnnl_unimplemented, "a band of padding only");
      bc.x[2] = in1 - in0;
      bc.y[2] = oh1 - oh0;
      bc.win.padBegin[0] = in0 - first;
      bc.win.padEnd[0] = last - in1;
      bc.win.out[0] = oh1 - oh0;
      addBand(bc, in0 * IW * c.x[1], oh0 * OW * c.y[1]);
    }
  } catch (const dnnl::error&) {
    st.bandWeights.clear();
    made.clear();
  }
  setThreads(st.threads);
  st.bands = std::move(made);
  if (!st.bands.empty())
    noteImplementation(fmt::format("{}, {} {} bands", takeImplementation(), st.bands.size(),
                                   images   ? "image"
                                   : pixels ? "pixel"
                                            : "row"));
}

// Runs the bands of st on the pool's spin team: x and y are the whole activations.
void runBands(ConvState& st, ops::KernelContext& k, const NDArray& x, NDArray& y) {
  auto* xp = const_cast<float*>(x.data<float>());
  float* yp = y.data<float>();
  const NDArray& w = k.input(1);
  const NDArray* bias = st.bias ? &k.input(2) : nullptr;
  k.pool().team().run(static_cast<int>(st.bands.size()), [&](int i) {
    setThreads(1);
    const ConvState::Band& b = st.bands[static_cast<size_t>(i)];
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(b.x, engine(), xp + b.xOffset)},
                                         {DNNL_ARG_WEIGHTS, st.bandWeights[b.weights].packed.get(w)},
                                         {DNNL_ARG_DST, memory(b.y, engine(), yp + b.yOffset)}};
    if (bias) args[DNNL_ARG_BIAS] = wrap(st.biasDesc, *bias);
    if (b.scratch.numel() > 0) args[DNNL_ARG_SCRATCHPAD] = wrap(b.scratchDesc, b.scratch);
    execute(b.prim, args);
    // The activation over the band's output while it is still in the caches (serially: a
    // nested call inside a team task runs on this thread), not as a pass over all of Y after.
    if (st.act) st.act(k.pool(), yp + b.yOffset, static_cast<int64_t>(b.y.get_size() / sizeof(float)));
  });
  setThreads(st.threads);
}

ops::KernelFn makeConv(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto cfg = convConfig(n);
  auto st = startFactory<ConvState>(ctx, cfg, "makeConv");
  const ConvConfig& c = *cfg;
  st->bias = c.bias;
  st->sum = c.sum;
  st->yShape = n.output(0)->info().shape();
  memory::desc xUser, yUser;  // (not a structured binding: the lambda below reads them)
  std::tie(xUser, yUser) = activationDescs(c.x, c.xBlock, c.y, c.yBlock, c.xType, c.yType);
  // Plain activations: let oneDNN pick its layout and reorder at the node (its direct kernels
  // are much faster than its plain-layout fallbacks). Assigned layouts are used as given. A float32
  // source of a bf16 primitive is converted at the node anyway: into the layout oneDNN picks.
  bool pinned = c.xBlock || c.yBlock;
  auto any = memory::format_tag::any;
  st->biasDesc = plainDesc({c.w[0]});
  if (activationAfterPrimitive(n)) st->act = fusedActivation(n);
  if (c.yBlock && c.y[1] % c.yBlock != 0) {
    st->padRows = c.y[0];
    st->padBlock = c.yBlock;
    st->padBlocks = (c.y[1] + c.yBlock - 1) / c.yBlock;
    st->padLanes = c.y[1] % c.yBlock;
    st->padSpatial = shapeNumel(spatial(c.y));
  }
  const bool bf16Out = c.yType == memory::data_type::bf16;
  if (bf16Out && !canWriteBf16(n, c)) return decline();
  if (bf16Out && st->act) {  // Relu, in its bf16 form
    st->act = {};
    st->reluBf16 = true;
  }
  st->yType = bf16Out ? DataType::BFloat16 : DataType::Float;
  dnnl::primitive_attr attr = postOpsAttr(n, c);
  // A depthwise convolution is bound by memory, not by FMAs: in bf16 it gains nothing and its
  // input's conversion costs a pass (mobilenet_v2 b8 under enableBf16: 31 ms with them in float32,
  // 35 in bf16, 35 all float32; docs/cpu-backend.md, bf16).
  const bool depthwise = isDepthwise(c);
  // Winograd (wantsWinograd): its activations in the layout it picks (channel-blocked; pinned
  // ones are converted at the node), float32.
  auto create = [&](ConvState& s, bool bf16, bool winograd, const NDArray* constW) {
    auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    // Pinned activations in the primitive's data type: as given where the tensor has it, else
    // converted at the node (into the same layout when pinned).
    bool keep = pinned && !winograd;
    auto [xKept, yKept] = activationDescs(c.x, c.xBlock, c.y, c.yBlock, dt, bf16 ? c.yType : memory::data_type::f32);
    memory::desc xPrim = keep && (!bf16 || c.xType == dt) ? xKept : memory::desc(toDims(c.x), dt, any);
    memory::desc yPrim = keep ? yKept : memory::desc(toDims(c.y), memory::data_type::f32, any);
    memory::desc wAny(weightDims(c.w, c.group), dt, any);
    try {
      using CF = dnnl::convolution_forward;
      CF::primitive_desc pd(forwardDesc(c, xPrim, wAny, c.bias ? &st->biasDesc : nullptr, yPrim, winograd), attr,
                            engine());
      if (winograd && !isWinogradImplementation(pd.impl_info_str())) return false;
      if (!acceptImplementation(pd.impl_info_str(), bf16, depthwise ? kDepthwiseStaysF32 : nullptr)) return false;
      s.prim = CF(pd);
      s.src.init(xUser, pd.src_desc(), true, false);
      s.dst.init(yUser, pd.dst_desc(), c.sum, true);
      s.weights.init(plainWeights(c.w, c.group), pd.weights_desc(), constW);
    } catch (const dnnl::error&) {
      return false;
    }
    return true;
  };
  const NDArray* constW = ctx.constantInput(1);
  // The direct twin: a copy of the state before any primitive is made, then its own primitive,
  // adapters and weights.
  auto twin = wantsWinograd(n, c) ? std::make_shared<ConvState>(*st) : nullptr;
  bool made = twin && create(*st, false, true, constW);
  if (made) {
    std::string winogradImpl = takeImplementation();
    if (create(*twin, false, false, nullptr)) {
      takeImplementation();
      noteImplementation(winogradImpl);  // what the profile names: the kernel the steps run
      st->direct = std::move(twin);
      st->wNonFinite = constW && anyNonFinite(constW->data<float>(), constW->numel(), ctx.pool());
    } else {
      made = false;  // no direct twin: no Winograd either
    }
  }
  if (!made && !(depthwise ? create(*st, false, false, constW)
                           : createPreferringBf16([&](bool bf16) { return create(*st, bf16, false, constW); })))
    return decline();
  if (!made) makeBands(*st, n, c, constW);
  return [st](ops::KernelContext& k) {
    setThreads(st->threads);
    const NDArray& x = k.input(0);
    NDArray& y = k.allocOutputUninit(0, st->yType, st->yShape);
    ConvState& s =
        st->direct &&
                (st->wNonFinite || anyNonFinite(x.data<float>(), x.numel(), k.pool()) ||
                 (!st->weights.isConstant() && anyNonFinite(k.input(1).data<float>(), k.input(1).numel(), k.pool())))
            ? *st->direct
            : *st;
    NDArray xs, ys;
    memory src = s.src.input(x, xs), dst = s.dst.output(y, ys);
    if (s.dst.needed) {
      if (s.sum) execute(s.dst.toPrim, {{DNNL_ARG_FROM, wrap(s.dst.user, k.input(3))}, {DNNL_ARG_TO, dst}});
    } else if (s.sum && y.rawData() != k.input(3).rawData()) {
      // (The memory plan usually gives Y the residual's buffer: nothing to copy then.)
      std::memcpy(y.rawData(), k.input(3).rawData(), y.nbytes());
    }
    if (!s.bands.empty()) {
      runBands(s, k, x, y);
    } else {
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, s.weights.get(k.input(1))}, {DNNL_ARG_DST, dst}};
      if (s.bias) args[DNNL_ARG_BIAS] = wrap(s.biasDesc, k.input(2));
      execute(s.prim, args);
    }
    s.dst.written(dst, y);
    if (s.act && s.bands.empty()) s.act(k.pool(), y.data<float>(), y.numel());
    if (s.reluBf16) reluBf16InPlace(k.pool(), static_cast<uint16_t*>(y.rawData()), y.numel());
    if (s.padRows) rezeroPadding(s, y.data<float>());
  };
}

// ConvTranspose: X [N, C, in...], W [C, M/group, k...], B [M]. Geometry as the reference kernel
// computes it (output_shape, output_padding, auto_pad); negative paddings are left to it.
struct DeconvConfig {
  Shape x, w, y;
  int64_t group = 1;
  Dims strides, dilation, padBegin, padEnd;
  bool bias = false;
};

std::optional<DeconvConfig> deconvConfig(const ir::Node& n) {
  if (!isStaticFloat(n.input(0)) || !isStaticFloat(n.input(1)) || !isStaticFloat(n.output(0))) return std::nullopt;
  if (n.numInputs() > 3 || n.numOutputs() != 1) return std::nullopt;
  DeconvConfig c;
  c.group = n.attrInt("group", 1);
  c.x = n.input(0)->info().shape();
  c.w = n.input(1)->info().shape();
  size_t nd = c.x.size();
  if (nd < 3 || nd > 5 || c.w.size() != nd || c.group < 1 || c.x[1] != c.w[0] || c.x[1] % c.group != 0 || c.x[0] == 0)
    return std::nullopt;
  size_t r = nd - 2;
  // The reference's window (ops/conv_util.hpp); what it refuses, the reference kernel reports.
  ops::ConvShape sh;
  std::vector<int64_t> opad = n.attrInts("output_padding", {});
  try {
    ops::WindowAttrs wa = ops::parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
    std::vector<int64_t> outShape = n.attrInts("output_shape", {});
    ops::checkOutputAttrs(wa.what, opad, outShape);
    sh = ops::transposedConvShape(wa, c.x, c.w, c.group, opad, outShape);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (opad.empty()) opad.assign(r, 0);
  c.y = {c.x[0], sh.outChannels};
  for (size_t d = 0; d < r; ++d) {
    int64_t pb = sh.win.padBegin[d], out = sh.win.out[d];
    // oneDNN: out = (in - 1) * s + ext - pb - pe', so output_padding comes off the end padding.
    int64_t pe2 = sh.win.padEnd[d] - opad[d];
    if (c.x[d + 2] <= 0 || out <= 0 || pb < 0 || pe2 < 0) return std::nullopt;
    c.y.push_back(out);
    c.strides.push_back(sh.win.stride[d]);
    c.dilation.push_back(sh.win.dilation[d] - 1);
    c.padBegin.push_back(pb);
    c.padEnd.push_back(pe2);
  }
  if (n.output(0)->info().shape() != c.y) return std::nullopt;
  if (n.hasInput(2)) {
    if (!isStaticFloat(n.input(2)) || n.input(2)->info().shape() != Shape{c.y[1]}) return std::nullopt;
    c.bias = true;
  }
  return c;
}

bool supportsDeconv(const ir::Node& n) { return deconvConfig(n).has_value(); }

ops::KernelFn makeDeconv(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto cfg = deconvConfig(n);
  auto st = startFactory<ConvState>(ctx, cfg, "makeDeconv");
  const DeconvConfig& c = *cfg;
  st->bias = c.bias;
  st->yShape = c.y;
  auto any = memory::format_tag::any;
  memory::desc xUser = plainDesc(c.x), yUser = plainDesc(c.y);
  memory::desc yPrim(toDims(c.y), memory::data_type::f32, any);
  // oneDNN's deconvolution weights are [g, M/g, C/g, k...] (output channels first); graft's
  // [C, M/g, k...] is that with the first two axes swapped: describe it by strides.
  int64_t g = c.group, cg = c.w[0] / g, mg = c.w[1];
  int64_t kb = shapeNumel(spatial(c.w));
  Dims wd{g, mg, cg}, ws{cg * mg * kb, kb, mg * kb};
  for (size_t i = 2; i < c.w.size(); ++i) wd.push_back(c.w[i]);
  for (size_t i = 2; i < c.w.size(); ++i) {
    int64_t s = 1;
    for (size_t j = i + 1; j < c.w.size(); ++j) s *= c.w[j];
    ws.push_back(s);
  }
  if (g == 1) {
    wd.erase(wd.begin());
    ws.erase(ws.begin());
  }
  memory::desc wUser(wd, memory::data_type::f32, ws);
  st->biasDesc = plainDesc({c.y[1]});
  auto create = [&](bool bf16) {
    auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    memory::desc xPrim(toDims(c.x), dt, any), wAny(wd, dt, any);
    try {
      using DF = dnnl::deconvolution_forward;
      auto d = c.bias ? DF::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, xPrim, wAny,
                                 st->biasDesc, yPrim, c.strides, c.dilation, c.padBegin, c.padEnd)
                      : DF::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, xPrim, wAny,
                                 yPrim, c.strides, c.dilation, c.padBegin, c.padEnd);
      DF::primitive_desc pd(d, engine());
      if (!acceptImplementation(pd.impl_info_str(), bf16)) return false;
      st->prim = DF(pd);
      st->src.init(xUser, pd.src_desc(), true, false);
      st->dst.init(yUser, pd.dst_desc(), false, true);
      st->weights.init(wUser, pd.weights_desc(), ctx.constantInput(1));
    } catch (const dnnl::error&) {
      return false;
    }
    return true;
  };
  if (!createPreferringBf16(create)) return decline();
  return [st](ops::KernelContext& k) {
    setThreads(st->threads);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, st->yShape);
    NDArray xs, ys;
    memory src = st->src.input(k.input(0), xs), dst = st->dst.output(y, ys);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, st->weights.get(k.input(1))}, {DNNL_ARG_DST, dst}};
    if (st->bias) args[DNNL_ARG_BIAS] = wrap(st->biasDesc, k.input(2));
    execute(st->prim, args);
    st->dst.written(dst, y);
  };
}

// ai.graft ConvGradInput (dY, W) -> dX and ConvGradWeight (X, dY) -> dW [, dB]: Conv's backward
// pass on oneDNN's backward-data and backward-weights primitives, plain activations in and out.
// As for plain forward convolutions, oneDNN picks the activation layouts (its direct kernels
// want channel-blocked ones) and the kernel reorders at the node; weights and weight gradients
// are graft's [M, C/g, k...] (oneDNN's grouped view when grouped).
struct ConvGradConfig {
  Shape x, w, y;  // the forward convolution's X, W, Y (logical)
  int64_t group = 1;
  Window win;
  bool bias = false;           // ConvGradWeight's dB output
  int xBlock = 0, yBlock = 0;  // X (dX) and dY channel-blocked with that block (ai.graft::ChannelBlocked)
};

std::optional<ConvGradConfig> convGradConfig(const ir::Node& n) {
  bool wrapped = n.type() == "ChannelBlocked";
  std::string op = wrapped ? n.attrString("op", "") : n.type();
  if (wrapped && n.attrString("op_domain", "") != ops::kGraftDomain) return std::nullopt;
  if (op != "ConvGradInput" && op != "ConvGradWeight") return std::nullopt;
  bool input = op == "ConvGradInput";
  if (n.numInputs() != 2 || n.numOutputs() < 1 || n.numOutputs() > (input ? 1u : 2u)) return std::nullopt;
  for (const ir::Tensor* t : n.inputs())
    if (!isStaticFloat(t)) return std::nullopt;
  for (const ir::Tensor* t : n.outputs())
    if (!isStaticFloat(t)) return std::nullopt;
  ConvGradConfig c;
  c.group = n.attrInt("group", 1);
  c.bias = !input && n.numOutputs() == 2;
  auto in0 = wrapped ? blockedInput(n, 0) : std::make_optional(std::make_pair(n.input(0)->info().shape(), 0));
  auto in1 = wrapped ? blockedInput(n, 1) : std::make_optional(std::make_pair(n.input(1)->info().shape(), 0));
  if (!in0 || !in1) return std::nullopt;
  if (input) {
    if (in1->second) return std::nullopt;  // W stays plain
    c.y = in0->first;
    c.yBlock = in0->second;
    c.w = in1->first;
    auto out = wrapped ? blockedOutput(n) : std::make_optional(std::make_pair(n.output(0)->info().shape(), 0));
    if (!out) return std::nullopt;
    c.x = out->first;
    c.xBlock = out->second;
  } else {
    if (wrapped && n.attrInt("blocked_output", 1)) return std::nullopt;  // dW stays plain
    c.x = in0->first;
    c.xBlock = in0->second;
    c.y = in1->first;
    c.yBlock = in1->second;
    c.w = n.output(0)->info().shape();
  }
  size_t nd = c.x.size();
  if (nd < 3 || nd > 5 || c.w.size() != nd || c.y.size() != nd || c.group < 1) return std::nullopt;
  for (const Shape* s : {&c.x, &c.w, &c.y})
    for (int64_t d : *s)
      if (d <= 0) return std::nullopt;
  int64_t channels = 0;
  if (__builtin_mul_overflow(c.w[1], c.group, &channels) || c.w[0] % c.group != 0 || c.x[1] != channels ||
      c.y[1] != c.w[0] || c.y[0] != c.x[0])
    return std::nullopt;
  Shape kernel = spatial(c.w);
  auto ks = n.attrInts("kernel_shape", {});
  if (!ks.empty() && Shape(ks.begin(), ks.end()) != kernel) return std::nullopt;
  auto win = resolveWindow(n, spatial(c.x), kernel);
  if (!win || spatial(c.y) != Shape(win->out.begin(), win->out.end())) return std::nullopt;
  c.win = *win;
  if (c.bias && n.output(1)->info().shape() != Shape{c.w[0]}) return std::nullopt;
  return c;
}

bool supportsConvGrad(const ir::Node& n) { return convGradConfig(n).has_value(); }

// The training forward convolution the backward primitives take as their hint.
dnnl::convolution_forward::primitive_desc forwardHint(const ConvGradConfig& c, const memory::desc& x,
                                                      const memory::desc& w, const memory::desc* b,
                                                      const memory::desc& y) {
  using CF = dnnl::convolution_forward;
  auto fd = b ? CF::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x, w, *b, y,
                         c.win.strides, c.win.dilation, c.win.padBegin, c.win.padEnd)
              : CF::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x, w, y, c.win.strides,
                         c.win.dilation, c.win.padBegin, c.win.padEnd);
  return CF::primitive_desc(fd, engine());
}

// The backward-data primitive: dX in x, W in w, dY in y; its forward hint reads hintX.
dnnl::convolution_backward_data::primitive_desc gradInputPrimitive(const ConvGradConfig& c, const memory::desc& x,
                                                                   const memory::desc& w, const memory::desc& y,
                                                                   const memory::desc& hintX) {
  using CB = dnnl::convolution_backward_data;
  auto hint = forwardHint(c, hintX, w, nullptr, y);
  CB::desc d(dnnl::algorithm::convolution_direct, x, w, y, c.win.strides, c.win.dilation, c.win.padBegin, c.win.padEnd);
  return CB::primitive_desc(d, engine(), hint);
}

// The backward-weights primitive: X in x, dW in w, dB in *bias (none when null), dY in y; its
// forward hint's weights are hintW.
dnnl::convolution_backward_weights::primitive_desc gradWeightPrimitive(const ConvGradConfig& c, const memory::desc& x,
                                                                       const memory::desc& w, const memory::desc* bias,
                                                                       const memory::desc& y,
                                                                       const memory::desc& hintW) {
  using CW = dnnl::convolution_backward_weights;
  auto hint = forwardHint(c, x, hintW, bias, y);
  auto d = bias ? CW::desc(dnnl::algorithm::convolution_direct, x, w, *bias, y, c.win.strides, c.win.dilation,
                           c.win.padBegin, c.win.padEnd)
                : CW::desc(dnnl::algorithm::convolution_direct, x, w, y, c.win.strides, c.win.dilation, c.win.padBegin,
                           c.win.padEnd);
  return CW::primitive_desc(d, engine(), hint);
}

struct ConvGradState {
  dnnl::primitive prim;
  Adapter a, b, out;      // data operands: a/b the inputs (b unused for dX), out the result
  PackedOperand weights;  // ConvGradInput's W
  memory::desc biasDesc;
  dnnl::reorder dwToUser;  // ConvGradWeight: the primitive's dW layout to graft's
  memory::desc dwUser, dwPrim;
  bool dwReorder = false, bias = false;
  Shape outShape;
  int threads = 1;
};

ops::KernelFn makeConvGradInput(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto cfg = convGradConfig(n);
  auto st = startFactory<ConvGradState>(ctx, cfg, "makeConvGradInput");
  const ConvGradConfig& c = *cfg;
  st->outShape = n.output(0)->info().shape();
  auto any = memory::format_tag::any;
  auto f32 = memory::data_type::f32;
  // bf16: dY and W in bf16, dX in float32.
  auto create = [&](bool bf16) {
    auto dt = bf16 ? memory::data_type::bf16 : f32;
    // Assigned layouts are used as given (float only: a bf16 dY is converted at the node anyway).
    bool pinned = (c.xBlock || c.yBlock) && !bf16;
    memory::desc xAny = pinned ? layoutDesc(c.x, c.xBlock) : memory::desc(toDims(c.x), f32, any);
    memory::desc yAny = pinned ? layoutDesc(c.y, c.yBlock) : memory::desc(toDims(c.y), dt, any);
    memory::desc wAny(weightDims(c.w, c.group), dt, any);
    try {
      auto pd = gradInputPrimitive(c, xAny, wAny, yAny, pinned ? xAny : memory::desc(toDims(c.x), dt, any));
      if (!acceptImplementation(pd.impl_info_str(), bf16)) return false;
      st->prim = dnnl::convolution_backward_data(pd);
      st->a.init(layoutDesc(c.y, c.yBlock), pd.diff_dst_desc(), true, false);
      st->out.init(layoutDesc(c.x, c.xBlock), pd.diff_src_desc(), false, true);
      st->weights.init(plainWeights(c.w, c.group), pd.weights_desc(), ctx.constantInput(1));
    } catch (const dnnl::error&) {
      return false;
    }
    return true;
  };
  if (!createPreferringBf16(create)) return decline();
  return [st](ops::KernelContext& k) {
    setThreads(st->threads);
    NDArray& dx = k.allocOutputUninit(0, DataType::Float, st->outShape);
    NDArray dyScratch, dxScratch;
    memory dy = st->a.input(k.input(0), dyScratch), dst = st->out.output(dx, dxScratch);
    execute(st->prim,
            {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, st->weights.get(k.input(1))}, {DNNL_ARG_DIFF_SRC, dst}});
    st->out.written(dst, dx);
  };
}

ops::KernelFn makeConvGradWeight(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto cfg = convGradConfig(n);
  auto st = startFactory<ConvGradState>(ctx, cfg, "makeConvGradWeight");
  const ConvGradConfig& c = *cfg;
  st->outShape = c.w;
  st->bias = c.bias;
  auto any = memory::format_tag::any;
  auto f32 = memory::data_type::f32;
  st->biasDesc = plainDesc({c.w[0]});
  // bf16: X and dY in bf16, dW (and dB) in float32.
  auto create = [&](bool bf16) {
    auto dt = bf16 ? memory::data_type::bf16 : f32;
    bool pinned = (c.xBlock || c.yBlock) && !bf16;
    memory::desc xAny = pinned ? layoutDesc(c.x, c.xBlock) : memory::desc(toDims(c.x), dt, any);
    memory::desc yAny = pinned ? layoutDesc(c.y, c.yBlock) : memory::desc(toDims(c.y), dt, any);
    memory::desc wAny(weightDims(c.w, c.group), f32, any);
    try {
      auto pd = gradWeightPrimitive(c, xAny, wAny, c.bias ? &st->biasDesc : nullptr, yAny,
                                    memory::desc(weightDims(c.w, c.group), dt, any));
      if (c.bias && pd.diff_bias_desc() != st->biasDesc) return false;
      if (!acceptImplementation(pd.impl_info_str(), bf16)) return false;
      st->prim = dnnl::convolution_backward_weights(pd);
      st->a.init(layoutDesc(c.x, c.xBlock), pd.src_desc(), true, false);
      st->b.init(layoutDesc(c.y, c.yBlock), pd.diff_dst_desc(), true, false);
      st->dwUser = plainWeights(c.w, c.group);
      st->dwPrim = pd.diff_weights_desc();
      st->dwReorder = st->dwUser != st->dwPrim;
      if (st->dwReorder)
        st->dwToUser = dnnl::reorder(memory(st->dwPrim, engine(), DNNL_MEMORY_NONE),
                                     memory(st->dwUser, engine(), DNNL_MEMORY_NONE));
    } catch (const dnnl::error&) {
      return false;
    }
    return true;
  };
  if (!createPreferringBf16(create)) return decline();
  return [st](ops::KernelContext& k) {
    setThreads(st->threads);
    NDArray& dw = k.allocOutputUninit(0, DataType::Float, st->outShape);
    NDArray xScratch, dyScratch, dwScratch;
    memory x = st->a.input(k.input(0), xScratch), dy = st->b.input(k.input(1), dyScratch);
    memory dwm = wrap(st->dwUser, dw);
    if (st->dwReorder) {
      dwScratch = NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(st->dwPrim.get_size())});
      dwm = wrap(st->dwPrim, dwScratch);
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dwm}};
    if (st->bias) {
      NDArray& db = k.allocOutputUninit(1, DataType::Float, {st->outShape[0]});
      args[DNNL_ARG_DIFF_BIAS] = wrap(st->biasDesc, db);
    }
    execute(st->prim, args);
    if (st->dwReorder) execute(st->dwToUser, {{DNNL_ARG_FROM, dwm}, {DNNL_ARG_TO, wrap(st->dwUser, dw)}});
  };
}

}  // namespace

std::pair<memory::desc, memory::desc> activationDescs(const Shape& x, int64_t xb, const Shape& y, int64_t yb,
                                                      memory::data_type xt, memory::data_type yt) {
  auto sixteen = [](const Shape& s, int64_t b) { return b == 16 && s.size() >= 3 && s.size() <= 5 && s[1] == 16; };
  auto blocked16 = [](const Shape& s, int64_t b) { return b == 16 && s.size() >= 3 && s[1] != 16; };
  memory::desc xd =
      sixteen(x, xb) && blocked16(y, yb) ? blockedDesc(x, 16, xt) : layoutDesc(x, static_cast<int>(xb), xt);
  memory::desc yd =
      sixteen(y, yb) && blocked16(x, xb) ? blockedDesc(y, 16, yt) : layoutDesc(y, static_cast<int>(yb), yt);
  return {xd, yd};
}

// For the cpu-layout pass: whether a plain Conv/FusedConv should read (first) and write (second)
// activation layout `layout` (see kChannelsLast); nullopt when the node is not for oneDNN or keeps
// its output plain. The output takes the layout when oneDNN has an implementation other than its
// reference loops for it (so that one layout runs from op to op, whatever oneDNN would pick for
// this conv alone); the input takes it when oneDNN, free to choose, picks it, or when
// `xConverted` (the input has the layout already), else stays plain where oneDNN can read that.
std::optional<std::pair<bool, bool>> convLayoutChoice(const ir::Node& n, int layout, bool xConverted) {
  auto cfg = convConfig(n);
  if (!cfg || cfg->xBlock || cfg->yBlock || cfg->x.size() < 3 || layout == 0) return std::nullopt;
  const ConvConfig& c = *cfg;
  auto any = memory::format_tag::any;
  auto f32 = memory::data_type::f32;
  dnnl::primitive_attr attr = postOpsAttr(n, c);
  auto [xT, yT] = activationDescs(c.x, blockFor(layout, c.x[1]), c.y, blockFor(layout, c.y[1]));
  memory::desc w(weightDims(c.w, c.group), f32, any);
  using CF = dnnl::convolution_forward;
  // The implementation oneDNN picks for these activation layouts, or "" when it has none.
  auto impl = [&](const memory::desc& x, const memory::desc& y, memory::desc* src) -> std::string {
    try {
      CF::primitive_desc pd(forwardDesc(c, x, w, nullptr, y), attr, engine());
      if (src) *src = pd.src_desc();
      return pd.impl_info_str();
    } catch (const dnnl::error&) {
      return "";
    }
  };
  auto fast = [](const std::string& name) { return !name.empty() && name.rfind("ref", 0) != 0; };
  memory::desc freeSrc;
  if (impl(memory::desc(toDims(c.x), f32, any), memory::desc(toDims(c.y), f32, any), &freeSrc).empty())
    return std::nullopt;
  bool xFirst = freeSrc == xT || xConverted;
  for (bool x : {xFirst, !xFirst})
    if (fast(impl(x ? xT : plainDesc(c.x), yT, nullptr))) return std::make_pair(x, true);
  return std::nullopt;
}

// For the cpu-bf16-activations pass: whether FusedConv `n` (channel-blocked output) runs a bf16
// primitive that reads X as a bf16 tensor in its assigned layout (oneDNN has a fast bf16
// implementation for it, and it is not depthwise: those stay float32), and whether it can also
// write Y as bf16 (nothing after the primitive writes float32: no activation oneDNN cannot fuse
// other than Relu, no partial channel block).
Bf16ConvSupport convBf16Support(const ir::Node& n) {
  if (n.domain() != ops::kGraftDomain || !support::cpuFeatures().avx512bf16) return {};
  auto cfg = convConfig(n);
  if (!cfg || !cfg->yBlock || isDepthwise(*cfg)) return {};
  const ConvConfig& c = *cfg;
  auto bf16 = memory::data_type::bf16;
  auto [xKept, y] = activationDescs(c.x, c.xBlock, c.y, c.yBlock, bf16, bf16);
  memory::desc x = c.xBlock ? xKept : memory::desc(toDims(c.x), bf16, memory::format_tag::any);
  memory::desc w(weightDims(c.w, c.group), bf16, memory::format_tag::any), bias = plainDesc({c.w[0]});
  try {
    dnnl::convolution_forward::primitive_desc pd(forwardDesc(c, x, w, c.bias ? &bias : nullptr, y), postOpsAttr(n, c),
                                                 engine());
    if (isReferenceImplementation(pd.impl_info_str())) return {};
    return {true, canWriteBf16(n, c)};
  } catch (const dnnl::error&) {
    return {};
  }
}

bool winogradGains(int64_t inChannels, const Dims& y, bool avx512HalfRate) {
  const double flops = 2.0 * 9 * static_cast<double>(inChannels) * static_cast<double>(shapeNumel(y));
  // Half-rate AVX-512 (Zen 4): the direct convolution runs at half the FMA rate, the transforms
  // cost what they cost on full-rate hosts, and every shape measured with 64 or more input
  // channels gained, batch 1 and 7x7 outputs included (1.15-1.3x at 512 channels, 7x7, batch 1;
  // 2.9x at 128 channels, 28x28, batch 1); fewer channels gained where the work is large.
  if (avx512HalfRate) return inChannels >= kWinogradHalfRateMinChannels && flops >= kWinogradHalfRateMinFlops;
  if (inChannels < kWinogradMinChannels) return false;
  return flops >= kWinogradMinFlops && y[2] >= kWinogradMinSide && y[3] >= kWinogradMinSide;
}

// For the cpu-layout pass: the channel block (16) of the activations with which oneDNN runs Conv /
// FusedConv node `n` (plain activations) on its Winograd kernel, where winogradGains says it
// gains; 0 otherwise.
int convWinogradBlock(const ir::Node& n) {
  auto cfg = convConfig(n);
  if (!cfg || cfg->xBlock || cfg->yBlock || !winogradShape(*cfg) || !takesWinograd(*cfg)) return 0;
  const ConvConfig& c = *cfg;
  constexpr int kBlock = 16;
  memory::desc w(weightDims(c.w, c.group), memory::data_type::f32, memory::format_tag::any), bias = plainDesc({c.w[0]});
  // Tagged as 16-channel blocks even where the tensor has 16 channels (blockedDesc: the Winograd
  // kernel takes only the blocked tag; squeezenet's 16-channel expand3x3 were left direct by
  // layoutDesc's channels-last one).
  try {
    dnnl::convolution_forward::primitive_desc pd(
        forwardDesc(c, blockedDesc(c.x, kBlock), w, c.bias ? &bias : nullptr, blockedDesc(c.y, kBlock), true),
        postOpsAttr(n, c), engine());
    return isWinogradImplementation(pd.impl_info_str()) ? kBlock : 0;
  } catch (const dnnl::error&) {
    return 0;
  }
}

// For the cpu-layout-training pass: whether oneDNN has an implementation other than its reference
// loops for ConvGradInput / ConvGradWeight node `n` (a ChannelBlocked one) in its assigned layouts.
bool convGradLayoutFast(const ir::Node& n) {
  auto cfg = convGradConfig(n);
  if (!cfg) return false;
  const ConvGradConfig& c = *cfg;
  memory::desc x = layoutDesc(c.x, c.xBlock), y = layoutDesc(c.y, c.yBlock);
  memory::desc w(weightDims(c.w, c.group), memory::data_type::f32, memory::format_tag::any);
  try {
    std::string impl = n.attrString("op", "") == "ConvGradInput"
                           ? gradInputPrimitive(c, x, w, y, x).impl_info_str()
                           : gradWeightPrimitive(c, x, w, nullptr, y, w).impl_info_str();
    return !isReferenceImplementation(impl);
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace graft::backends::cpu::onednn

GRAFT_REGISTER_CPU_KERNELS(onednn_conv) {
  using namespace graft::backends::cpu::onednn;
  // The last field: they honour bf16Compute().
  r.add({"", "Conv", "onednn_conv", supportsConv, makeConv, 0, true});
  r.add({graft::ops::kGraftDomain, "FusedConv", "onednn_conv", supportsConv, makeConv, 0, true});
  r.add({"", "ConvTranspose", "onednn_deconv", supportsDeconv, makeDeconv, 0, true});
  r.add({graft::ops::kGraftDomain, "ConvGradInput", "onednn_conv_bwd_data", supportsConvGrad, makeConvGradInput, 0,
         true});
  r.add({graft::ops::kGraftDomain, "ConvGradWeight", "onednn_conv_bwd_weights", supportsConvGrad, makeConvGradWeight, 0,
         true});
  // Channel-blocked (channels-last) operands from the cpu-layout-training pass.
  r.add({graft::ops::kGraftDomain, "ChannelBlocked", "onednn_conv_bwd_data",
         [](const graft::ir::Node& n) { return n.attrString("op", "") == "ConvGradInput" && supportsConvGrad(n); },
         makeConvGradInput, 0, true});
  r.add({graft::ops::kGraftDomain, "ChannelBlocked", "onednn_conv_bwd_weights",
         [](const graft::ir::Node& n) { return n.attrString("op", "") == "ConvGradWeight" && supportsConvGrad(n); },
         makeConvGradWeight, 0, true});
}
