#pragma once
// Plumbing shared by the cpu backend's oneDNN kernels: the engine, per-thread streams and
// OpenMP thread counts, memory descriptors for graft's two activation layouts (plain row-major
// and channel-blocked), window geometry from ONNX attributes, fused activations as post-ops,
// and operands (weights) that are packed once when constant and re-packed per run otherwise.
//
// Layouts. A channel-blocked tensor of logical shape [N, C, d1, ..., dk] is stored as a plain
// graft array of shape [N, ceil(C/b), d1, ..., dk, b] (oneDNN's nCw8c, nChw8c, nCdhw8c; b = 8 on
// AVX2, 16 on AVX-512). Channels C..ceil(C/b)*b-1 are zero. The cpu-layout pass decides which
// tensors are blocked; kernels learn it from their node's attributes.
//
// Weights. A kernel packs an operand into the primitive's preferred layout at compile time when
// the operand is a Constant (CompileContext::constantInput). Variables (weights a training step
// or WeightsIO updates in place) are re-packed on every run: the kernel cannot see in-place
// updates, and a training step changes them every step anyway. Inference sessions with
// constantWeights (the default) turn Variables into Constants in the compiled plan
// ("constant-weights" pass), and recompile when weights are written, so their weights are packed
// once.
#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/bf16.hpp"
#include "ir/graph.hpp"
#include "ops/kernel.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu::onednn {

using dnnl::memory;
using Dims = memory::dims;

/// The cpu engine (one per process).
dnnl::engine& engine();
/// An in-order stream of the calling thread.
dnnl::stream& stream();
/// Sets the calling thread's OpenMP team size (oneDNN primitives run on OpenMP); a no-op when
/// it is already `n`. Primitives balance their work for the team size current at creation, so
/// kernels call this both when they create primitives and before they run them.
void setThreads(int n);

/// What each oneDNN kernel factory starts with: the node's configuration (its `supports` predicate
/// found one) and a fresh state for the pool's threads, the calling thread's team set to them.
template <class State, class Config>
std::shared_ptr<State> startFactory(ops::CompileContext& ctx, const std::optional<Config>& cfg, const char* factory) {
  GRAFT_ASSERT(cfg, "{}: {} on an unsupported node", ctx.node().describe(), factory);
  auto st = std::make_shared<State>();
  st->threads = ctx.pool().numThreads();
  setThreads(st->threads);
  return st;
}

/// Primitives in bf16 where the backend computes in bf16 and oneDNN has them, else in float32;
/// false when oneDNN has neither (the factory declines).
template <class Create>
bool createPreferringBf16(const Create& create) {
  return (bf16Compute() && create(true)) || create(false);
}

/// In a create(bf16) of createPreferringBf16, given the implementation oneDNN picked: false where
/// a bf16 attempt got oneDNN's reference loops (the float32 attempt follows); otherwise records it
/// for the step (in a bf16 backend with bf16ImplementationNote's ", bf16", or ", f32: " and
/// f32Why or the default reason) and returns true.
bool acceptImplementation(const std::string& impl, bool bf16, const char* f32Why = nullptr);

/// The channel block oneDNN's direct convolutions use on this machine (8 with AVX2, 16 with
/// AVX-512), found by asking oneDNN which layout it prefers; 0 when it prefers none.
int preferredChannelBlock();

/// Activation layouts of the cpu-layout pass: 0 plain, 8 or 16 channel-blocked with that block,
/// kChannelsLast NHWC (what oneDNN's brgemm convolutions on AVX-512 choose). A channels-last
/// tensor is held as the channel-blocked layout whose block is its whole channel count:
/// [N, 1, spatial..., C], the bytes of NHWC, so every blocked kernel and conversion serves it.
inline constexpr int kChannelsLast = -1;
/// The layout the cpu-layout pass keeps activations in. GRAFT_CPU_LAYOUT (read at each call:
/// "plain", "blocked", "nhwc", or "auto") forces one, so that tests run every layout on any host;
/// unset or "auto": the one oneDNN picks for a typical mid-network convolution on this CPU.
/// Throws graft::Error naming GRAFT_CPU_LAYOUT for any other value.
int activationLayout();
/// Whether GRAFT_CPU_LAYOUT names a layout (anything but unset or "auto"): then every graph takes it.
bool layoutForced();

/// A kernel variant's switch (GRAFT_CONV_WINOGRAD, GRAFT_CONV_CHAINS, GRAFT_MATMUL_SGEMM, GRAFT_CONV_1X1): Off
/// never, Auto where measured faster (the default), On wherever it applies (for tests).
enum class KernelMode { Off, Auto, On };
/// Environment variable `name`: "off", "auto" (or unset), "on", read at each call; any other value
/// throws graft::Error naming the variable.
KernelMode kernelModeFromEnv(const char* name);

/// Whether 3x3 convolutions may run on oneDNN's Winograd kernels (onednn_conv.cpp,
/// wantsWinograd). GRAFT_CONV_WINOGRAD sets it, a WinogradScope overrides it on its thread.
using WinogradMode = KernelMode;
WinogradMode winogradMode();
/// Auto's rule: whether a 3x3 stride-1 convolution with `inChannels` input channels and output
/// dims `y` ([N, C, H, W]) runs faster on the Winograd kernel on a host of this FMA class (half-rate
/// AVX-512: support::CpuFeatures::avx512HalfRate). Measured per shape, docs/cpu-backend.md.
bool winogradGains(int64_t inChannels, const Dims& y, bool avx512HalfRate);
class WinogradScope {
 public:
  explicit WinogradScope(WinogradMode mode);
  ~WinogradScope();
  WinogradScope(const WinogradScope&) = delete;
  WinogradScope& operator=(const WinogradScope&) = delete;

 private:
  int saved_;
};
/// Whether 1x1 convolutions run on graft's own kernels: conv1x1_avx2.cpp (8-channel blocks, AVX2
/// hosts; auto and on: wherever it applies) and conv1x1_avx512.cpp (channels last or 16-channel
/// blocks, AVX-512 hosts; auto: where it measured faster, on: wherever it applies). GRAFT_CONV_1X1
/// sets it; off keeps oneDNN's.
KernelMode conv1x1Mode();
/// Whether graft's 1x1 convolutions (conv1x1_avx2, conv1x1_avx512) write an output of `bytes`
/// with streaming (non-temporal) stores, so that its lines are not first read from memory:
/// GRAFT_CONV_1X1_STREAM, auto (the default) where the output is at least half the last-level cache
/// (support::lastLevelCacheBytes()) and no residual is added into it (which reads its lines into
/// the caches anyway); on: always; off: never. Smaller outputs stay in the caches, where the next
/// node finds them.
bool conv1x1Streams(int64_t bytes, bool residual);
/// Whether float32 matrix products whose right-hand operand is not a constant (training's weights
/// and gradients) run on oneDNN's sgemm (dnnl_sgemm) instead of its matmul primitive
/// (onednn_matmul.cpp). GRAFT_MATMUL_SGEMM sets it, an SgemmScope overrides it on its thread.
KernelMode sgemmMode();
/// Auto's rule: whether sgemm beats the matmul primitive for Y [M, N] = A' [M, K] B' [K, N] (A'
/// read transposed with transA, B' with transB), measured per shape (docs/cpu-backend.md).
bool sgemmGains(int64_t M, int64_t K, int64_t N, bool transA, bool transB);
class SgemmScope {
 public:
  explicit SgemmScope(KernelMode mode);
  ~SgemmScope();
  SgemmScope(const SgemmScope&) = delete;
  SgemmScope& operator=(const SgemmScope&) = delete;

 private:
  int saved_;
};

/// The layout of the cpu-layout-training pass: channels last wherever activationLayout() is not
/// plain (NHWC runs oneDNN's fast training kernels on AVX2 as on AVX-512 hosts, and has no padding
/// channels for the backward pass's comparisons to keep zero), plain otherwise; GRAFT_CPU_LAYOUT
/// "blocked" leaves training graphs plain, with a warning.
int trainingLayout();
/// The channel block a tensor with `channels` channels gets under `layout` (see kChannelsLast).
inline int64_t blockFor(int layout, int64_t channels) { return layout == kChannelsLast ? channels : layout; }
/// "plain", "blocked8", "blocked16" or "nhwc".
std::string layoutName(int layout);

/// The oneDNN element type the kernels use for `dt` (float only for now), or nullopt.
std::optional<memory::data_type> dnnlType(DataType dt);

Dims toDims(const Shape& s);
/// Row-major layout of `s` (a scalar is [1]).
memory::desc plainDesc(const Shape& s, memory::data_type dt = memory::data_type::f32);
/// Shape s in channel blocks of `block` (8 or 16) with oneDNN's blocked tag (nChw8c, nChw16c, ...),
/// also where s has exactly `block` channels (layoutDesc calls those channels last: the same
/// bytes, but oneDNN's blocked kernels take only the blocked tag).
memory::desc blockedDesc(const Shape& s, int block, memory::data_type dt = memory::data_type::f32);
/// Channel-blocked layout of logical shape `s` (rank 3 to 5) with channel block `block`;
/// plain when block is 0; channels-last (nwc, nhwc, ndhwc) when block is the channel count s[1]
/// (the same bytes as the blocked layout with that block).
memory::desc layoutDesc(const Shape& s, int block, memory::data_type dt = memory::data_type::f32);
/// The graft array shape that holds logical shape `s` channel-blocked: [N, ceil(C/b), ..., b].
Shape blockedShape(const Shape& s, int block);
/// Logical shape of a channel-blocked array shape with `channels` channels.
Shape unblockedShape(const Shape& physical, int64_t channels);

/// True when `t` is a tensor with a static shape and element type Float.
bool isStaticFloat(const ir::Tensor* t);

/// Runs `p` on the calling thread's stream and waits; oneDNN errors become InternalErrors.
void execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args);

/// A memory object over an array's buffer (oneDNN takes non-const pointers; it only writes
/// destinations).
memory wrap(const memory::desc& d, const NDArray& a);

/// What a factory returns when it turns a node down at compile time (oneDNN has no
/// implementation for that combination): the backend moves on to the next kernel.
inline ops::KernelFn decline() { return {}; }

/// Moves an activation between graft's layout (and type) and the primitive's when they differ
/// (plain convolutions outside the cpu-layout pass, bf16 primitives on float32 tensors); a no-op
/// otherwise.
/// Whether a and b lay out the same bytes: equal, or channels last and 16-channel blocks of a
/// 16-channel tensor.
bool sameBytes(const memory::desc& a, const memory::desc& b);

struct Adapter {
  memory::desc user, prim;
  dnnl::reorder toPrim, toUser;
  bool needed = false;
  void init(const memory::desc& u, const memory::desc& p, bool in, bool out) {
    prim = p;
    needed = !sameBytes(u, p);
    user = needed ? u : p;  // (a user layout with the primitive's bytes is read as the primitive's)
    if (!needed) return;
    if (in) toPrim = dnnl::reorder(memory(u, engine(), DNNL_MEMORY_NONE), memory(p, engine(), DNNL_MEMORY_NONE));
    if (out) toUser = dnnl::reorder(memory(p, engine(), DNNL_MEMORY_NONE), memory(u, engine(), DNNL_MEMORY_NONE));
  }
  /// Scratch in the primitive's layout (allocated per run: it lives only for this node).
  NDArray scratch() const { return NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(prim.get_size())}); }
  /// Input a as the primitive reads it: a itself, or its copy into `keep` in the primitive's layout.
  memory input(const NDArray& a, NDArray& keep) const {
    memory m = wrap(user, a);
    if (!needed) return m;
    keep = scratch();
    memory p = wrap(prim, keep);
    execute(toPrim, {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, p}});
    return p;
  }
  /// Where the primitive writes output y: y itself, or `keep` in its layout (then written()).
  memory output(NDArray& y, NDArray& keep) const {
    if (!needed) return wrap(user, y);
    keep = scratch();
    return wrap(prim, keep);
  }
  /// After the primitive wrote `m` (output()'s): y from it, where it was a scratch.
  void written(const memory& m, NDArray& y) const {
    if (needed) execute(toUser, {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, wrap(user, y)}});
  }
};

/// What a FusedConv can do with bf16 activations (convBf16Support, onednn_conv.cpp; for the
/// cpu-bf16-activations pass): `reads`: it runs a bf16 primitive that takes X as a bf16 tensor in
/// its layout; `writes`: that primitive can also write Y as bf16.
struct Bf16ConvSupport {
  bool reads = false, writes = false;
};
Bf16ConvSupport convBf16Support(const ir::Node& n);

/// Sliding-window geometry resolved from ONNX attributes against static shapes. oneDNN's
/// dilation is ONNX's minus one.
struct Window {
  Dims kernel, strides, dilation, padBegin, padEnd, out;
  /// padEnd was extended beyond the attribute's for ceil_mode.
  bool extendedEnd = false;
};

/// Layout of a node's activations: ai.graft::ChannelBlocked runs the ai.onnx op named by its
/// "op" attribute with input 0 and output 0 channel-blocked ("block", "channels"); other nodes
/// are plain.
struct NodeLayout {
  std::string op;  ///< the ai.onnx op type
  int block = 0;
  int64_t channels = 0;
  /// Logical shape of input 0 / output 0 (unblocked), or nullopt when inconsistent.
  std::optional<Shape> logical(const ir::Tensor* t) const;
};
NodeLayout nodeLayout(const ir::Node& n);
/// Input i of an ai.graft::ChannelBlocked node: its logical shape and channel block (0 when the
/// input is plain, per "blocked_inputs" / "input_channels"), or nullopt when inconsistent.
std::optional<std::pair<Shape, int>> blockedInput(const ir::Node& n, size_t i);
/// Output 0 of an ai.graft::ChannelBlocked node: its logical shape and block ("block" and
/// "channels"; block 0 when "blocked_output" is 0), or nullopt when inconsistent.
std::optional<std::pair<Shape, int>> blockedOutput(const ir::Node& n);
/// Resolves auto_pad/pads/strides/dilations for input spatial extents `in` and kernel extents
/// `kernel`; `ceilMode` extends padEnd so that oneDNN's floor formula gives ONNX's ceil output.
/// Returns nullopt when the attributes are invalid or the window does not fit (the reference
/// kernel then reports the error), and, unless `paddingOnlyWindows`, when some window covers
/// padding only (pools define those differently).
std::optional<Window> resolveWindow(const ir::Node& n, const Shape& in, const Shape& kernel, bool ceilMode = false,
                                    bool paddingOnlyWindows = true);

/// A fused activation (FusedConv/FusedMatMul/FusedGemm attributes "activation",
/// "activation_domain", "activation_alpha", "activation_beta") as oneDNN eltwise post-ops.
/// Returns false when oneDNN has no equivalent.
bool appendActivation(const ir::Node& n, dnnl::post_ops& po);

/// An operand whose layout the primitive chooses (weights). Packed once at compile time when
/// its data is constant, re-packed on every run otherwise (see the file comment).
class PackedOperand {
 public:
  /// `user`: the layout graft holds it in; `want`: the primitive's; `constant`: its data when
  /// known at compile time (may be nullptr).
  void init(const memory::desc& user, const memory::desc& want, const NDArray* constant);
  /// The memory to give the primitive for this run's value `a` of the operand.
  memory get(const NDArray& a);
  /// Whether it was packed once at init (a constant operand).
  bool isConstant() const { return constant_; }

 private:
  memory::desc user_, want_;
  memory packed_;
  NDArray storage_;
  bool constant_ = false, reorder_ = false;
  dnnl::reorder reorderPrim_;
};

}  // namespace graft::backends::cpu::onednn
