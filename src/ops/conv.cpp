// Conv and ConvTranspose (1-D, 2-D, 3-D and beyond; grouped, strided, dilated, padded).
// The loops live in ops/conv_util.hpp (convDirect, convTransposeDirect) so that integer and
// quantized convolutions can reuse them; this file adds attribute handling and float element
// access, accumulating in double.
#include <algorithm>

#include "ops/conv_util.hpp"
#include "ops/cost.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

NDArray checkedBias(const KernelContext& k, int64_t channels, DataType dt, const std::string& what) {
  if (!k.hasInput(2)) return {};
  const NDArray& b = k.input(2);
  GRAFT_CHECK(b.rank() == 1 && b.dim(0) == channels, "{}: bias B must have shape [{}], got {}", what, channels,
              shapeToString(b.shape()));
  GRAFT_CHECK(b.dtype() == dt, "{}: bias B has data type {}, X has {}", what, dtypeName(b.dtype()), dtypeName(dt));
  return b;
}

KernelFn convKernel(CompileContext& c) {
  const auto& n = c.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
  int64_t group = n.attrInt("group", 1);
  std::string what = wa.what;
  GRAFT_CHECK(group >= 1, "{}: group must be >= 1, got {}", what, group);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& w = k.input(1);
    GRAFT_CHECK(w.dtype() == x.dtype(), "{}: W has data type {}, X has {}", what, dtypeName(w.dtype()),
                dtypeName(x.dtype()));
    ConvShape s = convShapeOf(wa, x.shape(), w.shape(), group);
    NDArray b = checkedBias(k, s.outChannels, x.dtype(), what);
    Shape ys = {s.batch, s.outChannels};
    ys.insert(ys.end(), s.win.out.begin(), s.win.out.end());
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      NDArray& y = k.allocOutputUninit(0, x.dtype(), ys);
      const T* xp = x.data<T>();
      const T* wp = w.data<T>();
      const T* bp = b.valid() ? b.data<T>() : nullptr;
      T* yp = y.data<T>();
      convDirect<double>(
          s, [&](int64_t i) { return static_cast<double>(static_cast<C>(xp[i])); },
          [&](int64_t i) { return static_cast<double>(static_cast<C>(wp[i])); },
          [&](int64_t i, int64_t oc, double acc) {
            if (bp) acc += static_cast<double>(static_cast<C>(bp[oc]));
            yp[i] = static_cast<T>(static_cast<C>(acc));
          });
    });
  };
}

KernelFn convTransposeKernel(CompileContext& c) {
  const auto& n = c.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
  int64_t group = n.attrInt("group", 1);
  std::vector<int64_t> outputPadding = n.attrInts("output_padding", {});
  std::vector<int64_t> outputShape = n.attrInts("output_shape", {});
  std::string what = wa.what;
  GRAFT_CHECK(group >= 1, "{}: group must be >= 1, got {}", what, group);
  checkOutputAttrs(what, outputPadding, outputShape);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& w = k.input(1);
    GRAFT_CHECK(w.dtype() == x.dtype(), "{}: W has data type {}, X has {}", what, dtypeName(w.dtype()),
                dtypeName(x.dtype()));
    ConvShape s = transposedConvShape(wa, x.shape(), w.shape(), group, outputPadding, outputShape);
    const Window& win = s.win;
    NDArray b = checkedBias(k, s.outChannels, x.dtype(), what);
    Shape ys = {s.batch, s.outChannels};
    ys.insert(ys.end(), win.out.begin(), win.out.end());
    int64_t total = shapeNumel(ys);
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      const T* xp = x.data<T>();
      const T* wp = w.data<T>();
      NDArray& y = k.allocOutputUninit(0, x.dtype(), ys);
      NDArray accArr(DataType::Double, ys);  // zero-filled; an NDArray so that size limits apply
      double* acc = accArr.data<double>();
      convTransposeDirect<double>(
          s, [&](int64_t i) { return static_cast<double>(static_cast<C>(xp[i])); },
          [&](int64_t i) { return static_cast<double>(static_cast<C>(wp[i])); }, acc);
      T* yp = y.data<T>();
      int64_t block = shapeNumel(win.out);
      for (int64_t i = 0; i < total; ++i) {
        double v = acc[i];
        if (b.valid()) v += static_cast<double>(static_cast<C>(b.data<T>()[(i / block) % s.outChannels]));
        yp[i] = static_cast<T>(static_cast<C>(v));
      }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(conv) {
  r.add("Conv").setReference(convKernel).setCost([](const ir::Node& n) {
    return cost::convolution(n.output(0), n.input(1));
  });
  r.add("ConvTranspose").setReference(convTransposeKernel).setCost([](const ir::Node& n) {
    // W is [C, M / group, k...]: each output element gathers |W| / C multiply-adds.
    return 2.0 * cost::numel(n.output(0)) * cost::numel(n.input(1)) /
           std::max<double>(1, static_cast<double>(cost::dim(n.input(0), 1)));
  });
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
// Conv differentiates into the ai.graft gradient ops of conv_grad.cpp (kernel libraries have
// backward-data and backward-weights primitives for them); ConvTranspose into convolutions:
//   Conv:          dX = ConvGradInput(dY, W)   dW, dB = ConvGradWeight(X, dY)
//   ConvTranspose: dX = Conv(dY, W)            dW = ConvGradWeight(dY, X) (roles swapped), or
//                  where output_shape makes pads negative a Conv(dY^T, X^T) (batch and channels swapped)
// Pads, strides and dilations are resolved from the known spatial shapes (the batch may be
// symbolic) when the backward graph is built, and Slice/Pad fix up the rows that windows never
// reach, so every result has its input's exact
// shape without relying on output_padding (which oneDNN accepts only up to the end padding).
#include <algorithm>

#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {
namespace {

std::vector<int64_t> iota(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

// The batch dimension N of an unknown size is written as this placeholder in the shapes the
// VJPs compute with; nothing built from them depends on N (reshapes copy it, see reshapeN).
constexpr int64_t kUnknownBatch = -1;

// The shape of `t` with every dimension but the first (the batch) known; an unknown batch is
// kUnknownBatch. Throws graft::Error naming the node otherwise.
Shape gradShape(GradBuilder& g, const ir::Tensor* t, bool batchMayBeUnknown) {
  const TensorInfo& info = t->info();
  bool ok = info.hasShape() && info.rank() >= 1;
  for (int64_t d = batchMayBeUnknown ? 1 : 0; ok && d < info.rank(); ++d) ok = info.dims()[d].known();
  GRAFT_CHECK(ok, "{}: the gradient needs the shape of '{}' (all but the batch dimension), got {}", g.node().describe(),
              t->id(), info.str());
  Shape s;
  for (const Dim& d : info.dims()) s.push_back(d.known() ? d.value : kUnknownBatch);
  return s;
}

// Reshape to `s`, where kUnknownBatch marks dimensions that depend on an unknown batch: with none
// a constant shape (allowzero, so empty tensors stay empty); otherwise 0 (copy the input's
// dimension) in the first position and -1 (infer) in any other.
ir::Tensor* reshapeN(GradBuilder& g, ir::Tensor* t, Shape s) {
  bool unknown = false;
  for (int64_t& d : s)
    if (d < 0) unknown = true;
  if (!unknown) return gradutil::reshapeTo(g, t, g.int64s(s));
  if (s[0] < 0) s[0] = 0;
  for (size_t i = 1; i < s.size(); ++i)
    if (s[i] < 0) s[i] = -1;
  return g.op("Reshape", {t, g.int64s(s)});
}

// t[..., cutBegin[d] : extent[d] - cutEnd[d], ...] on the spatial axes (2...) of extents `extent`,
// then pre[d] zeros added before and post[d] after (all >= 0). Nothing when all are 0.
ir::Tensor* cropOrPad(GradBuilder& g, ir::Tensor* t, const Shape& extent, const Shape& cutBegin, const Shape& cutEnd,
                      const Shape& pre, const Shape& post) {
  int64_t r = static_cast<int64_t>(extent.size());
  auto anyNonZero = [](const Shape& v) { return std::any_of(v.begin(), v.end(), [](int64_t x) { return x != 0; }); };
  if (anyNonZero(cutBegin) || anyNonZero(cutEnd)) {
    Shape ends(r);
    for (int64_t d = 0; d < r; ++d) ends[d] = extent[d] - cutEnd[d];
    t = g.op("Slice", {t, g.int64s(cutBegin), g.int64s(ends), g.int64s(iota(2, r + 2))});
  }
  if (anyNonZero(pre) || anyNonZero(post)) {
    std::vector<int64_t> pads(2 * (r + 2), 0);
    for (int64_t d = 0; d < r; ++d) {
      pads[d + 2] = pre[d];
      pads[d + 2 + r + 2] = post[d];
    }
    t = g.op("Pad", {t, g.int64s(pads)});
  }
  return t;
}

ir::Attributes convAttrs(const Shape& strides, const Shape& dilations, const Shape& padBegin, const Shape& padEnd,
                         int64_t group) {
  ir::Attributes a;
  std::vector<int64_t> pads(padBegin.begin(), padBegin.end());
  pads.insert(pads.end(), padEnd.begin(), padEnd.end());
  a.set("strides", std::vector<int64_t>(strides.begin(), strides.end()));
  a.set("dilations", std::vector<int64_t>(dilations.begin(), dilations.end()));
  a.set("pads", pads);
  a.set("group", group);
  return a;
}

/// The gradient of W [M, C/group, k...] of a convolution whose taps read x [N, C, in...] at
/// o * stride - padBegin + k * dilation for output positions o of dy [N, M, out...] (pads may be
/// negative: rows outside the padded input are never read):
///   dW[m, c, k] = sum_n sum_o dy[n, m, o] * x[n, group(m) * C/group + c, o * s - pb + k * d].
/// That is a convolution of x with batch and channels swapped ([C/g, g * N, in...]) by dy as
/// weights ([M, N, out...]) with strides and dilations swapped, grouped by `group`.
ir::Tensor* weightGrad(GradBuilder& g, ir::Tensor* x, ir::Tensor* dy, const Window& win, int64_t group, const Shape& xs,
                       const Shape& ys) {
  int64_t r = win.rank(), N = xs[0], C = xs[1], M = ys[1], cg = C / group;
  Shape cutBegin(r, 0), cutEnd(r, 0), none(r, 0), pb(r), pe(r), in = win.in;
  for (int64_t d = 0; d < r; ++d) {
    // Rows of x past the last tap of the last window (or before the first) take no part.
    int64_t reach = (win.kernel[d] - 1) * win.dilation[d] + (win.out[d] - 1) * win.stride[d] + 1;
    int64_t slack = win.in[d] + win.padBegin[d] + win.padEnd[d] - reach;
    pb[d] = win.padBegin[d];
    pe[d] = win.padEnd[d] - slack;
    if (pb[d] < 0) cutBegin[d] = -pb[d], pb[d] = 0;
    if (pe[d] < 0) cutEnd[d] = -pe[d], pe[d] = 0;
    in[d] -= cutBegin[d] + cutEnd[d];
  }
  x = cropOrPad(g, x, win.in, cutBegin, cutEnd, none, none);
  std::vector<int64_t> swap01 = iota(0, r + 2);
  std::swap(swap01[0], swap01[1]);
  ir::Tensor *xt, *wt;
  if (group == 1) {
    xt = gradutil::transpose(g, x, swap01);   // [C, N, in...]
    wt = gradutil::transpose(g, dy, swap01);  // [M, N, out...]
  } else {
    Shape xg = {N, group, cg}, yg = {N, group, M / group};
    xg.insert(xg.end(), in.begin(), in.end());
    yg.insert(yg.end(), win.out.begin(), win.out.end());
    std::vector<int64_t> px = {2, 1, 0}, py = {1, 2, 0};
    for (int64_t d = 0; d < r; ++d) px.push_back(d + 3), py.push_back(d + 3);
    Shape xt3 = {cg, N < 0 ? kUnknownBatch : group * N}, yt3 = {M, N};
    xt3.insert(xt3.end(), in.begin(), in.end());
    yt3.insert(yt3.end(), win.out.begin(), win.out.end());
    xt = reshapeN(g, gradutil::transpose(g, reshapeN(g, x, xg), px), xt3);   // [C/g, g * N, in...]
    wt = reshapeN(g, gradutil::transpose(g, reshapeN(g, dy, yg), py), yt3);  // [M, N, out...]
  }
  ir::Tensor* dwt = g.op("Conv", {xt, wt}, convAttrs(win.dilation, win.stride, pb, pe, group));  // [C/g, M, k...]
  return gradutil::transpose(g, dwt, swap01);
}

ir::Tensor* biasGrad(GradBuilder& g, ir::Tensor* dy, int64_t rank) {
  std::vector<int64_t> axes = iota(0, rank);
  axes.erase(axes.begin() + 1);
  ir::Attributes a;
  a.set("keepdims", int64_t{0});
  return g.op("ReduceSum", {dy, g.int64s(axes)}, a);
}

void convVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
  int64_t group = n.attrInt("group", 1);
  Shape xs = gradShape(g, g.in(0), true);
  Shape ws = gradShape(g, g.in(1), false);
  ConvShape s = convShapeOf(wa, xs, ws, group);
  const Window& win = s.win;
  int64_t r = win.rank();
  ir::Tensor* dy = g.dy(0);
  // The window resolved (auto_pad applied), so the gradient ops need no shapes to find it.
  ir::Attributes a = convAttrs(win.stride, win.dilation, win.padBegin, win.padEnd, group);
  a.set("kernel_shape", std::vector<int64_t>(win.kernel.begin(), win.kernel.end()));
  if (g.wants(0)) {
    ir::Attributes ai = a;
    ai.set("input_spatial", std::vector<int64_t>(win.in.begin(), win.in.end()));
    g.setDx(0, g.op("ConvGradInput", {dy, g.in(1)}, ai, kGraftDomain));
  }
  bool bias = g.in(2) && g.wants(2);
  if (g.wants(1)) {
    auto d = g.opN("ConvGradWeight", {g.in(0), dy}, bias ? 2 : 1, a, kGraftDomain);
    g.setDx(1, d[0]);
    if (bias) g.setDx(2, d[1]);
  } else if (bias) {
    g.setDx(2, biasGrad(g, dy, r + 2));
  }
}

void convTransposeVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
  int64_t group = n.attrInt("group", 1);
  std::vector<int64_t> outputPadding = n.attrInts("output_padding", {});
  std::vector<int64_t> outputShape = n.attrInts("output_shape", {});
  checkOutputAttrs(wa.what, outputPadding, outputShape);
  Shape xs = gradShape(g, g.in(0), true);
  Shape ws = gradShape(g, g.in(1), false);
  ConvShape s = transposedConvShape(wa, xs, ws, group, outputPadding, outputShape);
  const Window& win = s.win;  // in: X's extent, out: Y's
  int64_t r = win.rank();
  Shape ys = {s.batch, s.outChannels};
  ys.insert(ys.end(), win.out.begin(), win.out.end());
  ir::Tensor* dy = g.dy(0);
  if (g.wants(0)) {
    // X[i] feeds Y[i * s - pb + k * d]: a Conv of dY by W over those taps. Negative pads
    // (output_shape beyond what X covers) are rows of Y nothing writes: cut from dY. Rows past
    // the last window (output_padding >= stride) are cut from the result; too short a dY
    // (output_shape below what X covers) is padded.
    Shape pb(r), pe(r), cutB(r, 0), cutE(r, 0), none(r, 0), cut(r, 0), outExt(r);
    for (int64_t d = 0; d < r; ++d) {
      pb[d] = win.padBegin[d];
      pe[d] = win.padEnd[d];
      if (pb[d] < 0) cutB[d] = -pb[d], pb[d] = 0;
      if (pe[d] < 0) cutE[d] = -pe[d], pe[d] = 0;
      int64_t keff = (win.kernel[d] - 1) * win.dilation[d] + 1;
      int64_t have = win.out[d] - cutB[d] - cutE[d] + pb[d] + pe[d];
      int64_t need = (win.in[d] - 1) * win.stride[d] + keff;
      if (have < need) pe[d] += need - have, have = need;
      outExt[d] = (have - keff) / win.stride[d] + 1;
      cut[d] = outExt[d] - win.in[d];
    }
    ir::Tensor* padded = cropOrPad(g, dy, win.out, cutB, cutE, none, none);
    ir::Tensor* dx = g.op("Conv", {padded, g.in(1)}, convAttrs(win.stride, win.dilation, pb, pe, group));
    g.setDx(0, cropOrPad(g, dx, outExt, none, cut, none, none));
  }
  if (g.wants(1)) {
    // The taps of dY read by X[i] are those of a Conv over dY, with X in the role of its output
    // gradient: dW[c, m, k] = sum X[n, c, i] * dY[n, group(c) * M/g + m, i * s - pb + k * d].
    Window cw;
    cw.in = win.out;
    cw.out = win.in;
    cw.kernel = win.kernel;
    cw.stride = win.stride;
    cw.dilation = win.dilation;
    cw.padBegin = win.padBegin;
    cw.padEnd = win.padEnd;
    // That Conv is an ordinary one (ConvGradWeight) when its pads are not negative and its
    // floor-rounded output extent is X's (output_padding below the stride).
    bool plain = true;
    for (int64_t d = 0; d < r; ++d) {
      int64_t keff = (win.kernel[d] - 1) * win.dilation[d] + 1;
      int64_t span = cw.in[d] + cw.padBegin[d] + cw.padEnd[d] - keff;
      plain = plain && cw.padBegin[d] >= 0 && cw.padEnd[d] >= 0 && span >= 0 && span / cw.stride[d] + 1 == cw.out[d];
    }
    if (plain) {
      ir::Attributes a = convAttrs(cw.stride, cw.dilation, cw.padBegin, cw.padEnd, group);
      a.set("kernel_shape", std::vector<int64_t>(cw.kernel.begin(), cw.kernel.end()));
      g.setDx(1, g.op("ConvGradWeight", {dy, g.in(0)}, a, kGraftDomain));
    } else {
      g.setDx(1, weightGrad(g, dy, g.in(0), cw, group, ys, xs));
    }
  }
  if (g.in(2) && g.wants(2)) g.setDx(2, biasGrad(g, dy, r + 2));
}

}  // namespace

GRAFT_REGISTER_OPS(conv_vjp) {
  r.add("Conv").setVjp(convVjp);
  r.add("ConvTranspose").setVjp(convTransposeVjp);
}

}  // namespace graft::ops
