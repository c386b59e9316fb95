// oneDNN normalisations: BatchNormalization in inference mode (running statistics), LRN (odd
// sizes, where ONNX's window is symmetric like oneDNN's). BatchNormalization and LRN also run channel-blocked (ai.graft::ChannelBlocked).
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::backends::cpu::onednn {
namespace {

// BatchNormalization(X, scale, B, input_mean, input_var) -> Y, inference mode only.
bool supportsBatchNorm(const ir::Node& n) {
  NodeLayout l = nodeLayout(n);
  if (l.op != "BatchNormalization" || n.numInputs() != 5) return false;
  if (n.attrInt("training_mode", 0) != 0) return false;
  for (size_t i = 1; i < n.numOutputs(); ++i)
    if (n.hasOutput(i)) return false;
  auto x = l.logical(n.input(0)), y = l.logical(n.output(0));
  if (!x || !y || *x != *y || x->size() < 2 || x->size() > 5 || (*x)[0] == 0) return false;
  for (size_t i = 1; i < 5; ++i)
    if (!isStaticFloat(n.input(i)) || n.input(i)->info().shape() != Shape{(*x)[1]}) return false;
  return true;
}

struct BatchNormState {
  dnnl::primitive prim;
  memory::desc x, c;
  Shape yShape;
  int threads = 1;
};

ops::KernelFn makeBatchNorm(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  NodeLayout l = nodeLayout(n);
  Shape x = *l.logical(n.input(0));
  auto st = std::make_shared<BatchNormState>();
  st->threads = ctx.pool().numThreads();
  st->yShape = n.output(0)->info().shape();
  st->x = x.size() >= 3 ? layoutDesc(x, l.block) : plainDesc(x);
  st->c = plainDesc({x[1]});
  setThreads(st->threads);
  try {
    using BF = dnnl::batch_normalization_forward;
    auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                 dnnl::normalization_flags::use_shift;
    BF::desc d(dnnl::prop_kind::forward_inference, st->x, n.attrFloat("epsilon", 1e-5f), flags);
    BF::primitive_desc pd(d, engine());
    noteImplementation(pd.impl_info_str());
    st->prim = BF(pd);
  } catch (const dnnl::error&) {
    return decline();
  }
  return [st](ops::KernelContext& k) {
    setThreads(st->threads);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, st->yShape);
    execute(st->prim, {{DNNL_ARG_SRC, wrap(st->x, k.input(0))},
                       {DNNL_ARG_SCALE, wrap(st->c, k.input(1))},
                       {DNNL_ARG_SHIFT, wrap(st->c, k.input(2))},
                       {DNNL_ARG_MEAN, wrap(st->c, k.input(3))},
                       {DNNL_ARG_VARIANCE, wrap(st->c, k.input(4))},
                       {DNNL_ARG_DST, wrap(st->x, y)}});
  };
}

// LRN across channels: y = x / (bias + alpha / size * sum of squares over the size window)^beta.
bool supportsLrn(const ir::Node& n) {
  NodeLayout l = nodeLayout(n);
  if (l.op != "LRN" || n.numInputs() != 1 || n.numOutputs() != 1) return false;
  int64_t size = n.attrInt("size", 0);
  if (size <= 0 || size % 2 == 0) return false;
  auto x = l.logical(n.input(0)), y = l.logical(n.output(0));
  if (!x || !y || *x != *y || x->size() < 3 || x->size() > 5) return false;
  for (int64_t d : *x)
    if (d == 0) return false;
  return n.attrFloat("bias", 1.f) > 0.f;
}

ops::KernelFn makeLrn(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  NodeLayout l = nodeLayout(n);
  Shape x = *l.logical(n.input(0));
  auto st = std::make_shared<BatchNormState>();
  st->threads = ctx.pool().numThreads();
  st->yShape = n.output(0)->info().shape();
  st->x = layoutDesc(x, l.block);
  setThreads(st->threads);
  try {
    using LF = dnnl::lrn_forward;
    LF::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::lrn_across_channels, st->x, n.attrInt("size"),
               n.attrFloat("alpha", 1e-4f), n.attrFloat("beta", 0.75f), n.attrFloat("bias", 1.f));
    LF::primitive_desc pd(d, engine());
    noteImplementation(pd.impl_info_str());
    st->prim = LF(pd);
  } catch (const dnnl::error&) {
    return decline();
  }
  return [st](ops::KernelContext& k) {
    setThreads(st->threads);
    NDArray& y = k.allocOutputUninit(0, DataType::Float, st->yShape);
    execute(st->prim, {{DNNL_ARG_SRC, wrap(st->x, k.input(0))}, {DNNL_ARG_DST, wrap(st->x, y)}});
  };
}

}  // namespace
}  // namespace graft::backends::cpu::onednn

GRAFT_REGISTER_CPU_KERNELS(onednn_norm) {
  using namespace graft::backends::cpu::onednn;
  r.add({"", "BatchNormalization", "onednn_batchnorm", supportsBatchNorm, makeBatchNorm});
  r.add({graft::ops::kGraftDomain, "ChannelBlocked", "onednn_batchnorm", supportsBatchNorm, makeBatchNorm});
  r.add({"", "LRN", "onednn_lrn", supportsLrn, makeLrn});
  r.add({graft::ops::kGraftDomain, "ChannelBlocked", "onednn_lrn", supportsLrn, makeLrn});
  // Softmax and LogSoftmax run graft's vectorised kernel (vec_norm.cpp): as fast as oneDNN's
  // softmax along the innermost axis, about 6x faster along others (vec_kernels_bench), and NaN
  // propagates through a row as in PyTorch (oneDNN's gives 0 next to a NaN); oneDNN 2.6's
  // softmax_log also deviates by about 15 ulp from PyTorch's log_softmax.
}
