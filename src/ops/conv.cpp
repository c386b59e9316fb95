// Conv and ConvTranspose (1-D, 2-D, 3-D and beyond; grouped, strided, dilated, padded).
// The loops live in ops/conv_util.hpp (convDirect, convTransposeDirect) so that integer and
// quantized convolutions can reuse them; this file adds attribute handling and float element
// access, accumulating in double.
#include "ops/conv_util.hpp"
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
  for (int64_t p : outputPadding)
    GRAFT_CHECK(p >= 0, "{}: output_padding must be >= 0, got {}", what, shapeToString(outputPadding));
  for (int64_t o : outputShape)
    GRAFT_CHECK(o >= 0, "{}: output_shape must be >= 0, got {}", what, shapeToString(outputShape));
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& w = k.input(1);
    GRAFT_CHECK(w.dtype() == x.dtype(), "{}: W has data type {}, X has {}", what, dtypeName(w.dtype()),
                dtypeName(x.dtype()));
    checkConvShapes(wa, x.shape(), w.shape(), group, /*transposed=*/true);
    ConvShape s;
    s.batch = x.dim(0);
    s.inChannels = x.dim(1);
    s.outChannels = w.dim(1) * group;  // checked above
    s.group = group;
    Shape in = spatialDims(x.shape()), kernel = spatialDims(w.shape());
    int64_t r = static_cast<int64_t>(in.size());
    GRAFT_CHECK(outputPadding.empty() || static_cast<int64_t>(outputPadding.size()) == r,
                "{}: output_padding must have {} values, got {}", what, r, outputPadding.size());
    Shape outAttr;
    if (!outputShape.empty()) {
      // Some exporters write the full [N, C, spatial...] shape; the spatial part is what counts.
      GRAFT_CHECK(static_cast<int64_t>(outputShape.size()) == r || static_cast<int64_t>(outputShape.size()) == r + 2,
                  "{}: output_shape must have {} values (one per spatial axis), got {}", what, r, outputShape.size());
      outAttr.assign(outputShape.end() - r, outputShape.end());
    }
    Window& win = s.win;
    win.in = in;
    win.kernel = kernel;
    GRAFT_CHECK(wa.strides.empty() || static_cast<int64_t>(wa.strides.size()) == r,
                "{}: strides must have {} values, got {}", what, r, wa.strides.size());
    GRAFT_CHECK(wa.dilations.empty() || static_cast<int64_t>(wa.dilations.size()) == r,
                "{}: dilations must have {} values, got {}", what, r, wa.dilations.size());
    GRAFT_CHECK(wa.pads.empty() || static_cast<int64_t>(wa.pads.size()) == 2 * r,
                "{}: pads must have {} values, got {}", what, 2 * r, wa.pads.size());
    win.stride = wa.strides.empty() ? Shape(r, 1) : wa.strides;
    win.dilation = wa.dilations.empty() ? Shape(r, 1) : wa.dilations;
    win.padBegin.assign(r, 0);
    win.padEnd.assign(r, 0);
    win.out.assign(r, 0);
    bool same = wa.autoPad == AutoPad::SameUpper || wa.autoPad == AutoPad::SameLower;
    for (int64_t d = 0; d < r; ++d) {
      int64_t keff = 0;
      GRAFT_CHECK(!__builtin_mul_overflow(kernel[d] - 1, win.dilation[d], &keff) && keff < (int64_t{1} << 40) &&
                      in[d] < (int64_t{1} << 40),
                  "{}: sizes too large on spatial axis {}", what, d);
      keff += 1;
      int64_t op = outputPadding.empty() ? 0 : outputPadding[d];
      int64_t full = 0;  // output extent without padding
      GRAFT_CHECK(
          !__builtin_mul_overflow(win.stride[d], in[d], &full) && full < (int64_t{1} << 50) && op < (int64_t{1} << 40),
          "{}: output too large on spatial axis {}", what, d);
      full = full - win.stride[d] + op + keff;
      if (!wa.pads.empty()) {
        win.padBegin[d] = wa.pads[d];
        win.padEnd[d] = wa.pads[d + r];
      }
      if (!outAttr.empty() || (same && wa.pads.empty())) {
        int64_t out = !outAttr.empty() ? outAttr[d] : in[d] * win.stride[d];
        if (wa.pads.empty()) {
          // ONNX: total = full - out, split evenly; an odd total puts the extra element at the end
          // for SAME_UPPER and at the beginning otherwise (floor division: totals can be
          // negative when output_shape asks for more than the input covers).
          int64_t total = full - out;
          int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
          win.padBegin[d] = wa.autoPad == AutoPad::SameUpper ? half : total - half;
          win.padEnd[d] = total - win.padBegin[d];
        }
        win.out[d] = out;
      } else {
        win.out[d] = full - win.padBegin[d] - win.padEnd[d];
      }
      GRAFT_CHECK(win.out[d] >= 0, "{}: output extent {} on spatial axis {} is negative (pads {} + {} exceed {})", what,
                  win.out[d], d, win.padBegin[d], win.padEnd[d], full);
    }
    NDArray b = checkedBias(k, s.outChannels, x.dtype(), what);
    Shape ys = {s.batch, s.outChannels};
    ys.insert(ys.end(), win.out.begin(), win.out.end());
    int64_t total = shapeNumel(ys);
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      const T* xp = x.data<T>();
      const T* wp = w.data<T>();
      std::vector<double> acc(static_cast<size_t>(total), 0.0);
      convTransposeDirect<double>(
          s, [&](int64_t i) { return static_cast<double>(static_cast<C>(xp[i])); },
          [&](int64_t i) { return static_cast<double>(static_cast<C>(wp[i])); }, acc.data());
      NDArray& y = k.allocOutputUninit(0, x.dtype(), ys);
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
  r.add("Conv").setReference(convKernel);
  r.add("ConvTranspose").setReference(convTransposeKernel);
}

}  // namespace graft::ops
