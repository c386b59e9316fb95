#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/fused_activation.hpp"

#include <mutex>

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/reorder_stats.hpp"
#include "ops/conv_util.hpp"
#include "ops/elementwise_table.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/cpu_features.hpp"
#include "support/logging.hpp"

namespace graft::backends::cpu::onednn {

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    // GRAFT_CPU_ISA caps oneDNN's kernels too (it reads the cap once, before its first primitive).
    using support::CpuIsa;
    CpuIsa isa = support::cpuIsaLimit();
    if (isa != CpuIsa::Native) {
      dnnl::cpu_isa cap = isa == CpuIsa::Baseline ? dnnl::cpu_isa::sse41
                          : isa == CpuIsa::Avx2   ? dnnl::cpu_isa::avx2
                                                  : dnnl::cpu_isa::avx512_core_bf16;
      // Refused when too late (a primitive exists already): oneDNN then keeps its own choice.
      if (dnnl::set_max_cpu_isa(cap) != dnnl::status::success)
        GRAFT_LOG_WARN("GRAFT_CPU_ISA: oneDNN did not accept the ISA limit; its kernels use the whole CPU");
    }
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

void setThreads(int n) {
  if (n > 0 && omp_get_max_threads() != n) omp_set_num_threads(n);
}

int preferredChannelBlock() {
  static const int block = [] {
    try {
      // A typical mid-network 3x3 convolution: whatever activation layout oneDNN picks for it is
      // the one its fastest convolutions use on this ISA.
      auto any = memory::format_tag::any;
      memory::desc src({1, 64, 14, 14}, memory::data_type::f32, any), wei({64, 64, 3, 3}, memory::data_type::f32, any),
          dst({1, 64, 14, 14}, memory::data_type::f32, any);
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, wei,
                                        dst, {1, 1}, {1, 1}, {1, 1});
      dnnl::convolution_forward::primitive_desc pd(d, engine());
      const dnnl_memory_desc_t& md = pd.dst_desc().data;
      if (md.format_kind != dnnl_blocked) return 0;
      const auto& b = md.format_desc.blocking;
      if (b.inner_nblks == 1 && b.inner_idxs[0] == 1 && b.strides[1] > b.strides[2]) return static_cast<int>(b.inner_blks[0]);
      return 0;
    } catch (const dnnl::error&) {
      return 0;
    }
  }();
  return block;
}

namespace {
// oneDNN's free choice for the probe convolution of preferredChannelBlock: channel-blocked (its
// block), channels-last, or neither (0).
int probedLayout() {
  static const int layout = [] {
    if (int b = preferredChannelBlock()) return b;
    try {
      auto any = memory::format_tag::any;
      memory::desc src({1, 64, 14, 14}, memory::data_type::f32, any), wei({64, 64, 3, 3}, memory::data_type::f32, any),
          dst({1, 64, 14, 14}, memory::data_type::f32, any);
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                        wei, dst, {1, 1}, {1, 1}, {1, 1});
      dnnl::convolution_forward::primitive_desc pd(d, engine());
      if (pd.dst_desc() == memory::desc({1, 64, 14, 14}, memory::data_type::f32, memory::format_tag::nhwc))
        return kChannelsLast;
      return 0;
    } catch (const dnnl::error&) {
      return 0;
    }
  }();
  return layout;
}
}  // namespace

bool layoutForced() {
  const char* env = std::getenv("GRAFT_CPU_LAYOUT");
  return env && *env && std::string(env) != "auto";
}

int activationLayout() {
  if (!layoutForced()) return probedLayout();
  std::string v = std::getenv("GRAFT_CPU_LAYOUT");
  if (v == "plain") return 0;
  if (v == "nhwc") return kChannelsLast;
  if (v == "blocked") {
    if (int b = preferredChannelBlock()) return b;
    return support::cpuFeatures().avx512f ? 16 : 8;
  }
  GRAFT_THROW("GRAFT_CPU_LAYOUT: expected plain, blocked, nhwc or auto, got '{}'", v);
}

KernelMode kernelModeFromEnv(const char* name) {
  const char* env = std::getenv(name);
  std::string v = env ? env : "";
  if (v.empty() || v == "auto") return KernelMode::Auto;
  if (v == "off") return KernelMode::Off;
  if (v == "on") return KernelMode::On;
  GRAFT_THROW("{}: expected off, auto or on, got '{}'", name, v);
}

namespace {
thread_local int winogradOverride = -1;  // a KernelMode, or -1: none
thread_local int sgemmOverride = -1;
}  // namespace

WinogradMode winogradMode() {
  if (winogradOverride >= 0) return static_cast<WinogradMode>(winogradOverride);
  return kernelModeFromEnv("GRAFT_CONV_WINOGRAD");
}

WinogradScope::WinogradScope(WinogradMode mode) : saved_(winogradOverride) {
  winogradOverride = static_cast<int>(mode);
}
WinogradScope::~WinogradScope() { winogradOverride = saved_; }

KernelMode conv1x1Mode() { return kernelModeFromEnv("GRAFT_CONV_1X1"); }

bool conv1x1Streams(int64_t bytes, bool residual) {
  // Measured on the half-rate AVX-512 host (32 MB last-level cache; docs/cpu-backend.md, "1x1
  // convolutions on AVX-512"): a 25.7 MB output ran 150 -> 187 GFLOP/s streamed; squeezenet1_1
  // b8's Concats ran 25% slower after streamed 6 MB outputs; with residuals streamed as well,
  // resnet50 b8 under GRAFT_CPU_ISA=avx2 ran 262-269 -> 277-285 ms.
  switch (kernelModeFromEnv("GRAFT_CONV_1X1_STREAM")) {
    case KernelMode::Off:
      return false;
    case KernelMode::On:
      return true;
    default:
      return !residual && bytes >= support::lastLevelCacheBytes() / 2;
  }
}

KernelMode sgemmMode() {
  if (sgemmOverride >= 0) return static_cast<KernelMode>(sgemmOverride);
  return kernelModeFromEnv("GRAFT_MATMUL_SGEMM");
}

SgemmScope::SgemmScope(KernelMode mode) : saved_(sgemmOverride) { sgemmOverride = static_cast<int>(mode); }
SgemmScope::~SgemmScope() { sgemmOverride = saved_; }

bool sgemmGains(int64_t M, int64_t K, int64_t N, bool transA, bool transB) {
  // Measured on bert4 b8's training step (half-rate AVX-512, 2 threads; docs/cpu-backend.md): sgemm
  // took 2-5% off most of its 1024-row products in every orientation, but lost 20% on A B' with B'
  // read transposed and K > N (1024 x 3072 x 768: 23 -> 28 ms); standalone, it lost 10-40% on
  // 256-row products (mlp b256's). Where oneDNN's matmul primitive has no brgemm kernel (AVX2
  // hosts) it runs the same jit gemm as sgemm: no difference measured.
  constexpr int64_t kMinRows = 512, kMinDim = 256;
  if (M < kMinRows || N < kMinDim || K < kMinDim) return false;
  return !(transB && !transA && K > N);
}

int trainingLayout() {
  const char* env = std::getenv("GRAFT_CPU_LAYOUT");
  std::string v = env ? env : "";
  int layout = activationLayout();  // validates the variable
  if (v == "blocked") {
    static std::once_flag warned;
    std::call_once(warned, [] {
      GRAFT_LOG_WARN(
          "GRAFT_CPU_LAYOUT=blocked: training graphs stay plain (cpu-layout-training keeps them channels last "
          "or plain only)");
    });
    return 0;
  }
  return layout == 0 ? 0 : kChannelsLast;
}

std::string layoutName(int layout) {
  if (layout == kChannelsLast) return "nhwc";
  if (layout == 0) return "plain";
  return fmt::format("blocked{}", layout);
}

std::optional<memory::data_type> dnnlType(DataType dt) {
  if (dt == DataType::Float) return memory::data_type::f32;
  return std::nullopt;
}

Dims toDims(const Shape& s) {
  if (s.empty()) return {1};
  return Dims(s.begin(), s.end());
}

memory::desc plainDesc(const Shape& s, memory::data_type dt) {
  Dims d = toDims(s);
  Dims strides(d.size(), 1);
  for (int64_t i = static_cast<int64_t>(d.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * d[i + 1];
  return memory::desc(d, dt, strides);
}

memory::desc blockedDesc(const Shape& s, int block, memory::data_type dt) {
  using tag = memory::format_tag;
  tag t = tag::undef;
  if (block == 8) t = s.size() == 3 ? tag::aBc8b : s.size() == 4 ? tag::aBcd8b : s.size() == 5 ? tag::aBcde8b : tag::undef;
  if (block == 16)
    t = s.size() == 3 ? tag::aBc16b : s.size() == 4 ? tag::aBcd16b : s.size() == 5 ? tag::aBcde16b : tag::undef;
  GRAFT_ASSERT(t != tag::undef, "no channel-blocked layout of rank {} with block {}", s.size(), block);
  return memory::desc(toDims(s), dt, t);
}

memory::desc layoutDesc(const Shape& s, int block, memory::data_type dt) {
  if (block == 0) return plainDesc(s, dt);
  using tag = memory::format_tag;
  // Channels-last: the block of all channels (the same bytes as nChwXc with X = C).
  if (s.size() >= 3 && s.size() <= 5 && block == s[1])
    return memory::desc(toDims(s), dt, s.size() == 3 ? tag::acb : s.size() == 4 ? tag::acdb : tag::acdeb);
  return blockedDesc(s, block, dt);
}

bool sameBytes(const memory::desc& a, const memory::desc& b) {
  if (a == b) return true;
  memory::dims d = a.dims();
  if (d != b.dims() || a.data_type() != b.data_type() || d.size() < 3 || d.size() > 5 || d[1] != 16) return false;
  Shape s(d.begin(), d.end());
  memory::desc last = layoutDesc(s, 16, a.data_type());  // block = channels: channels last
  memory::desc b16 = blockedDesc(s, 16, a.data_type());
  return (a == last || a == b16) && (b == last || b == b16);
}

Shape blockedShape(const Shape& s, int block) {
  GRAFT_ASSERT(s.size() >= 3 && block > 0, "blockedShape of {} with block {}", shapeToString(s), block);
  Shape p = s;
  p[1] = (s[1] + block - 1) / block;
  p.push_back(block);
  return p;
}

Shape unblockedShape(const Shape& p, int64_t channels) {
  GRAFT_ASSERT(p.size() >= 4, "unblockedShape of {}", shapeToString(p));
  Shape s(p.begin(), p.end() - 1);
  s[1] = channels;
  return s;
}

bool isStaticFloat(const ir::Tensor* t) {
  return t && t->type().isTensor() && t->info().isStatic() && t->info().dataType() == DataType::Float;
}

void execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args) {
  try {
    bool reorder = p.get_kind() == dnnl::primitive::kind::reorder;
    auto t0 = reorder ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    p.execute(stream(), args);
    stream().wait();
    if (reorder) {
      auto to = args.find(DNNL_ARG_TO);
      int64_t bytes = to == args.end() ? 0 : static_cast<int64_t>(to->second.get_desc().get_size());
      addReorder(bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  } catch (const dnnl::error& e) {
    throw InternalError(fmt::format("oneDNN primitive failed: {}", e.what()));
  }
}

memory wrap(const memory::desc& d, const NDArray& a) {
  return memory(d, engine(), const_cast<void*>(a.rawData()));
}

std::optional<Window> resolveWindow(const ir::Node& n, const Shape& in, const Shape& kernel, bool ceilMode,
                                    bool paddingOnlyWindows) {
  // The reference's window (ops/conv_util.hpp); what it refuses, the reference kernel reports.
  ops::Window ow;
  try {
    ops::WindowAttrs a = ops::parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
    a.ceilMode = ceilMode;
    ow = ops::resolveWindow(a, in, kernel);
  } catch (const Error&) {
    return std::nullopt;
  }
  Window w;
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t s = ow.stride[i], ext = (ow.kernel[i] - 1) * ow.dilation[i] + 1, pb = ow.padBegin[i], pe = ow.padEnd[i];
    if (in[i] <= 0) return std::nullopt;
    // oneDNN derives the output extent with floor: pad the end for the ceil_mode windows.
    int64_t need = (ow.out[i] - 1) * s + ext - in[i] - pb;
    if (need > pe) {
      w.extendedEnd = true;
      pe = need;
    }
    // Windows that cover padding only: ONNX's pools define them differently from oneDNN's.
    if (!paddingOnlyWindows && (pb >= ext || (ow.out[i] - 1) * s >= in[i] + pb)) return std::nullopt;
    w.kernel.push_back(ow.kernel[i]);
    w.strides.push_back(s);
    w.dilation.push_back(ow.dilation[i] - 1);
    w.padBegin.push_back(pb);
    w.padEnd.push_back(pe);
    w.out.push_back(ow.out[i]);
  }
  return w;
}

NodeLayout nodeLayout(const ir::Node& n) {
  NodeLayout l;
  if (n.domain() == ops::kGraftDomain && n.type() == "ChannelBlocked") {
    // The kernels that read a NodeLayout take ai.onnx ops blocked at input 0 and output 0 only.
    bool standard = n.attrString("op_domain", "").empty() &&
                    n.attrInts("blocked_inputs", {0}) == std::vector<int64_t>{0} &&
                    n.attrInt("blocked_output", 1) == 1 && !n.attrs().has("input_channels");
    l.op = standard ? n.attrString("op", "") : std::string();
    l.block = static_cast<int>(n.attrInt("block", 0));
    l.channels = n.attrInt("channels", 0);
  } else {
    l.op = n.domain().empty() ? n.type() : std::string();
  }
  return l;
}

std::optional<Shape> NodeLayout::logical(const ir::Tensor* t) const {
  if (!isStaticFloat(t)) return std::nullopt;
  Shape s = t->info().shape();
  if (block == 0) return s;
  if (block < 0 || s.size() < 4 || s.size() > 6 || s.back() != block || channels <= 0) return std::nullopt;
  Shape u = unblockedShape(s, channels);
  if (blockedShape(u, block) != s) return std::nullopt;
  return u;
}

// A ChannelBlocked node's input i: its logical shape and block (0 when plain), or nullopt.
std::optional<std::pair<Shape, int>> blockedInput(const ir::Node& n, size_t i) {
  std::vector<int64_t> idx = n.attrInts("blocked_inputs", {0});
  std::vector<int64_t> channels = n.attrInts("input_channels", {});
  const Shape& p = n.input(i)->info().shape();
  for (size_t k = 0; k < idx.size(); ++k) {
    if (idx[k] != static_cast<int64_t>(i)) continue;
    if (k >= channels.size() || p.size() < 4 || p.back() <= 0) return std::nullopt;
    int b = static_cast<int>(p.back());
    Shape u = unblockedShape(p, channels[k]);
    if (blockedShape(u, b) != p) return std::nullopt;
    return std::make_pair(u, b);
  }
  return std::make_pair(p, 0);
}

std::optional<std::pair<Shape, int>> blockedOutput(const ir::Node& n) {
  const Shape& p = n.output(0)->info().shape();
  if (!n.attrInt("blocked_output", 1)) return std::make_pair(p, 0);
  int b = static_cast<int>(n.attrInt("block", 0));
  int64_t channels = n.attrInt("channels", 0);
  if (b <= 0 || channels <= 0 || p.size() < 4 || p.back() != b) return std::nullopt;
  Shape u = unblockedShape(p, channels);
  if (blockedShape(u, b) != p) return std::nullopt;
  return std::make_pair(u, b);
}

bool activationAfterPrimitive(const ir::Node& n) {
  std::string act = n.attrString("activation", ""), dom = n.attrString("activation_domain", "");
  if (act.empty()) return false;
  // The post-ops that give the formula's value for NaN and ±inf too: eltwise_relu with alpha != 0
  // (compare and blend: NaN * alpha is NaN), hardswish and gelu_tanh (x times a finite factor).
  // Relu (eltwise_relu with alpha 0: vmaxps, 0 for NaN), Clip and HardSigmoid (clip_v2: max/min)
  // and the exp-based ones (logistic, tanh, elu, soft_relu: exp clamps its argument with
  // vminps/vmaxps, which return the bound for NaN) do not. cpu_vs_reference_test's
  // *_special_values cases check every activation either way.
  if (dom.empty() && act == "LeakyRelu") return n.attrFloat("activation_alpha", 0.f) == 0.f;
  if (dom.empty() && act == "HardSwish") return false;
  if (dom == "ai.graphcore" && act == "Gelu") return false;
  if (dom == "ai.graft" && act == "GeluErf") return false;
  return true;
}

bool appendActivation(const ir::Node& n, dnnl::post_ops& po) {
  std::string act = n.attrString("activation", ""), dom = n.attrString("activation_domain", "");
  float alpha = n.attrFloat("activation_alpha", 0.f), beta = n.attrFloat("activation_beta", 0.f);
  using A = dnnl::algorithm;
  if (act.empty() || activationAfterPrimitive(n)) return true;
  if (dom.empty() && act == "Clip") {
    po.append_eltwise(1.f, A::eltwise_clip_v2, alpha, beta);
    return true;
  }
  const ops::ew::Row* row = ops::ew::find(dom, act);
  if (!row || !row->postOp()) return false;
  // The Dnnl column of the elementwise table, with the row's parameters as oneDNN's alpha, beta.
  static constexpr A kAlgorithm[] = {
#define GRAFT_EW_X(Id, Type, Dom, Code, Ar, Pred, Zero, Ty, Cost, Inpl, Dnnl, ...) A::Dnnl,
      GRAFT_EW_ALL(GRAFT_EW_X)
#undef GRAFT_EW_X
  };
  po.append_eltwise(1.f, kAlgorithm[static_cast<int>(row->op)], alpha, beta);
  if (row->op == ops::ew::Op::HardSigmoid) po.append_eltwise(1.f, A::eltwise_clip_v2, 0.f, 1.f);
  return true;
}

void PackedOperand::init(const memory::desc& user, const memory::desc& want, const NDArray* constant) {
  user_ = user;
  want_ = want;
  reorder_ = user != want;
  constant_ = constant != nullptr;
  if (!reorder_) return;
  storage_ = NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(want.get_size())});
  packed_ = memory(want, engine(), storage_.rawData());
  reorderPrim_ = dnnl::reorder(memory(user, engine(), DNNL_MEMORY_NONE), packed_);
  if (constant_) {
    memory src = wrap(user, *constant);
    execute(reorderPrim_, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, packed_}});
  }
}

memory PackedOperand::get(const NDArray& a) {
  if (!reorder_) return wrap(user_, a);
  if (!constant_) execute(reorderPrim_, {{DNNL_ARG_FROM, wrap(user_, a)}, {DNNL_ARG_TO, packed_}});
  return packed_;
}

bool acceptImplementation(const std::string& impl, bool bf16, const char* f32Why) {
  if (bf16 && isReferenceImplementation(impl)) return false;
  if (!bf16Compute())
    noteImplementation(impl);
  else
    noteImplementation(f32Why ? bf16ImplementationNote(impl, bf16, f32Why) : bf16ImplementationNote(impl, bf16));
  return true;
}

}  // namespace graft::backends::cpu::onednn

namespace graft::backends::cpu {
namespace {
std::atomic<int64_t> reorderCount{0}, reorderBytes{0}, reorderNanos{0};
}  // namespace

ReorderStats reorderStats() {
  return {reorderCount.load(), reorderBytes.load(), static_cast<double>(reorderNanos.load()) * 1e-9};
}

void resetReorderStats() {
  reorderCount = 0;
  reorderBytes = 0;
  reorderNanos = 0;
}

void addReorder(int64_t bytes, double seconds) {
  reorderCount.fetch_add(1, std::memory_order_relaxed);
  reorderBytes.fetch_add(bytes, std::memory_order_relaxed);
  reorderNanos.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
}

}  // namespace graft::backends::cpu
