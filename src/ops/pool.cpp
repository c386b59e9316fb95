// Pooling: MaxPool (with Indices), AveragePool, LpPool, their Global forms, MaxUnpool, and the
// region pools MaxRoiPool and RoiAlign. Window geometry comes from ops/conv_util.hpp; sums are
// accumulated in double.
#include <cmath>
#include <limits>

#include "ops/conv_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

constexpr uint32_t kMaxPoolTypes = kFloats | (1u << 2) | (1u << 3);  // floats, uint8, int8

template <class T>
T emptyMax() {
  if constexpr (std::is_integral_v<T>)
    return std::numeric_limits<T>::lowest();
  else
    return fromDouble<T>(std::numeric_limits<double>::quiet_NaN());
}

/// Checks X of a windowed pool and resolves its window from kernel_shape.
Window poolWindow(const WindowAttrs& wa, const NDArray& x) {
  GRAFT_CHECK(x.rank() >= 3, "{}: input X must have rank >= 3 ([N, C, spatial...]), got shape {}", wa.what,
              shapeToString(x.shape()));
  GRAFT_CHECK(!wa.kernel.empty(), "{}: attribute 'kernel_shape' is required", wa.what);
  return resolveWindow(wa, spatialDims(x.shape()), wa.kernel);
}

Shape pooledShape(const NDArray& x, const Window& w) {
  Shape s = {x.dim(0), x.dim(1)};
  s.insert(s.end(), w.out.begin(), w.out.end());
  shapeNumel(s);  // throws on overflow
  return s;
}

/// N * C of an [N, C, ...] input (inputs with an empty spatial extent can have huge N and C).
int64_t planesOf(const NDArray& x, const std::string& what) {
  int64_t p = 0;
  GRAFT_CHECK(!__builtin_mul_overflow(x.dim(0), x.dim(1), &p), "{}: N x C of shape {} overflows", what,
              shapeToString(x.shape()));
  return p;
}

/// Calls f(plane, output offset, taps) for every output position of every [n, c] plane, where
/// taps are the (kernel offset, input offset) pairs of the window inside the input (none for a
/// window over padding only, which ceil_mode or large pads can produce).
template <class F>
void forEachWindow(const Window& w, int64_t planes, F&& f) {
  int64_t outBlock = shapeNumel(w.out);
  if (outBlock == 0 || planes == 0) return;
  std::vector<std::pair<int64_t, int64_t>> taps;
  Odometer o(w.out);
  int64_t op = 0;
  do {
    windowTaps(w, o.idx, taps);
    for (int64_t p = 0; p < planes; ++p) f(p, op, taps);
    ++op;
  } while (o.next());
}

// ---- MaxPool --------------------------------------------------------------------------------

KernelFn maxPoolKernel(CompileContext& c) {
  const auto& n = c.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/true);
  int64_t storageOrder = n.attrInt("storage_order", 0);
  GRAFT_CHECK(storageOrder == 0 || storageOrder == 1,
              "{}: storage_order must be 0 (row major) or 1 (column major), got {}", wa.what, storageOrder);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    Window w = poolWindow(wa, x);
    Shape ys = pooledShape(x, w);
    int64_t planes = planesOf(x, wa.what), inBlock = shapeNumel(w.in), outBlock = shapeNumel(w.out);
    bool wantIdx = k.wantsOutput(1);
    // Indices count over the whole input tensor, spatial axes in row-major or column-major order.
    std::vector<int64_t> colStride(w.rank(), 1);
    for (int64_t d = 1; d < w.rank(); ++d) colStride[d] = colStride[d - 1] * w.in[d - 1];
    auto indexOf = [&](int64_t plane, int64_t rowMajorOff) {
      if (storageOrder == 0) return plane * inBlock + rowMajorOff;
      int64_t idx = 0;
      for (int64_t d = w.rank() - 1; d >= 0; --d) {
        idx += (rowMajorOff % w.in[d]) * colStride[d];
        rowMajorOff /= w.in[d];
      }
      return plane * inBlock + idx;
    };
    dispatch<kMaxPoolTypes>(x.dtype(), wa.what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      T* yp = k.allocOutputUninit(0, x.dtype(), ys).data<T>();
      int64_t* ip = wantIdx ? k.allocOutputUninit(1, DataType::Int64, ys).data<int64_t>() : nullptr;
      forEachWindow(w, planes, [&](int64_t p, int64_t op, const auto& taps) {
        const T* plane = xp + p * inBlock;
        if (taps.empty()) {
          // No input element: NaN as ONNX's reference gives (the lowest value for integers), and
          // an index that MaxUnpool rejects.
          yp[p * outBlock + op] = emptyMax<T>();
          if (ip) ip[p * outBlock + op] = -1;
          return;
        }
        int64_t best = taps.front().second;
        double bv = toDouble(plane[best]);
        for (const auto& t : taps) {
          double v = toDouble(plane[t.second]);
          // NaN propagates (the first NaN wins); otherwise the first maximum wins.
          if (!std::isnan(bv) && (v > bv || std::isnan(v))) {
            bv = v;
            best = t.second;
          }
        }
        yp[p * outBlock + op] = plane[best];
        if (ip) ip[p * outBlock + op] = indexOf(p, best);
      });
    });
  };
}

// ---- AveragePool and LpPool ------------------------------------------------------------------

/// With count_include_pad: the taps of a window starting at `start` (in unpadded coordinates) on
/// spatial axis d that lie inside the padded input (a ceil_mode window may reach past the end
/// padding), as ONNX's reference counts them.
int64_t tapsInPadded(const Window& w, int64_t d, int64_t start) {
  int64_t room = w.in[d] + w.padEnd[d] - start;  // > 0: a window starts inside the padded input
  return std::min(w.kernel[d], room <= 0 ? 0 : (room + w.dilation[d] - 1) / w.dilation[d]);
}

KernelFn averagePoolKernel(CompileContext& c) {
  const auto& n = c.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/true);
  bool includePad = n.attrInt("count_include_pad", 0) != 0;
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    Window w = poolWindow(wa, x);
    Shape ys = pooledShape(x, w);
    int64_t planes = planesOf(x, wa.what), inBlock = shapeNumel(w.in), outBlock = shapeNumel(w.out);
    // With count_include_pad the divisor is the part of the window inside the padded input (a
    // ceil_mode window may reach past the end padding); it depends only on the output position.
    std::vector<double> padCount;
    if (includePad) {
      padCount.resize(static_cast<size_t>(outBlock));
      if (outBlock > 0) {
        Odometer o(w.out);
        int64_t op = 0;
        do {
          double cnt = 1;
          for (int64_t d = 0; d < w.rank(); ++d)
            cnt *= static_cast<double>(tapsInPadded(w, d, o.idx[d] * w.stride[d] - w.padBegin[d]));
          padCount[op++] = cnt;
        } while (o.next());
      }
    }
    dispatch<kFloats>(x.dtype(), wa.what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      T* yp = k.allocOutputUninit(0, x.dtype(), ys).data<T>();
      forEachWindow(w, planes, [&](int64_t p, int64_t op, const auto& taps) {
        const T* plane = xp + p * inBlock;
        double sum = 0;
        for (const auto& t : taps) sum += toDouble(plane[t.second]);
        double cnt = includePad ? padCount[op] : static_cast<double>(taps.size());
        // A window without input elements (or, counting pads, beyond the padding) has no mean: NaN,
        // as ONNX's reference gives.
        yp[p * outBlock + op] = fromDouble<T>(cnt > 0 ? sum / cnt : std::numeric_limits<double>::quiet_NaN());
      });
    });
  };
}

/// (sum |x|^p)^(1/p), with p = 1 and 2 computed without pow for exactness.
double lpNorm(double sum, int64_t p) {
  if (p == 1) return sum;
  if (p == 2) return std::sqrt(sum);
  return std::pow(sum, 1.0 / static_cast<double>(p));
}
double lpTerm(double v, int64_t p) {
  double a = std::abs(v);
  if (p == 1) return a;
  if (p == 2) return a * a;
  return std::pow(a, static_cast<double>(p));
}

int64_t lpOrder(const ir::Node& n) {
  int64_t p = n.attrInt("p", 2);
  GRAFT_CHECK(p >= 1, "{}: p must be >= 1, got {}", n.describe(), p);
  return p;
}

KernelFn lpPoolKernel(CompileContext& c) {
  const auto& n = c.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/true);
  int64_t p = lpOrder(n);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    Window w = poolWindow(wa, x);
    Shape ys = pooledShape(x, w);
    int64_t planes = planesOf(x, wa.what), inBlock = shapeNumel(w.in), outBlock = shapeNumel(w.out);
    dispatch<kFloats>(x.dtype(), wa.what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      T* yp = k.allocOutputUninit(0, x.dtype(), ys).data<T>();
      // Padding contributes zeros, so a window over padding only is 0.
      forEachWindow(w, planes, [&](int64_t pl, int64_t op, const auto& taps) {
        const T* plane = xp + pl * inBlock;
        double sum = 0;
        for (const auto& t : taps) sum += lpTerm(toDouble(plane[t.second]), p);
        yp[pl * outBlock + op] = fromDouble<T>(lpNorm(sum, p));
      });
    });
  };
}

// ---- Global pools ------------------------------------------------------------------------------

enum class GlobalKind { Average, Max, Lp };

KernelFn globalPoolKernel(CompileContext& c, GlobalKind kind) {
  const auto& n = c.node();
  std::string what = n.describe();
  int64_t p = kind == GlobalKind::Lp ? lpOrder(n) : 2;
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 2, "{}: input X must have rank >= 2 ([N, C, spatial...]), got shape {}", what,
                shapeToString(x.shape()));
    Shape ys = x.shape();
    for (size_t d = 2; d < ys.size(); ++d) ys[d] = 1;
    int64_t planes = planesOf(x, what), block = shapeProduct(x.shape(), 2, x.rank());
    GRAFT_CHECK(block > 0 || planes == 0 || kind == GlobalKind::Lp,
                "{}: cannot pool over an empty spatial extent (input shape {})", what, shapeToString(x.shape()));
    auto run = [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      T* yp = k.allocOutputUninit(0, x.dtype(), ys).data<T>();
      for (int64_t pl = 0; pl < planes; ++pl) {
        const T* v = xp + pl * block;
        if (kind == GlobalKind::Max) {
          int64_t best = 0;
          for (int64_t i = 1; i < block; ++i) {
            double a = toDouble(v[i]), b = toDouble(v[best]);
            if (!std::isnan(b) && (a > b || std::isnan(a))) best = i;
          }
          yp[pl] = v[best];
          continue;
        }
        double sum = 0;
        for (int64_t i = 0; i < block; ++i) sum += kind == GlobalKind::Lp ? lpTerm(toDouble(v[i]), p) : toDouble(v[i]);
        yp[pl] = fromDouble<T>(kind == GlobalKind::Lp ? lpNorm(sum, p) : sum / static_cast<double>(block));
      }
    };
    // GlobalMaxPool takes the same types as MaxPool's spec allows for it: floats only in opset 17.
    dispatch<kFloats>(x.dtype(), what, run);
  };
}

// ---- Gradient ops (ai.graft) -----------------------------------------------------------------
// MaxPoolGrad(dY, X) and AveragePoolGrad(dY, X) -> dX, with the forward node's window attributes:
// each output gradient goes back to the window's first maximum (as MaxPool picks it), or spread
// evenly over its taps with the forward's divisor. X gives the shape (and, for MaxPool, the
// maxima); recomputing the argmax costs one extra pass but keeps the Indices output optional.

/// Checks dY against the pooled shape of X and returns dX's accumulator.
std::vector<double> poolGradSetup(const WindowAttrs& wa, const NDArray& dy, const NDArray& x, const Window& w) {
  Shape ys = pooledShape(x, w);
  GRAFT_CHECK(dy.shape() == ys, "{}: dY must have the pooled shape {} of X {}, got {}", wa.what, shapeToString(ys),
              shapeToString(x.shape()), shapeToString(dy.shape()));
  GRAFT_CHECK(dy.dtype() == x.dtype(), "{}: dY has data type {}, X has {}", wa.what, dtypeName(dy.dtype()),
              dtypeName(x.dtype()));
  return std::vector<double>(static_cast<size_t>(x.numel()), 0.0);
}

KernelFn maxPoolGradKernel(CompileContext& c) {
  WindowAttrs wa = parseWindowAttrs(c.node(), /*hasDilations=*/true, /*hasCeilMode=*/true);
  return [=](KernelContext& k) {
    const NDArray& dy = k.input(0);
    const NDArray& x = k.input(1);
    Window w = poolWindow(wa, x);
    std::vector<double> dx = poolGradSetup(wa, dy, x, w);
    int64_t planes = planesOf(x, wa.what), inBlock = shapeNumel(w.in), outBlock = shapeNumel(w.out);
    dispatch<kFloats>(x.dtype(), wa.what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      const T* gp = dy.data<T>();
      forEachWindow(w, planes, [&](int64_t p, int64_t op, const auto& taps) {
        if (taps.empty()) return;
        const T* plane = xp + p * inBlock;
        int64_t best = taps.front().second;
        double bv = toDouble(plane[best]);
        for (const auto& t : taps) {
          double v = toDouble(plane[t.second]);
          if (!std::isnan(bv) && (v > bv || std::isnan(v))) {
            bv = v;
            best = t.second;
          }
        }
        dx[p * inBlock + best] += toDouble(gp[p * outBlock + op]);
      });
      T* out = k.allocOutputUninit(0, x.dtype(), x.shape()).data<T>();
      for (size_t i = 0; i < dx.size(); ++i) out[i] = fromDouble<T>(dx[i]);
    });
  };
}

KernelFn averagePoolGradKernel(CompileContext& c) {
  WindowAttrs wa = parseWindowAttrs(c.node(), /*hasDilations=*/true, /*hasCeilMode=*/true);
  bool includePad = c.node().attrInt("count_include_pad", 0) != 0;
  return [=](KernelContext& k) {
    const NDArray& dy = k.input(0);
    const NDArray& x = k.input(1);
    Window w = poolWindow(wa, x);
    std::vector<double> dx = poolGradSetup(wa, dy, x, w);
    int64_t planes = planesOf(x, wa.what), inBlock = shapeNumel(w.in), outBlock = shapeNumel(w.out);
    dispatch<kFloats>(x.dtype(), wa.what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* gp = dy.data<T>();
      std::vector<int64_t> start(w.rank());
      forEachWindow(w, planes, [&](int64_t p, int64_t op, const auto& taps) {
        if (taps.empty()) return;
        double cnt = static_cast<double>(taps.size());
        if (includePad) {
          // As the forward: the part of the window inside the padded input.
          cnt = 1;
          int64_t rest = op;
          for (int64_t d = w.rank() - 1; d >= 0; --d) {
            int64_t o = rest % w.out[d];
            rest /= w.out[d];
            cnt *= static_cast<double>(tapsInPadded(w, d, o * w.stride[d] - w.padBegin[d]));
          }
        }
        double v = toDouble(gp[p * outBlock + op]) / cnt;
        for (const auto& t : taps) dx[p * inBlock + t.second] += v;
      });
      T* out = k.allocOutputUninit(0, x.dtype(), x.shape()).data<T>();
      for (size_t i = 0; i < dx.size(); ++i) out[i] = fromDouble<T>(dx[i]);
    });
  };
}

std::vector<ir::ValueType> likeInput1(const ir::Node&, const std::vector<ir::ValueType>& in,
                                      const std::vector<const NDArray*>&) {
  return {in.at(1)};
}

// ---- MaxUnpool --------------------------------------------------------------------------------

KernelFn maxUnpoolKernel(CompileContext& c) {
  const auto& n = c.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/false, /*hasCeilMode=*/false);
  GRAFT_CHECK(!wa.kernel.empty(), "{}: attribute 'kernel_shape' is required", wa.what);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& ind = k.input(1);
    const std::string& what = wa.what;
    GRAFT_CHECK(x.rank() >= 3, "{}: input X must have rank >= 3, got shape {}", what, shapeToString(x.shape()));
    GRAFT_CHECK(ind.dtype() == DataType::Int64, "{}: indices I must be int64, got {}", what, dtypeName(ind.dtype()));
    GRAFT_CHECK(ind.shape() == x.shape(), "{}: indices I of shape {} must have the shape of X {}", what,
                shapeToString(ind.shape()), shapeToString(x.shape()));
    int64_t r = x.rank() - 2;
    GRAFT_CHECK(static_cast<int64_t>(wa.kernel.size()) == r, "{}: kernel_shape must have {} values, got {}", what, r,
                wa.kernel.size());
    GRAFT_CHECK(wa.strides.empty() || static_cast<int64_t>(wa.strides.size()) == r, "{}: strides must have {} values",
                what, r);
    GRAFT_CHECK(wa.pads.empty() || static_cast<int64_t>(wa.pads.size()) == 2 * r, "{}: pads must have {} values", what,
                2 * r);
    // Indices address the default unpooled shape; an output_shape input only pads that result at
    // the end of each axis (as ONNX's reference does).
    Shape full = {x.dim(0), x.dim(1)};
    for (int64_t d = 0; d < r; ++d) {
      int64_t s = wa.strides.empty() ? 1 : wa.strides[d];
      int64_t pads = wa.pads.empty() ? 0 : wa.pads[d] + wa.pads[d + r];
      int64_t v = 0;
      GRAFT_CHECK(!__builtin_mul_overflow(s, x.dim(d + 2) - 1, &v), "{}: output extent overflows", what);
      v = v + wa.kernel[d] - pads;
      GRAFT_CHECK(v >= 0, "{}: pads {} exceed the unpooled extent on spatial axis {}", what, shapeToString(wa.pads), d);
      full.push_back(v);
    }
    int64_t fullTotal = shapeNumel(full);
    Shape ys = full;
    if (k.hasInput(2)) {
      ys = toInt64Vector(k.input(2));
      GRAFT_CHECK(static_cast<int64_t>(ys.size()) == x.rank(),
                  "{}: output_shape must have {} values (the rank of X), got {}", what, x.rank(), shapeToString(ys));
      for (int64_t d = 0; d < x.rank(); ++d)
        GRAFT_CHECK(ys[d] >= full[d], "{}: output_shape {} is smaller than the unpooled shape {} on axis {}", what,
                    shapeToString(ys), shapeToString(full), d);
    }
    shapeNumel(ys);  // throws on overflow
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      const int64_t* ip = ind.data<int64_t>();
      std::vector<T> unpooled(static_cast<size_t>(fullTotal), T(0.0f));
      for (int64_t i = 0; i < x.numel(); ++i) {
        GRAFT_CHECK(ip[i] >= 0 && ip[i] < fullTotal,
                    "{}: index {} at position {} of I is outside the unpooled shape {}", what, ip[i], i,
                    shapeToString(full));
        unpooled[ip[i]] = xp[i];
      }
      T* yp = k.allocOutput(0, x.dtype(), ys).data<T>();
      if (fullTotal == 0) return;
      std::vector<int64_t> ystr = stridesOf(ys);
      Odometer o(full);
      int64_t src = 0;
      do {
        int64_t dst = 0;
        for (int64_t d = 0; d < x.rank(); ++d) dst += o.idx[d] * ystr[d];
        yp[dst] = unpooled[src++];
      } while (o.next());
    });
  };
}

// ---- MaxRoiPool and RoiAlign -------------------------------------------------------------------

/// A RoI coordinate as an integer pixel index, rejecting NaN and values far outside any image.
int64_t roiPixel(double v, const std::string& what) {
  GRAFT_CHECK(std::isfinite(v) && std::abs(v) < 1e12, "{}: RoI coordinate {} is not a finite pixel position", what, v);
  return static_cast<int64_t>(std::round(v));
}

KernelFn maxRoiPoolKernel(CompileContext& c) {
  const auto& n = c.node();
  std::string what = n.describe();
  std::vector<int64_t> pooled = n.attrInts("pooled_shape");
  double scale = n.attrFloat("spatial_scale", 1.0f);
  GRAFT_CHECK(
      pooled.size() == 2 && pooled[0] >= 1 && pooled[1] >= 1 && pooled[0] <= (1 << 20) && pooled[1] <= (1 << 20),
      "{}: pooled_shape must be two positive values, got {}", what, shapeToString(pooled));
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& rois = k.input(1);
    GRAFT_CHECK(x.rank() == 4, "{}: input X must have rank 4 ([N, C, H, W]), got shape {}", what,
                shapeToString(x.shape()));
    GRAFT_CHECK(rois.rank() == 2 && rois.dim(1) == 5, "{}: rois must have shape [num_rois, 5], got {}", what,
                shapeToString(rois.shape()));
    GRAFT_CHECK(rois.dtype() == x.dtype(), "{}: rois has data type {}, X has {}", what, dtypeName(rois.dtype()),
                dtypeName(x.dtype()));
    int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), R = rois.dim(0), PH = pooled[0], PW = pooled[1];
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      const T* rp = rois.data<T>();
      T* yp = k.allocOutputUninit(0, x.dtype(), {R, C, PH, PW}).data<T>();
      for (int64_t r = 0; r < R; ++r) {
        const T* roi = rp + r * 5;
        double b = toDouble(roi[0]);
        GRAFT_CHECK(std::isfinite(b) && b >= 0 && b < static_cast<double>(N),
                    "{}: RoI {} has batch index {}, expected an integer in [0, {})", what, r, b, N);
        auto batch = static_cast<int64_t>(b);
        // Caffe's RoIPool: corners rounded to pixels, the RoI at least one pixel, bins with
        // floor/ceil bounds clipped to the image; an empty bin gives 0.
        int64_t x1 = roiPixel(toDouble(roi[1]) * scale, what), y1 = roiPixel(toDouble(roi[2]) * scale, what);
        int64_t x2 = roiPixel(toDouble(roi[3]) * scale, what), y2 = roiPixel(toDouble(roi[4]) * scale, what);
        double binH = static_cast<double>(std::max<int64_t>(y2 - y1 + 1, 1)) / static_cast<double>(PH);
        double binW = static_cast<double>(std::max<int64_t>(x2 - x1 + 1, 1)) / static_cast<double>(PW);
        for (int64_t ch = 0; ch < C; ++ch) {
          const T* plane = xp + (batch * C + ch) * H * W;
          for (int64_t ph = 0; ph < PH; ++ph)
            for (int64_t pw = 0; pw < PW; ++pw) {
              auto clip = [](int64_t v, int64_t hi) { return std::min(std::max<int64_t>(v, 0), hi); };
              int64_t hs = clip(static_cast<int64_t>(std::floor(ph * binH)) + y1, H);
              int64_t he = clip(static_cast<int64_t>(std::ceil((ph + 1) * binH)) + y1, H);
              int64_t ws = clip(static_cast<int64_t>(std::floor(pw * binW)) + x1, W);
              int64_t we = clip(static_cast<int64_t>(std::ceil((pw + 1) * binW)) + x1, W);
              double best = 0;
              bool any = false;
              for (int64_t h = hs; h < he; ++h)
                for (int64_t w = ws; w < we; ++w) {
                  double v = toDouble(plane[h * W + w]);
                  if (!any || v > best || std::isnan(v)) best = v;
                  any = true;
                }
              yp[((r * C + ch) * PH + ph) * PW + pw] = fromDouble<T>(best);
            }
        }
      }
    });
  };
}

/// Bilinear sample of one RoiAlign sampling point: the four neighbour offsets and weights, or
/// all-zero weights for points more than one pixel outside the image.
struct Bilinear {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

Bilinear bilinearAt(double y, double x, int64_t H, int64_t W) {
  Bilinear b;
  if (y < -1.0 || y > static_cast<double>(H) || x < -1.0 || x > static_cast<double>(W)) return b;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  auto yl = static_cast<int64_t>(y), xl = static_cast<int64_t>(x), yh = yl + 1, xh = xl + 1;
  if (yl >= H - 1) {
    yl = yh = H - 1;
    y = static_cast<double>(yl);
  }
  if (xl >= W - 1) {
    xl = xh = W - 1;
    x = static_cast<double>(xl);
  }
  double ly = y - static_cast<double>(yl), lx = x - static_cast<double>(xl), hy = 1 - ly, hx = 1 - lx;
  b.pos[0] = yl * W + xl;
  b.pos[1] = yl * W + xh;
  b.pos[2] = yh * W + xl;
  b.pos[3] = yh * W + xh;
  b.w[0] = hy * hx;
  b.w[1] = hy * lx;
  b.w[2] = ly * hx;
  b.w[3] = ly * lx;
  return b;
}

KernelFn roiAlignKernel(CompileContext& c) {
  const auto& n = c.node();
  std::string what = n.describe();
  std::string ctm = n.attrString("coordinate_transformation_mode", "half_pixel");
  std::string mode = n.attrString("mode", "avg");
  int64_t OH = n.attrInt("output_height", 1), OW = n.attrInt("output_width", 1);
  int64_t sampling = n.attrInt("sampling_ratio", 0);
  double scale = n.attrFloat("spatial_scale", 1.0f);
  GRAFT_CHECK(ctm == "half_pixel" || ctm == "output_half_pixel",
              "{}: coordinate_transformation_mode must be half_pixel or output_half_pixel, got '{}'", what, ctm);
  GRAFT_CHECK(mode == "avg" || mode == "max", "{}: mode must be avg or max, got '{}'", what, mode);
  GRAFT_CHECK(OH >= 1 && OW >= 1 && OH <= (1 << 20) && OW <= (1 << 20),
              "{}: output_height and output_width must be positive, got {} and {}", what, OH, OW);
  GRAFT_CHECK(sampling >= 0 && sampling <= (1 << 20), "{}: sampling_ratio must be >= 0, got {}", what, sampling);
  GRAFT_CHECK(std::isfinite(scale), "{}: spatial_scale must be finite, got {}", what, scale);
  bool halfPixel = ctm == "half_pixel", isMax = mode == "max";
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& rois = k.input(1);
    const NDArray& bi = k.input(2);
    GRAFT_CHECK(x.rank() == 4, "{}: input X must have rank 4 ([N, C, H, W]), got shape {}", what,
                shapeToString(x.shape()));
    GRAFT_CHECK(rois.rank() == 2 && rois.dim(1) == 4, "{}: rois must have shape [num_rois, 4], got {}", what,
                shapeToString(rois.shape()));
    GRAFT_CHECK(rois.dtype() == x.dtype(), "{}: rois has data type {}, X has {}", what, dtypeName(rois.dtype()),
                dtypeName(x.dtype()));
    GRAFT_CHECK(bi.rank() == 1 && bi.dim(0) == rois.dim(0), "{}: batch_indices must have shape [{}], got {}", what,
                rois.dim(0), shapeToString(bi.shape()));
    std::vector<int64_t> batch = toInt64Vector(bi);
    int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), R = rois.dim(0);
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      const T* rp = rois.data<T>();
      T* yp = k.allocOutputUninit(0, x.dtype(), {R, C, OH, OW}).data<T>();
      std::vector<Bilinear> samples;
      for (int64_t r = 0; r < R; ++r) {
        GRAFT_CHECK(batch[r] >= 0 && batch[r] < N, "{}: batch_indices[{}] = {} is outside [0, {})", what, r, batch[r],
                    N);
        double coord[4];
        for (int i = 0; i < 4; ++i) {
          coord[i] = toDouble(rp[r * 4 + i]) * scale - (halfPixel ? 0.5 : 0.0);
          GRAFT_CHECK(std::isfinite(coord[i]) && std::abs(coord[i]) < 1e15, "{}: RoI {} has a non-finite coordinate",
                      what, r);
        }
        double roiW = coord[2] - coord[0], roiH = coord[3] - coord[1];
        // output_half_pixel (the pre-opset-16 behaviour) forces RoIs to at least one pixel.
        if (!halfPixel) {
          roiW = std::max(roiW, 1.0);
          roiH = std::max(roiH, 1.0);
        }
        double binH = roiH / static_cast<double>(OH), binW = roiW / static_cast<double>(OW);
        int64_t gh = sampling > 0 ? sampling : static_cast<int64_t>(std::ceil(binH));
        int64_t gw = sampling > 0 ? sampling : static_cast<int64_t>(std::ceil(binW));
        gh = std::max<int64_t>(gh, 0);
        gw = std::max<int64_t>(gw, 0);
        GRAFT_CHECK(gh <= (int64_t{1} << 22) && gw <= (int64_t{1} << 22) && gh * gw <= (int64_t{1} << 22),
                    "{}: RoI {} needs {} x {} sampling points per bin (RoI in input pixels?)", what, r, gh, gw);
        double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
        samples.clear();
        for (int64_t ph = 0; ph < OH; ++ph)
          for (int64_t pw = 0; pw < OW; ++pw)
            for (int64_t iy = 0; iy < gh; ++iy) {
              double yy = coord[1] + ph * binH + (iy + 0.5) * binH / static_cast<double>(gh);
              for (int64_t ix = 0; ix < gw; ++ix) {
                double xx = coord[0] + pw * binW + (ix + 0.5) * binW / static_cast<double>(gw);
                samples.push_back(bilinearAt(yy, xx, H, W));
              }
            }
        int64_t per = gh * gw;
        for (int64_t ch = 0; ch < C; ++ch) {
          const T* plane = xp + (batch[r] * C + ch) * H * W;
          for (int64_t b = 0; b < OH * OW; ++b) {
            double acc = 0;
            for (int64_t s = 0; s < per; ++s) {
              const Bilinear& sm = samples[b * per + s];
              if (isMax) {
                // As ONNX's reference and onnxruntime: the max of the weighted corner values.
                double v = sm.w[0] * toDouble(plane[sm.pos[0]]);
                for (int i = 1; i < 4; ++i) v = std::max(v, sm.w[i] * toDouble(plane[sm.pos[i]]));
                acc = s == 0 ? v : std::max(acc, v);
              } else {
                for (int i = 0; i < 4; ++i) acc += sm.w[i] * toDouble(plane[sm.pos[i]]);
              }
            }
            yp[(r * C + ch) * OH * OW + b] = fromDouble<T>(isMax ? acc : acc / count);
          }
        }
      }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(pool) {
  r.add("MaxPool").setReference(maxPoolKernel);
  r.add("AveragePool").setReference(averagePoolKernel);
  r.add("LpPool").setReference(lpPoolKernel);
  r.add("GlobalAveragePool").setReference([](CompileContext& c) { return globalPoolKernel(c, GlobalKind::Average); });
  r.add("GlobalMaxPool").setReference([](CompileContext& c) { return globalPoolKernel(c, GlobalKind::Max); });
  r.add("GlobalLpPool").setReference([](CompileContext& c) { return globalPoolKernel(c, GlobalKind::Lp); });
  r.add("MaxPoolGrad", kGraftDomain).setReference(maxPoolGradKernel).setInfer(likeInput1);
  r.add("AveragePoolGrad", kGraftDomain).setReference(averagePoolGradKernel).setInfer(likeInput1);
  r.add("MaxUnpool").setReference(maxUnpoolKernel).noGradient({1, 2});
  r.add("MaxRoiPool").setReference(maxRoiPoolKernel).noGradient({1});
  r.add("RoiAlign").setReference(roiAlignKernel).noGradient({1, 2});
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
// MaxPool and AveragePool differentiate into the ai.graft gradient ops above (kernel libraries
// have pooling-backward primitives for them); the global pools and the Lp pools into forward
// ops around them.
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {
namespace {

ir::Attributes windowAttrsOf(const ir::Node& n, std::initializer_list<const char*> names) {
  ir::Attributes a;
  for (const char* name : names)
    if (const ir::AttrValue* v = n.attrs().find(name)) a.set(name, *v);
  return a;
}

Shape staticSpatial(GradBuilder& g, const ir::Tensor* x) {
  const TensorInfo& info = x->info();
  bool ok = info.hasShape() && info.rank() >= 2;
  Shape s;
  for (int64_t d = 2; ok && d < info.rank(); ++d) {
    ok = info.dims()[d].known();
    s.push_back(info.dims()[d].value);
  }
  GRAFT_CHECK(ok, "{}: the gradient needs the spatial shape of '{}' ([N, C, spatial...]), got {}", g.node().describe(),
              x->id(), info.str());
  return s;
}

// Scatters every element of t (pooled like by an AveragePool with these window attributes) over
// its window's taps: the adjoint of a sum over windows without ceil_mode.
ir::Tensor* windowSumAdjoint(GradBuilder& g, ir::Tensor* t, ir::Tensor* x, ir::Attributes a, int64_t taps) {
  a.set("count_include_pad", int64_t{1});
  return g.op("AveragePoolGrad", {g.scale(t, static_cast<double>(taps)), x}, a, kGraftDomain);
}

// d/dx (sum |x|^p)^(1/p) = sign(x) |x|^(p-1) y^(1-p); 0 where y is 0 (all-zero windows).
ir::Tensor* lpOuter(GradBuilder& g, int64_t p) {
  ir::Tensor *dy = g.dy(0), *y = g.out(0);
  if (p == 1) return dy;
  ir::Tensor* zero = g.scalarLike(0, y);
  ir::Tensor* safe = g.where(g.op("Equal", {y, zero}), g.scalarLike(1, y), y);
  ir::Tensor* scaled = g.mul(dy, g.op("Pow", {safe, g.scalarLike(static_cast<double>(1 - p), y)}));
  return g.where(g.op("Equal", {y, zero}), zero, scaled);
}
ir::Tensor* lpInner(GradBuilder& g, ir::Tensor* x, int64_t p) {
  if (p == 1) return g.op("Sign", {x});
  if (p == 2) return x;
  return g.mul(g.op("Sign", {x}), g.op("Pow", {g.op("Abs", {x}), g.scalarLike(static_cast<double>(p - 1), x)}));
}

void lpPoolVjp(GradBuilder& g, bool global) {
  ir::Tensor* x = g.in(0);
  int64_t p = g.node().attrInt("p", 2);
  GRAFT_CHECK(p >= 1, "{}: p must be >= 1, got {}", g.node().describe(), p);
  Shape spatial = staticSpatial(g, x);
  ir::Tensor* outer = lpOuter(g, p);
  ir::Tensor* spread;
  if (global) {
    spread = g.op("Expand", {outer, gradutil::shapeOf(g, x)});
  } else {
    // The adjoint of the window sum is an included-padding AveragePoolGrad times the kernel size,
    // which holds only while every window lies inside the padded input: not so with ceil_mode.
    GRAFT_CHECK(g.node().attrInt("ceil_mode", 0) == 0, "{}: the gradient of LpPool with ceil_mode=1 is not implemented",
                g.node().describe());
    ir::Attributes a = windowAttrsOf(g.node(), {"kernel_shape", "strides", "pads", "auto_pad", "dilations"});
    spread = windowSumAdjoint(g, outer, x, a, shapeNumel(Shape(g.node().attrInts("kernel_shape"))));
  }
  g.setDx(0, g.mul(spread, lpInner(g, x, p)));
}

}  // namespace

GRAFT_REGISTER_OPS(pool_vjp) {
  r.add("MaxPool").setVjp([](GradBuilder& g) {
    ir::Attributes a =
        windowAttrsOf(g.node(), {"kernel_shape", "strides", "pads", "auto_pad", "dilations", "ceil_mode"});
    g.setDx(0, g.op("MaxPoolGrad", {g.dy(0), g.in(0)}, a, kGraftDomain));
  });
  r.add("AveragePool").setVjp([](GradBuilder& g) {
    ir::Attributes a = windowAttrsOf(
        g.node(), {"kernel_shape", "strides", "pads", "auto_pad", "dilations", "ceil_mode", "count_include_pad"});
    g.setDx(0, g.op("AveragePoolGrad", {g.dy(0), g.in(0)}, a, kGraftDomain));
  });
  r.add("GlobalMaxPool").setVjp([](GradBuilder& g) {
    Shape spatial = staticSpatial(g, g.in(0));
    if (spatial.empty()) return g.setDx(0, g.dy(0));  // [N, C]: the identity
    ir::Attributes a;
    a.set("kernel_shape", std::vector<int64_t>(spatial.begin(), spatial.end()));
    g.setDx(0, g.op("MaxPoolGrad", {g.dy(0), g.in(0)}, a, kGraftDomain));
  });
  r.add("GlobalAveragePool").setVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    Shape spatial = staticSpatial(g, x);
    double k = static_cast<double>(shapeNumel(spatial));
    g.setDx(0, g.op("Expand", {g.scale(g.dy(0), k > 0 ? 1.0 / k : 0.0), gradutil::shapeOf(g, x)}));
  });
  r.add("LpPool").setVjp([](GradBuilder& g) { lpPoolVjp(g, false); });
  r.add("GlobalLpPool").setVjp([](GradBuilder& g) { lpPoolVjp(g, true); });
}

}  // namespace graft::ops
