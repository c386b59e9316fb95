// oneDNN pooling for MaxPool (without the Indices output), AveragePool, GlobalAveragePool and
// GlobalMaxPool, on plain or (ai.graft::ChannelBlocked) channel-blocked activations, and their
// backward passes (ai.graft MaxPoolGrad, AveragePoolGrad) on plain activations. Float,
// 1-D to 3-D. Windows that cover padding only, and AveragePool's count_include_pad together
// with ceil_mode's extra end windows, are left to the reference kernel: ONNX defines them
// differently from oneDNN.
#include <limits>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vec_common.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu::onednn {
namespace {

struct PoolConfig {
  Shape x, y;  // logical
  int block = 0;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  Window win;
};

// The window and algorithm of MaxPool / AveragePool (or their gradients) with the attributes of
// `n` over c.x; false where oneDNN cannot run it: dilated average pools, and included padding
// that ceil_mode extends past the input's end.
bool resolvePoolWindow(const ir::Node& n, bool max, PoolConfig& c) {
  Shape in(c.x.begin() + 2, c.x.end());
  auto ks = n.attrInts("kernel_shape", {});
  if (ks.size() != in.size()) return false;
  if (!max && n.attrs().has("dilations")) return false;
  auto w = resolveWindow(n, in, Shape(ks.begin(), ks.end()), n.attrInt("ceil_mode", 0) != 0,
                         /*paddingOnlyWindows=*/false);
  if (!w) return false;
  c.win = *w;
  bool includePad = !max && n.attrInt("count_include_pad", 0) != 0;
  if (includePad && c.win.extendedEnd) return false;
  c.alg = max          ? dnnl::algorithm::pooling_max
          : includePad ? dnnl::algorithm::pooling_avg_include_padding
                       : dnnl::algorithm::pooling_avg_exclude_padding;
  return true;
}

// Whether the window's output shape is the node's pooled shape c.y.
bool outputMatchesWindow(const PoolConfig& c) {
  Shape want = {c.x[0], c.x[1]};
  want.insert(want.end(), c.win.out.begin(), c.win.out.end());
  return want == c.y;
}

std::optional<PoolConfig> poolConfig(const ir::Node& n) {
  NodeLayout l = nodeLayout(n);
  bool global = l.op == "GlobalAveragePool" || l.op == "GlobalMaxPool";
  bool max = l.op == "MaxPool" || l.op == "GlobalMaxPool";
  if (!global && !max && l.op != "AveragePool") return std::nullopt;
  if (n.numInputs() != 1 || n.numOutputs() < 1 || (n.numOutputs() > 1 && n.hasOutput(1))) return std::nullopt;
  auto x = l.logical(n.input(0)), y = l.logical(n.output(0));
  if (!x || !y || x->size() < 3 || x->size() > 5 || y->size() != x->size()) return std::nullopt;
  for (int64_t d : *x)
    if (d == 0) return std::nullopt;
  PoolConfig c;
  c.x = *x;
  c.y = *y;
  c.block = l.block;
  Shape in(c.x.begin() + 2, c.x.end());
  if (global) {
    c.win.kernel = Dims(in.begin(), in.end());
    c.win.strides = Dims(in.size(), 1);
    c.win.dilation = c.win.padBegin = c.win.padEnd = Dims(in.size(), 0);
    c.win.out = Dims(in.size(), 1);
    c.alg = max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
  } else {
    if (max && n.attrInt("storage_order", 0) != 0) return std::nullopt;  // only matters for Indices
    if (!resolvePoolWindow(n, max, c)) return std::nullopt;
  }
  if (!outputMatchesWindow(c)) return std::nullopt;
  return c;
}

bool supportsPool(const ir::Node& n) { return poolConfig(n).has_value(); }

struct PoolState {
  dnnl::primitive prim;
  memory::desc x, y, xPrim, yPrim;  // the node's layouts and the primitive's
  dnnl::reorder xIn, yOut;
  bool reorder = false;
  Shape yShape;
  int threads = 1;
  bool max = false;
};

ops::KernelFn makePool(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto cfg = poolConfig(n);
  auto st = startFactory<PoolState>(ctx, cfg, "makePool");
  const PoolConfig& c = *cfg;
  st->yShape = n.output(0)->info().shape();
  st->max = c.alg == dnnl::algorithm::pooling_max;
  st->x = layoutDesc(c.x, c.block);
  st->y = layoutDesc(c.y, c.block);
  // oneDNN pools plain activations with a simple loop; its jit kernels want channel blocks.
  // Plain activations (outside the cpu-layout pass: training graphs) go through blocked copies.
  int block = c.block ? c.block : preferredChannelBlock();
  st->reorder = block != c.block;
  st->xPrim = layoutDesc(c.x, block);
  st->yPrim = layoutDesc(c.y, block);
  try {
    using PF = dnnl::pooling_v2_forward;
    PF::desc d(dnnl::prop_kind::forward_inference, c.alg, st->xPrim, st->yPrim, c.win.strides, c.win.kernel,
               c.win.dilation, c.win.padBegin, c.win.padEnd);
    PF::primitive_desc pd(d, engine());
    noteImplementation(pd.impl_info_str());
    st->prim = PF(pd);
    if (st->reorder) {
      auto none = [](const memory::desc& m) { return memory(m, engine(), DNNL_MEMORY_NONE); };
      st->xIn = dnnl::reorder(none(st->x), none(st->xPrim));
      st->yOut = dnnl::reorder(none(st->yPrim), none(st->y));
    }
  } catch (const dnnl::error&) {
    return decline();
  }
  auto pool = [st](const NDArray& x, NDArray& y) {
    if (!st->reorder) {
      execute(st->prim, {{DNNL_ARG_SRC, wrap(st->x, x)}, {DNNL_ARG_DST, wrap(st->y, y)}});
      return;
    }
    NDArray xb = NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(st->xPrim.get_size())});
    NDArray yb = NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(st->yPrim.get_size())});
    memory xm = wrap(st->xPrim, xb), ym = wrap(st->yPrim, yb);
    execute(st->xIn, {{DNNL_ARG_FROM, wrap(st->x, x)}, {DNNL_ARG_TO, xm}});
    execute(st->prim, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}});
    execute(st->yOut, {{DNNL_ARG_FROM, ym}, {DNNL_ARG_TO, wrap(st->y, y)}});
  };
  return [st, pool](ops::KernelContext& k) {
    setThreads(st->threads);
    const NDArray& x = k.input(0);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, st->yShape);
    pool(x, y);
    // oneDNN's max pooling drops NaN; the reference (and torch) keep it. When the input holds a
    // NaN, the same primitive pools a mask of the NaN positions (padding pools as -inf, never 1):
    // every window that saw one gets NaN.
    if (!st->max || !anyNaN(x.data<float>(), x.numel(), k.pool())) return;
    NDArray mask = NDArray::uninitialized(DataType::Float, x.shape());
    const float* px = x.data<float>();
    float* pm = mask.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) pm[i] = px[i] != px[i] ? 1.0f : 0.0f;
    NDArray hit = NDArray::uninitialized(DataType::Float, st->yShape);
    pool(mask, hit);
    float* py = y.data<float>();
    const float* ph = hit.data<float>();
    for (int64_t i = 0; i < y.numel(); ++i)
      if (ph[i] > 0.0f) py[i] = std::numeric_limits<float>::quiet_NaN();
  };
}

// ai.graft MaxPoolGrad / AveragePoolGrad (dY, X) -> dX on plain layouts, with the forward's
// window rules (and the same cases left to the reference kernel). oneDNN's max-pooling backward
// reads the argmax from a workspace its training forward writes: the kernel runs that forward
// on X first (the recomputation the reference kernel does too). Padded channels of a blocked
// layout are zero in X and dY and dropped from dX.
// As ai.graft::ChannelBlocked (from cpu-layout-training): dY, X and dX channel-blocked alike.
std::optional<PoolConfig> poolGradConfig(const ir::Node& n) {
  bool wrapped = n.type() == "ChannelBlocked";
  std::string op = wrapped ? n.attrString("op", "") : n.type();
  if (wrapped &&
      (n.attrString("op_domain", "") != ops::kGraftDomain ||
       n.attrInts("blocked_inputs", {0}) != std::vector<int64_t>{0, 1} || n.attrInt("blocked_output", 1) != 1))
    return std::nullopt;
  if (op != "MaxPoolGrad" && op != "AveragePoolGrad") return std::nullopt;
  bool max = op == "MaxPoolGrad";
  if (n.numInputs() != 2 || n.numOutputs() != 1) return std::nullopt;
  if (!isStaticFloat(n.input(0)) || !isStaticFloat(n.input(1)) || !isStaticFloat(n.output(0))) return std::nullopt;
  PoolConfig c;
  c.x = n.input(1)->info().shape();
  c.y = n.input(0)->info().shape();
  Shape dx = n.output(0)->info().shape();
  if (wrapped) {
    auto y = blockedInput(n, 0), x = blockedInput(n, 1), out = blockedOutput(n);
    if (!x || !y || !out || out->second <= 0 || x->second != out->second || y->second != out->second ||
        out->first != x->first)
      return std::nullopt;
    c.block = out->second;
    c.x = x->first;
    c.y = y->first;
    dx = out->first;
  }
  if (c.x.size() < 3 || c.x.size() > 5 || c.y.size() != c.x.size() || dx != c.x) return std::nullopt;
  for (int64_t d : c.x)
    if (d == 0) return std::nullopt;
  if (!resolvePoolWindow(n, max, c) || !outputMatchesWindow(c)) return std::nullopt;
  return c;
}

bool supportsPoolGrad(const ir::Node& n) { return poolGradConfig(n).has_value(); }

// oneDNN's pooling on plain activations is a simple loop; its jit kernels want channel-blocked
// ones. The gradient kernel therefore reorders X and dY into the preferred block and dX back
// (three cheap passes) unless no block is preferred.
struct PoolGradState {
  dnnl::primitive fwd, bwd;
  memory::desc x, y, ws, xPrim, yPrim;  // user (plain) and primitive layouts
  dnnl::reorder xIn, yIn, dxOut;
  bool blocked = false, max = false;
  Shape xShape;
  int threads = 1;
  NDArray scratch(const memory::desc& d) const {
    return NDArray::uninitialized(DataType::UInt8, {static_cast<int64_t>(d.get_size())});
  }
};

ops::KernelFn makePoolGrad(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto cfg = poolGradConfig(n);
  auto st = startFactory<PoolGradState>(ctx, cfg, "makePoolGrad");
  const PoolConfig& c = *cfg;
  st->xShape = n.output(0)->info().shape();
  st->x = layoutDesc(c.x, c.block);
  st->y = layoutDesc(c.y, c.block);
  int block = c.block ? c.block : preferredChannelBlock();
  st->blocked = block != c.block;
  st->xPrim = layoutDesc(c.x, block);
  st->yPrim = layoutDesc(c.y, block);
  st->max = c.alg == dnnl::algorithm::pooling_max;
  try {
    using PF = dnnl::pooling_v2_forward;
    using PB = dnnl::pooling_v2_backward;
    PF::desc fd(dnnl::prop_kind::forward_training, c.alg, st->xPrim, st->yPrim, c.win.strides, c.win.kernel,
                c.win.dilation, c.win.padBegin, c.win.padEnd);
    PF::primitive_desc fpd(fd, engine());
    PB::desc bd(c.alg, st->xPrim, st->yPrim, c.win.strides, c.win.kernel, c.win.dilation, c.win.padBegin, c.win.padEnd);
    PB::primitive_desc bpd(bd, engine(), fpd);
    noteImplementation(bpd.impl_info_str());
    if (st->max) {
      st->fwd = PF(fpd);
      st->ws = fpd.workspace_desc();
    }
    st->bwd = PB(bpd);
    if (st->blocked) {
      auto none = [](const memory::desc& d) { return memory(d, engine(), DNNL_MEMORY_NONE); };
      st->xIn = dnnl::reorder(none(st->x), none(st->xPrim));
      st->yIn = dnnl::reorder(none(st->y), none(st->yPrim));
      st->dxOut = dnnl::reorder(none(st->xPrim), none(st->x));
    }
  } catch (const dnnl::error&) {
    return decline();
  }
  return [st](ops::KernelContext& k) {
    setThreads(st->threads);
    NDArray& dx = k.allocOutputUninit(0, DataType::Float, st->xShape);
    NDArray xb, dyb, dxb, y, ws;
    memory x = wrap(st->x, k.input(1)), dy = wrap(st->y, k.input(0)), dxm = wrap(st->x, dx);
    if (st->blocked) {
      dyb = st->scratch(st->yPrim);
      memory m = wrap(st->yPrim, dyb);
      execute(st->yIn, {{DNNL_ARG_FROM, dy}, {DNNL_ARG_TO, m}});
      dy = m;
      dxb = st->scratch(st->xPrim);
      dxm = wrap(st->xPrim, dxb);
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_SRC, dxm}};
    if (st->max) {
      if (st->blocked) {
        xb = st->scratch(st->xPrim);
        memory m = wrap(st->xPrim, xb);
        execute(st->xIn, {{DNNL_ARG_FROM, x}, {DNNL_ARG_TO, m}});
        x = m;
      }
      y = st->scratch(st->yPrim);
      ws = st->scratch(st->ws);
      memory wsm = wrap(st->ws, ws);
      execute(st->fwd, {{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, wrap(st->yPrim, y)}, {DNNL_ARG_WORKSPACE, wsm}});
      args[DNNL_ARG_WORKSPACE] = wsm;
    }
    execute(st->bwd, args);
    if (st->blocked) execute(st->dxOut, {{DNNL_ARG_FROM, dxm}, {DNNL_ARG_TO, wrap(st->x, dx)}});
  };
}

}  // namespace
}  // namespace graft::backends::cpu::onednn

GRAFT_REGISTER_CPU_KERNELS(onednn_pool) {
  using namespace graft::backends::cpu::onednn;
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
    r.add({"", op, "onednn_pool", supportsPool, makePool});
  r.add({graft::ops::kGraftDomain, "ChannelBlocked", "onednn_pool", supportsPool, makePool});
  for (const char* op : {"MaxPoolGrad", "AveragePoolGrad"})
    r.add({graft::ops::kGraftDomain, op, "onednn_pool_grad", supportsPoolGrad, makePoolGrad});
  r.add({graft::ops::kGraftDomain, "ChannelBlocked", "onednn_pool_grad", supportsPoolGrad, makePoolGrad});
}
