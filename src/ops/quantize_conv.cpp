// Quantized convolutions: ConvInteger and QLinearConv.
//
// The window and the convolution loop are Conv's (ops/conv_util.hpp), run on int64 values with
// their zero points already subtracted (so padding contributes 0, as if padded with the zero
// point).
#include <algorithm>

#include "ops/conv_util.hpp"
#include "ops/cost.hpp"
#include "ops/quantize.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

using namespace quant;

struct ConvAttrs {
  WindowAttrs window;
  int64_t group = 1;
};

ConvAttrs parseConvAttrs(const ir::Node& n) {
  ConvAttrs a;
  a.window = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
  a.group = n.attrInt("group", 1);
  GRAFT_CHECK(a.group >= 1, "{}: group must be >= 1, got {}", a.window.what, a.group);
  return a;
}

Shape outShape(const ConvShape& s) {
  Shape y{s.batch, s.outChannels};
  y.insert(y.end(), s.win.out.begin(), s.win.out.end());
  return y;
}

// acc[n, m, out...] = sum over c in m's group and kernel positions of x[n, c, pos] * w[m, c, k],
// with positions outside x contributing 0: Conv's direct loop (ops/conv_util.hpp) on int64.
std::vector<int64_t> intConv(const ConvShape& s, const std::vector<int64_t>& x, const std::vector<int64_t>& w) {
  std::vector<int64_t> acc(static_cast<size_t>(shapeNumel(outShape(s))), 0);
  convDirect<int64_t>(
      s, [&](int64_t i) { return x[static_cast<size_t>(i)]; }, [&](int64_t i) { return w[static_cast<size_t>(i)]; },
      [&](int64_t i, int64_t, int64_t v) { acc[static_cast<size_t>(i)] = v; });
  return acc;
}

void checkQuant8(const NDArray& a, const std::string& what, const char* name) {
  GRAFT_CHECK(a.dtype() == DataType::UInt8 || a.dtype() == DataType::Int8, "{}: {} must be UINT8 or INT8, got {}", what,
              name, dtypeName(a.dtype()));
}

// x - x_zero_point (per tensor).
std::vector<int64_t> shiftInput(const NDArray& x, const NDArray* zp, const std::string& what) {
  std::vector<int64_t> v = readQuantized(x, what);
  if (!zp) return v;
  GRAFT_CHECK(zp->dtype() == x.dtype() && isPerTensor(*zp), "{}: x_zero_point must be a {} scalar, got {} of shape {}",
              what, dtypeName(x.dtype()), dtypeName(zp->dtype()), shapeToString(zp->shape()));
  int64_t z = readQuantized(*zp, what)[0];
  for (auto& e : v) e -= z;
  return v;
}

// w - w_zero_point (per tensor, or per output channel).
std::vector<int64_t> shiftWeights(const NDArray& w, const NDArray* zp, const std::string& what) {
  std::vector<int64_t> v = readQuantized(w, what);
  if (!zp) return v;
  GRAFT_CHECK(zp->dtype() == w.dtype(), "{}: w_zero_point must have w's type {}, got {}", what, dtypeName(w.dtype()),
              dtypeName(zp->dtype()));
  checkPerTensorOrVector(*zp, w.dim(0), what, "w_zero_point", "output channel");
  std::vector<int64_t> z = readQuantized(*zp, what);
  int64_t per = w.dim(0) > 0 ? w.numel() / w.dim(0) : 0;
  for (int64_t i = 0; i < w.numel(); ++i) v[i] -= at(z, i / per);
  return v;
}

// The convolution of the node's x (input xi) by w (input wi), with the zero points at inputs xzi
// and wzi (absent: 0) subtracted.
struct IntConv {
  ConvShape shape;
  std::vector<int64_t> acc;
};
IntConv runIntConv(KernelContext& k, const ConvAttrs& attrs, size_t xi, size_t wi, size_t xzi, size_t wzi,
                   const std::string& what) {
  const NDArray& x = k.input(xi);
  const NDArray& w = k.input(wi);
  checkQuant8(x, what, "x");
  checkQuant8(w, what, "w");
  auto opt = [&](size_t i) { return k.hasInput(i) ? &k.input(i) : nullptr; };
  IntConv r{convShapeOf(attrs.window, x.shape(), w.shape(), attrs.group), {}};
  r.acc = intConv(r.shape, shiftInput(x, opt(xzi), what), shiftWeights(w, opt(wzi), what));
  return r;
}

KernelFn convIntegerKernel(CompileContext& c) {
  std::string what = c.node().describe();
  ConvAttrs attrs = parseConvAttrs(c.node());
  return [what, attrs](KernelContext& k) {
    IntConv ic = runIntConv(k, attrs, 0, 1, 2, 3, what);
    const ConvShape& g = ic.shape;
    const std::vector<int64_t>& acc = ic.acc;
    NDArray& y = k.allocOutputUninit(0, DataType::Int32, outShape(g));
    // Sums that leave int32 wrap around, as in the int32 accumulators of real kernels.
    for (size_t i = 0; i < acc.size(); ++i) y.data<int32_t>()[i] = static_cast<int32_t>(acc[i]);
  };
}

KernelFn qlinearConvKernel(CompileContext& c) {
  std::string what = c.node().describe();
  ConvAttrs attrs = parseConvAttrs(c.node());
  return [what, attrs](KernelContext& k) {
    IntConv ic = runIntConv(k, attrs, 0, 3, 2, 5, what);
    const ConvShape& g = ic.shape;
    const std::vector<int64_t>& acc = ic.acc;
    const NDArray& x = k.input(0);
    auto opt = [&](size_t i) { return k.hasInput(i) ? &k.input(i) : nullptr; };
    const NDArray &xs = k.input(1), &ws = k.input(4), &ys = k.input(6);
    GRAFT_CHECK(isPerTensor(xs), "{}: x_scale must be a scalar, got shape {}", what, shapeToString(xs.shape()));
    GRAFT_CHECK(isPerTensor(ys), "{}: y_scale must be a scalar, got shape {}", what, shapeToString(ys.shape()));
    checkPerTensorOrVector(ws, g.outChannels, what, "w_scale", "output channel");
    const NDArray* yzp = opt(7);
    if (yzp)
      GRAFT_CHECK(isPerTensor(*yzp), "{}: y_zero_point must be a scalar, got shape {}", what,
                  shapeToString(yzp->shape()));
    std::vector<int64_t> bias;
    if (const NDArray* b = opt(8)) {
      GRAFT_CHECK(b->dtype() == DataType::Int32 && b->shape() == Shape{g.outChannels},
                  "{}: B must be INT32 of shape [{}], got {} {}", what, g.outChannels, dtypeName(b->dtype()),
                  shapeToString(b->shape()));
      bias = readQuantized(*b, what);
    }
    float sx = readScales(xs, what)[0], sy = readScales(ys, what)[0];
    std::vector<float> sw = readScales(ws, what);
    int64_t zy = yzp ? readQuantized(*yzp, what)[0] : 0;
    DataType yType = yzp ? yzp->dtype() : x.dtype();
    int64_t outSize = shapeNumel(g.win.out);
    dispatch<(1u << 2) | (1u << 3)>(yType, what + " y_zero_point", [&](auto tag) {
      using Q = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, yType, outShape(g));
      for (size_t i = 0; i < acc.size(); ++i) {
        int64_t m = (static_cast<int64_t>(i) / outSize) % g.outChannels;
        // The requantization multiplier is formed in float32, then applied in double.
        float mult = sx * at(sw, m) / sy;
        int64_t v = acc[i] + (bias.empty() ? 0 : bias[m]);
        y.data<Q>()[i] = saturateRound<Q>(static_cast<double>(v) * mult + static_cast<double>(zy));
      }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(quantize_conv) {
  r.add("ConvInteger").setReference(convIntegerKernel).setCost([](const ir::Node& n) {
    return cost::convolution(n.output(0), n.input(1));
  });
  r.add("QLinearConv").setReference(qlinearConvKernel).setCost([](const ir::Node& n) {
    return cost::convolution(n.output(0), n.input(3));  // x, x_scale, x_zero_point, w, ...
  });
}

}  // namespace graft::ops
