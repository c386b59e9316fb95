// Window geometry shared by the convolution and pooling families.
#include "ops/conv_util.hpp"

#include <algorithm>

namespace graft::ops {

namespace {

void checkAll(const std::vector<int64_t>& v, int64_t min, const char* name, const std::string& what) {
  for (int64_t x : v)
    GRAFT_CHECK(x >= min, "{}: every value of attribute '{}' must be >= {}, got {}", what, name, min, shapeToString(v));
}

// Sizes and window extents are attribute- and data-controlled: keep the arithmetic in range.
constexpr int64_t kMaxExtent = int64_t{1} << 40;

}  // namespace

WindowAttrs parseWindowAttrs(const ir::Node& n, bool hasDilations, bool hasCeilMode) {
  WindowAttrs a;
  a.what = n.describe();
  a.autoPad = attrChoice<AutoPad>(n, "auto_pad", "NOTSET",
                                  {{"NOTSET", AutoPad::NotSet},
                                   {"SAME_UPPER", AutoPad::SameUpper},
                                   {"SAME_LOWER", AutoPad::SameLower},
                                   {"VALID", AutoPad::Valid}});
  a.kernel = n.attrInts("kernel_shape", {});
  a.strides = n.attrInts("strides", {});
  a.pads = n.attrInts("pads", {});
  if (hasDilations) a.dilations = n.attrInts("dilations", {});
  if (hasCeilMode) a.ceilMode = n.attrInt("ceil_mode", 0) != 0;
  checkAll(a.kernel, 1, "kernel_shape", a.what);
  checkAll(a.strides, 1, "strides", a.what);
  checkAll(a.dilations, 1, "dilations", a.what);
  checkAll(a.pads, 0, "pads", a.what);
  for (auto* v : {&a.kernel, &a.strides, &a.dilations, &a.pads})
    for (int64_t x : *v) GRAFT_CHECK(x <= kMaxExtent, "{}: window attribute value {} is too large", a.what, x);
  GRAFT_CHECK(a.pads.size() % 2 == 0, "{}: attribute 'pads' must have an even number of values, got {}", a.what,
              a.pads.size());
  bool anyPad = std::any_of(a.pads.begin(), a.pads.end(), [](int64_t p) { return p != 0; });
  GRAFT_CHECK(!(anyPad && a.autoPad != AutoPad::NotSet),
              "{}: attribute 'pads' cannot be combined with auto_pad '{}' (use one or the other)", a.what,
              n.attrString("auto_pad"));
  return a;
}

Shape spatialDims(const Shape& s) { return s.size() > 2 ? Shape(s.begin() + 2, s.end()) : Shape{}; }

Window resolveWindow(const WindowAttrs& a, const Shape& in, const Shape& kernel) {
  int64_t r = static_cast<int64_t>(in.size());
  const std::string& what = a.what;
  GRAFT_CHECK(r >= 1, "{}: the input needs at least one spatial dimension (rank >= 3)", what);
  GRAFT_CHECK(static_cast<int64_t>(kernel.size()) == r, "{}: the kernel has {} spatial dimensions, the input has {}",
              what, kernel.size(), r);
  auto sized = [&](const std::vector<int64_t>& v, size_t want, const char* name) {
    GRAFT_CHECK(v.empty() || v.size() == want,
                "{}: attribute '{}' must have {} values (one per spatial axis{}), got {}", what, name, want,
                want == static_cast<size_t>(r) ? "" : ", begin and end", v.size());
  };
  sized(a.kernel, r, "kernel_shape");
  sized(a.strides, r, "strides");
  sized(a.dilations, r, "dilations");
  sized(a.pads, 2 * r, "pads");
  Window w;
  w.in = in;
  w.kernel = kernel;
  w.stride = a.strides.empty() ? Shape(r, 1) : a.strides;
  w.dilation = a.dilations.empty() ? Shape(r, 1) : a.dilations;
  w.padBegin.assign(r, 0);
  w.padEnd.assign(r, 0);
  w.out.assign(r, 0);
  for (int64_t d = 0; d < r; ++d) {
    GRAFT_CHECK(kernel[d] >= 1 && kernel[d] <= kMaxExtent, "{}: kernel extent {} on spatial axis {} is invalid", what,
                kernel[d], d);
    GRAFT_CHECK(in[d] <= kMaxExtent, "{}: input extent {} is too large", what, in[d]);
    int64_t keff = 0;
    GRAFT_CHECK(!__builtin_mul_overflow(kernel[d] - 1, w.dilation[d], &keff) && keff < kMaxExtent,
                "{}: kernel extent {} with dilation {} is too large", what, kernel[d], w.dilation[d]);
    keff += 1;
    int64_t s = w.stride[d];
    if (!a.pads.empty()) {
      w.padBegin[d] = a.pads[d];
      w.padEnd[d] = a.pads[d + r];
    } else if (a.autoPad == AutoPad::SameUpper || a.autoPad == AutoPad::SameLower) {
      // Pads so that out = ceil(in / s); an odd total puts the extra element at the end (UPPER)
      // or at the beginning (LOWER).
      int64_t outSame = (in[d] + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (outSame - 1) * s + keff - in[d]);
      int64_t small = total / 2, big = total - small;
      w.padBegin[d] = a.autoPad == AutoPad::SameUpper ? small : big;
      w.padEnd[d] = a.autoPad == AutoPad::SameUpper ? big : small;
    }
    int64_t span = in[d] + w.padBegin[d] + w.padEnd[d] - keff;
    GRAFT_CHECK(span >= 0,
                "{}: the window (kernel {} with dilation {}, extent {}) is larger than the padded input ({} + {} + {}) "
                "on spatial axis {}",
                what, kernel[d], w.dilation[d], keff, in[d], w.padBegin[d], w.padEnd[d], d);
    w.out[d] = (a.ceilMode ? (span + s - 1) / s : span / s) + 1;
    // As ONNX's shape inference (opset 19 and later) and PyTorch: with ceil_mode, a last window
    // that would start in the end padding is dropped.
    if (a.ceilMode && (w.out[d] - 1) * s >= in[d] + w.padBegin[d]) --w.out[d];
  }
  return w;
}

void checkConvShapes(const WindowAttrs& wa, const Shape& x, const Shape& w, int64_t group, bool transposed) {
  const std::string& what = wa.what;
  GRAFT_CHECK(x.size() >= 3, "{}: input X must have rank >= 3 ([N, C, spatial...]), got shape {}", what,
              shapeToString(x));
  GRAFT_CHECK(w.size() == x.size(), "{}: weights W must have the rank of X ({}), got shape {}", what, x.size(),
              shapeToString(w));
  GRAFT_CHECK(group >= 1, "{}: group must be >= 1, got {}", what, group);
  int64_t c = x[1];
  GRAFT_CHECK(c % group == 0, "{}: the {} input channels do not divide into group {}", what, c, group);
  if (!transposed) {
    GRAFT_CHECK(w[1] == c / group, "{}: W of shape {} expects {} input channels per group, X has {} in {} group(s)",
                what, shapeToString(w), w[1], c, group);
    GRAFT_CHECK(w[0] % group == 0, "{}: the {} output channels of W do not divide into group {}", what, w[0], group);
  } else {
    GRAFT_CHECK(w[0] == c, "{}: W of shape {} expects {} input channels, X has {}", what, shapeToString(w), w[0], c);
    int64_t m = 0;
    GRAFT_CHECK(!__builtin_mul_overflow(w[1], group, &m), "{}: output channels {} x group {} overflow", what, w[1],
                group);
  }
  Shape k = spatialDims(w);
  GRAFT_CHECK(wa.kernel.empty() || wa.kernel == k, "{}: kernel_shape {} does not match the weights' spatial shape {}",
              what, shapeToString(wa.kernel), shapeToString(k));
}

ConvShape convShapeOf(const WindowAttrs& wa, const Shape& x, const Shape& w, int64_t group) {
  checkConvShapes(wa, x, w, group, /*transposed=*/false);
  ConvShape s;
  s.batch = x[0];
  s.inChannels = x[1];
  s.outChannels = w[0];
  s.group = group;
  s.win = resolveWindow(wa, spatialDims(x), spatialDims(w));
  return s;
}

namespace {
// Floor and ceiling of a / b for b > 0 and any sign of a.
int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceilDiv(int64_t a, int64_t b) { return -floorDiv(-a, b); }
}  // namespace

void tapsWithin(const Shape& kernel, const std::vector<int64_t>& base, const Shape& dilation, const Shape& extent,
                std::vector<std::pair<int64_t, int64_t>>& taps) {
  taps.clear();
  auto r = static_cast<int64_t>(kernel.size());
  std::vector<int64_t> lo(r), hi(r);
  for (int64_t d = 0; d < r; ++d) {
    // base + k * dil in [0, extent - 1]  <=>  k in [ceil(-base / dil), floor((extent - 1 - base) / dil)]
    lo[d] = std::max<int64_t>(0, ceilDiv(-base[d], dilation[d]));
    hi[d] = std::min<int64_t>(kernel[d] - 1, floorDiv(extent[d] - 1 - base[d], dilation[d]));
    if (lo[d] > hi[d]) return;
  }
  std::vector<int64_t> k = lo;
  while (true) {
    int64_t kOff = 0, pOff = 0;
    for (int64_t d = 0; d < r; ++d) {
      kOff = kOff * kernel[d] + k[d];
      pOff = pOff * extent[d] + base[d] + k[d] * dilation[d];
    }
    taps.emplace_back(kOff, pOff);
    int64_t d = r - 1;
    for (; d >= 0; --d) {
      if (++k[d] <= hi[d]) break;
      k[d] = lo[d];
    }
    if (d < 0) return;
  }
}

void windowTaps(const Window& w, const std::vector<int64_t>& o, std::vector<std::pair<int64_t, int64_t>>& taps) {
  std::vector<int64_t> base(w.rank());
  for (int64_t d = 0; d < w.rank(); ++d) base[d] = o[d] * w.stride[d] - w.padBegin[d];
  tapsWithin(w.kernel, base, w.dilation, w.in, taps);
}

ConvShape transposedConvShape(const WindowAttrs& wa, const Shape& xs, const Shape& ws, int64_t group,
                              const std::vector<int64_t>& outputPadding, const std::vector<int64_t>& outputShape) {
  const std::string& what = wa.what;
  checkConvShapes(wa, xs, ws, group, /*transposed=*/true);
  ConvShape s;
  s.batch = xs[0];
  s.inChannels = xs[1];
  s.outChannels = ws[1] * group;  // checked above
  s.group = group;
  Shape in = spatialDims(xs), kernel = spatialDims(ws);
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
  GRAFT_CHECK(wa.pads.empty() || static_cast<int64_t>(wa.pads.size()) == 2 * r, "{}: pads must have {} values, got {}",
              what, 2 * r, wa.pads.size());
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
    GRAFT_CHECK(!__builtin_mul_overflow(win.stride[d], in[d], &full) && full < (int64_t{1} << 50),
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
  return s;
}

void checkOutputAttrs(const std::string& what, const std::vector<int64_t>& outputPadding,
                      const std::vector<int64_t>& outputShape) {
  for (int64_t p : outputPadding)
    GRAFT_CHECK(p >= 0 && p < (int64_t{1} << 40), "{}: output_padding values must be in [0, 2^40), got {}", what,
                shapeToString(outputPadding));
  for (int64_t o : outputShape)
    GRAFT_CHECK(o >= 0 && o < (int64_t{1} << 50), "{}: output_shape values must be in [0, 2^50), got {}", what,
                shapeToString(outputShape));
}

}  // namespace graft::ops
