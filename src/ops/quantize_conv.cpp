// Quantized convolutions: ConvInteger and QLinearConv.
//
// The convolution loop here is a small, self-contained N-D integer convolution on values with
// their zero points already subtracted (so padding contributes 0, as if padded with the zero
// point). It could later share a core with Conv in conv.cpp.
#include <algorithm>

#include "ops/quantize.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

using namespace quant;

struct ConvAttrs {
  std::string autoPad;
  std::vector<int64_t> dilations, kernelShape, pads, strides;
  int64_t group = 1;
};

ConvAttrs parseConvAttrs(const ir::Node& n) {
  ConvAttrs a;
  a.autoPad = n.attrString("auto_pad", "NOTSET");
  a.dilations = n.attrInts("dilations", {});
  a.kernelShape = n.attrInts("kernel_shape", {});
  a.pads = n.attrInts("pads", {});
  a.strides = n.attrInts("strides", {});
  a.group = n.attrInt("group", 1);
  std::string what = n.describe();
  GRAFT_CHECK(a.autoPad == "NOTSET" || a.autoPad == "VALID" || a.autoPad == "SAME_UPPER" || a.autoPad == "SAME_LOWER",
              "{}: auto_pad must be NOTSET, VALID, SAME_UPPER or SAME_LOWER, got '{}'", what, a.autoPad);
  GRAFT_CHECK(a.group >= 1, "{}: group must be >= 1, got {}", what, a.group);
  return a;
}

// The geometry of one convolution: [N, C, spatial...] * [M, C/group, kernel...].
struct ConvGeometry {
  int64_t N = 0, C = 0, M = 0, group = 1;
  Shape in, kernel, out;  // spatial dimensions
  std::vector<int64_t> stride, dilation, padBegin;
  Shape outShape() const {
    Shape s{N, M};
    s.insert(s.end(), out.begin(), out.end());
    return s;
  }
};

ConvGeometry convGeometry(const ConvAttrs& a, const Shape& x, const Shape& w, const std::string& what) {
  GRAFT_CHECK(x.size() >= 3, "{}: x must have rank >= 3 ([N, C, spatial...]), got shape {}", what, shapeToString(x));
  GRAFT_CHECK(w.size() == x.size(), "{}: w must have x's rank {}, got shape {}", what, x.size(), shapeToString(w));
  const size_t nd = x.size() - 2;
  ConvGeometry g;
  g.N = x[0];
  g.C = x[1];
  g.M = w[0];
  g.group = a.group;
  GRAFT_CHECK(g.C % g.group == 0 && g.M % g.group == 0 && w[1] * g.group == g.C,
              "{}: with group={} and {} input channels, w must have shape [M, {}, ...] with M divisible by {}, got {}",
              what, g.group, g.C, g.C / g.group, g.group, shapeToString(w));
  g.in.assign(x.begin() + 2, x.end());
  g.kernel.assign(w.begin() + 2, w.end());
  for (int64_t kd : g.kernel) GRAFT_CHECK(kd >= 1, "{}: w's spatial dimensions must be >= 1, got shape {}", what, shapeToString(w));
  if (!a.kernelShape.empty())
    GRAFT_CHECK(a.kernelShape == g.kernel, "{}: kernel_shape {} differs from w's spatial shape {}", what,
                shapeToString(a.kernelShape), shapeToString(g.kernel));
  // Attributes are bounded so that the geometry below cannot overflow int64 (dimensions are
  // below 2^62 with any realistic input; a model asking for more is rejected).
  constexpr int64_t kMaxAttr = int64_t{1} << 31;
  auto perDim = [&](const std::vector<int64_t>& v, const char* name) {
    if (v.empty()) return std::vector<int64_t>(nd, 1);
    GRAFT_CHECK(v.size() == nd, "{}: {} must have {} values, got {}", what, name, nd, v.size());
    for (int64_t e : v) GRAFT_CHECK(e >= 1 && e <= kMaxAttr, "{}: {} must be in [1, 2^31], got {}", what, name, shapeToString(v));
    return v;
  };
  for (size_t d = 0; d < nd; ++d)
    GRAFT_CHECK(g.in[d] < kMaxAttr && g.kernel[d] < kMaxAttr, "{}: spatial dimensions must be below 2^31, got {} and {}",
                what, shapeToString(x), shapeToString(w));
  g.stride = perDim(a.strides, "strides");
  g.dilation = perDim(a.dilations, "dilations");
  std::vector<int64_t> padEnd(nd, 0);
  g.padBegin.assign(nd, 0);
  if (a.autoPad == "NOTSET" && !a.pads.empty()) {
    GRAFT_CHECK(a.pads.size() == 2 * nd, "{}: pads must have {} values, got {}", what, 2 * nd, a.pads.size());
    for (size_t d = 0; d < nd; ++d) {
      g.padBegin[d] = a.pads[d];
      padEnd[d] = a.pads[d + nd];
      GRAFT_CHECK(g.padBegin[d] >= 0 && padEnd[d] >= 0 && g.padBegin[d] <= kMaxAttr && padEnd[d] <= kMaxAttr,
                  "{}: pads must be in [0, 2^31], got {}", what, shapeToString(a.pads));
    }
  }
  g.out.resize(nd);
  for (size_t d = 0; d < nd; ++d) {
    int64_t extent = (g.kernel[d] - 1) * g.dilation[d] + 1;
    if (a.autoPad == "SAME_UPPER" || a.autoPad == "SAME_LOWER") {
      g.out[d] = (g.in[d] + g.stride[d] - 1) / g.stride[d];
      int64_t total = std::max<int64_t>(0, (g.out[d] - 1) * g.stride[d] + extent - g.in[d]);
      g.padBegin[d] = a.autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else {
      int64_t span = g.in[d] + g.padBegin[d] + padEnd[d] - extent;
      GRAFT_CHECK(span >= 0, "{}: the kernel (extent {}) is larger than the padded input ({}) in spatial dimension {}",
                  what, extent, g.in[d] + g.padBegin[d] + padEnd[d], d);
      g.out[d] = span / g.stride[d] + 1;
    }
  }
  return g;
}

// acc[n, m, out...] = sum over c in m's group and kernel positions of x[n, c, pos] * w[m, c, k],
// with positions outside x contributing 0.
std::vector<int64_t> intConv(const ConvGeometry& g, const std::vector<int64_t>& x, const std::vector<int64_t>& w) {
  const size_t nd = g.in.size();
  const int64_t inSize = shapeNumel(g.in), kSize = shapeNumel(g.kernel), outSize = shapeNumel(g.out);
  const int64_t cPerGroup = g.C / g.group, mPerGroup = g.M / g.group;
  std::vector<int64_t> acc(static_cast<size_t>(shapeNumel(g.outShape())), 0);
  std::vector<int64_t> inStrides = stridesOf(g.in);
  std::vector<int64_t> o(nd), kk(nd);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t m = 0; m < g.M; ++m) {
      int64_t grp = m / mPerGroup;
      for (int64_t oi = 0; oi < outSize; ++oi) {
        for (int64_t r = oi, d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
          o[d] = r % g.out[d];
          r /= g.out[d];
        }
        int64_t sum = 0;
        for (int64_t ki = 0; ki < kSize; ++ki) {
          int64_t off = 0;
          bool inside = true;
          for (int64_t r = ki, d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
            kk[d] = r % g.kernel[d];
            r /= g.kernel[d];
            int64_t pos = o[d] * g.stride[d] - g.padBegin[d] + kk[d] * g.dilation[d];
            if (pos < 0 || pos >= g.in[d]) inside = false;
            off += pos * inStrides[d];
          }
          if (!inside) continue;
          for (int64_t c = 0; c < cPerGroup; ++c) {
            int64_t xc = grp * cPerGroup + c;
            sum += x[(n * g.C + xc) * inSize + off] * w[(m * cPerGroup + c) * kSize + ki];
          }
        }
        acc[(n * g.M + m) * outSize + oi] = sum;
      }
    }
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

KernelFn convIntegerKernel(CompileContext& c) {
  std::string what = c.node().describe();
  ConvAttrs attrs = parseConvAttrs(c.node());
  return [what, attrs](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& w = k.input(1);
    checkQuant8(x, what, "x");
    checkQuant8(w, what, "w");
    ConvGeometry g = convGeometry(attrs, x.shape(), w.shape(), what);
    auto xv = shiftInput(x, k.hasInput(2) ? &k.input(2) : nullptr, what);
    auto wv = shiftWeights(w, k.hasInput(3) ? &k.input(3) : nullptr, what);
    std::vector<int64_t> acc = intConv(g, xv, wv);
    NDArray& y = k.allocOutputUninit(0, DataType::Int32, g.outShape());
    // Sums that leave int32 wrap around, as in the int32 accumulators of real kernels.
    for (size_t i = 0; i < acc.size(); ++i) y.data<int32_t>()[i] = static_cast<int32_t>(acc[i]);
  };
}

KernelFn qlinearConvKernel(CompileContext& c) {
  std::string what = c.node().describe();
  ConvAttrs attrs = parseConvAttrs(c.node());
  return [what, attrs](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& w = k.input(3);
    checkQuant8(x, what, "x");
    checkQuant8(w, what, "w");
    ConvGeometry g = convGeometry(attrs, x.shape(), w.shape(), what);
    auto opt = [&](size_t i) { return k.hasInput(i) ? &k.input(i) : nullptr; };
    auto xv = shiftInput(x, opt(2), what);
    auto wv = shiftWeights(w, opt(5), what);
    std::vector<int64_t> acc = intConv(g, xv, wv);
    const NDArray &xs = k.input(1), &ws = k.input(4), &ys = k.input(6);
    GRAFT_CHECK(isPerTensor(xs), "{}: x_scale must be a scalar, got shape {}", what, shapeToString(xs.shape()));
    GRAFT_CHECK(isPerTensor(ys), "{}: y_scale must be a scalar, got shape {}", what, shapeToString(ys.shape()));
    checkPerTensorOrVector(ws, g.M, what, "w_scale", "output channel");
    const NDArray* yzp = opt(7);
    if (yzp) GRAFT_CHECK(isPerTensor(*yzp), "{}: y_zero_point must be a scalar, got shape {}", what, shapeToString(yzp->shape()));
    std::vector<int64_t> bias;
    if (const NDArray* b = opt(8)) {
      GRAFT_CHECK(b->dtype() == DataType::Int32 && b->shape() == Shape{g.M}, "{}: B must be INT32 of shape [{}], got {} {}",
                  what, g.M, dtypeName(b->dtype()), shapeToString(b->shape()));
      bias = readQuantized(*b, what);
    }
    float sx = readScales(xs, what)[0], sy = readScales(ys, what)[0];
    std::vector<float> sw = readScales(ws, what);
    int64_t zy = yzp ? readQuantized(*yzp, what)[0] : 0;
    DataType yType = yzp ? yzp->dtype() : x.dtype();
    int64_t outSize = shapeNumel(g.out);
    dispatch<(1u << 2) | (1u << 3)>(yType, what + " y_zero_point", [&](auto tag) {
      using Q = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, yType, g.outShape());
      for (size_t i = 0; i < acc.size(); ++i) {
        int64_t m = (static_cast<int64_t>(i) / outSize) % g.M;
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
  r.add("ConvInteger").setReference(convIntegerKernel);
  r.add("QLinearConv").setReference(qlinearConvKernel);
}

}  // namespace graft::ops
