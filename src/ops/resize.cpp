// Resize (opset 19: nearest, linear and cubic interpolation; scales or sizes over every axis or
// the listed axes; keep_aspect_ratio_policy; antialias; every coordinate_transformation_mode,
// half_pixel_symmetric included) and GridSample (opset 16: 4-D, bilinear, nearest and
// bicubic, zeros/border/reflection padding). Upsample from older models reaches Resize through
// ONNX's version converter. Interpolation weights are computed and applied in double.
#include <cmath>

#include "ops/cast_util.hpp"
#include "ops/conv_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

enum class Interp { Nearest, Linear, Cubic };
enum class Coord {
  HalfPixel,
  HalfPixelSymmetric,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfHalfPixelForNN,
  TfCropAndResize
};
enum class AspectPolicy { Stretch, NotLarger, NotSmaller };
enum class NearestRound { PreferFloor, PreferCeil, Floor, Ceil };

struct ResizeAttrs {
  Interp interp = Interp::Nearest;
  Coord coord = Coord::HalfPixel;
  NearestRound round = NearestRound::PreferFloor;
  double cubicA = -0.75;
  bool excludeOutside = false;
  double extrapolation = 0.0;
  /// Linear and cubic: widen the kernel by 1/scale when downsampling (opset 18).
  bool antialias = false;
  AspectPolicy policy = AspectPolicy::Stretch;
  /// The axes scales/sizes/roi refer to (opset 18), as given (possibly negative); empty: all.
  std::vector<int64_t> axes;
  std::string what;
};

ResizeAttrs parseResizeAttrs(const ir::Node& n) {
  ResizeAttrs a;
  a.what = n.describe();
  a.interp = attrChoice<Interp>(n, "mode", "nearest",
                                {{"nearest", Interp::Nearest}, {"linear", Interp::Linear}, {"cubic", Interp::Cubic}});
  a.coord = attrChoice<Coord>(n, "coordinate_transformation_mode", "half_pixel",
                              {{"half_pixel", Coord::HalfPixel},
                               {"half_pixel_symmetric", Coord::HalfPixelSymmetric},
                               {"pytorch_half_pixel", Coord::PytorchHalfPixel},
                               {"align_corners", Coord::AlignCorners},
                               {"asymmetric", Coord::Asymmetric},
                               {"tf_half_pixel_for_nn", Coord::TfHalfPixelForNN},
                               {"tf_crop_and_resize", Coord::TfCropAndResize}});
  a.round = attrChoice<NearestRound>(n, "nearest_mode", "round_prefer_floor",
                                     {{"round_prefer_floor", NearestRound::PreferFloor},
                                      {"round_prefer_ceil", NearestRound::PreferCeil},
                                      {"floor", NearestRound::Floor},
                                      {"ceil", NearestRound::Ceil}});
  a.cubicA = n.attrFloat("cubic_coeff_a", -0.75f);
  a.excludeOutside = n.attrInt("exclude_outside", 0) != 0;
  a.extrapolation = n.attrFloat("extrapolation_value", 0.0f);
  a.antialias = n.attrInt("antialias", 0) != 0;
  a.policy = attrChoice<AspectPolicy>(n, "keep_aspect_ratio_policy", "stretch",
                                      {{"stretch", AspectPolicy::Stretch},
                                       {"not_larger", AspectPolicy::NotLarger},
                                       {"not_smaller", AspectPolicy::NotSmaller}});
  a.axes = n.attrInts("axes", {});
  GRAFT_CHECK(std::isfinite(a.cubicA), "{}: cubic_coeff_a must be finite", a.what);
  // As ONNX's reference: nearest has no antialiased form.
  GRAFT_CHECK(!(a.antialias && a.interp == Interp::Nearest), "{}: antialias=1 needs mode linear or cubic, got nearest",
              a.what);
  return a;
}

/// The input taps of one output coordinate along one axis; `outside` marks a tf_crop_and_resize
/// coordinate outside the input (the output takes extrapolation_value).
struct AxisTaps {
  std::vector<std::pair<int64_t, double>> taps;  // (input index, weight)
  bool outside = false;
};

/// Keys' cubic convolution weights for the taps at offsets -1, 0, 1, 2 from floor(x), t = x - floor(x).
void cubicWeights(double t, double A, double w[4]) {
  auto near = [A](double d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };       // |d| <= 1
  auto far = [A](double d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };  // 1 < |d| < 2
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

/// Taps of every output coordinate along one axis. `scale` is the axis' output/input ratio and
/// `outLen` its exact (non-integer when from scales) output length, as ONNX's reference uses.
std::vector<AxisTaps> axisTaps(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double outLen,
                               double roiStart, double roiEnd) {
  std::vector<AxisTaps> res(static_cast<size_t>(out));
  double L = static_cast<double>(in);
  // Antialiased filters (downsampling, scale < 1) span 2 / scale (linear) or 4 / scale (cubic)
  // input elements: wideN taps from wideStart relative to the step's left end.
  double s = std::min(scale, 1.0);
  bool wide = a.antialias && a.interp != Interp::Nearest;
  int64_t wideStart = 0, wideN = 0;
  if (wide) {
    double support = a.interp == Interp::Linear ? 1.0 : 2.0;
    GRAFT_CHECK(support / s < 1e6, "{}: antialias with scale {} needs too wide a filter", a.what, scale);
    wideStart = static_cast<int64_t>(std::floor(-support / s)) + 1;
    wideN = 2 - 2 * wideStart;
  }
  double reach = 2.0 + static_cast<double>(wideN);
  for (int64_t y = 0; y < out; ++y) {
    double yd = static_cast<double>(y), x = 0;
    switch (a.coord) {
      case Coord::HalfPixel:
        x = (yd + 0.5) / scale - 0.5;
        break;
      case Coord::HalfPixelSymmetric: {
        // The centre of the input maps to the centre of the output, also where the output
        // length was rounded (out != outLen).
        double offset = L / 2 * (1 - static_cast<double>(out) / outLen);
        x = offset + (yd + 0.5) / scale - 0.5;
        break;
      }
      case Coord::PytorchHalfPixel:
        x = outLen > 1 ? (yd + 0.5) / scale - 0.5 : 0.0;
        break;
      case Coord::AlignCorners:
        x = outLen == 1 ? 0.0 : yd * (L - 1) / (outLen - 1);
        break;
      case Coord::Asymmetric:
        x = yd / scale;
        break;
      case Coord::TfHalfPixelForNN:
        x = (yd + 0.5) / scale;
        break;
      case Coord::TfCropAndResize:
        x = outLen > 1 ? roiStart * (L - 1) + yd * (roiEnd - roiStart) * (L - 1) / (outLen - 1)
                       : 0.5 * (roiStart + roiEnd) * (L - 1);
        break;
    }
    AxisTaps& t = res[y];
    if (a.coord == Coord::TfCropAndResize && (x < 0 || x > L - 1 || std::isnan(x))) {
      t.outside = true;
      continue;
    }
    // Beyond [-reach, in + reach] every tap clamps to an edge anyway; bounding x keeps the
    // integer conversions below defined.
    x = std::min(std::max(x, -reach), L + reach);
    auto clampIdx = [in](int64_t i) { return std::min(std::max<int64_t>(i, 0), in - 1); };
    if (a.interp == Interp::Nearest) {
      double r = 0;
      switch (a.round) {
        case NearestRound::PreferFloor:
          r = std::ceil(x - 0.5);
          break;
        case NearestRound::PreferCeil:
          r = std::floor(x + 0.5);
          break;
        case NearestRound::Floor:
          r = std::floor(x);
          break;
        case NearestRound::Ceil:
          r = std::ceil(x);
          break;
      }
      t.taps.emplace_back(clampIdx(static_cast<int64_t>(r)), 1.0);
      continue;
    }
    double f = std::floor(x), frac = x - f;
    auto x0 = static_cast<int64_t>(f);
    if (wide) {
      // ONNX's antialiased filters: the taps base + i, i in [start, start + n), weigh
      // filter(s * (i - ratio)) with s = min(scale, 1), normalised to sum 1; ratio in (0, 1]
      // (an integer x counts as the right end of the step from x - 1).
      int64_t base = frac == 0 ? x0 - 1 : x0;
      double ratio = x - static_cast<double>(base);
      double sum = 0;
      std::vector<std::pair<int64_t, double>> raw;
      for (int64_t i = wideStart; i < wideStart + wideN; ++i) {
        double d = std::abs(s * (static_cast<double>(i) - ratio)), w = 0;
        if (a.interp == Interp::Linear)
          w = std::max(0.0, 1 - d);
        else if (d <= 1)
          w = ((a.cubicA + 2) * d - (a.cubicA + 3)) * d * d + 1;
        else if (d < 2)
          w = ((a.cubicA * d - 5 * a.cubicA) * d + 8 * a.cubicA) * d - 4 * a.cubicA;
        raw.emplace_back(base + i, w);
        sum += w;
      }
      if (a.excludeOutside) {
        double kept = 0;
        for (auto& [idx, w] : raw) {
          if (idx < 0 || idx >= in) w = 0;
          kept += w;
        }
        sum = kept;
      }
      for (const auto& [idx, w] : raw) t.taps.emplace_back(clampIdx(idx), sum != 0 ? w / sum : w);
    } else if (a.interp == Interp::Linear) {
      t.taps.emplace_back(clampIdx(x0), 1 - frac);
      t.taps.emplace_back(clampIdx(x0 + 1), frac);
    } else {
      double w[4];
      cubicWeights(frac, a.cubicA, w);
      double sum = 0;
      for (int i = 0; i < 4; ++i) {
        int64_t idx = x0 - 1 + i;
        if (a.excludeOutside && (idx < 0 || idx >= in)) w[i] = 0;
        sum += w[i];
      }
      for (int i = 0; i < 4; ++i)
        t.taps.emplace_back(clampIdx(x0 - 1 + i), a.excludeOutside && sum != 0 ? w[i] / sum : w[i]);
    }
    // Zero weights add nothing; dropping them keeps N-D products small.
    std::erase_if(t.taps, [](const auto& p) { return p.second == 0.0; });
    if (t.taps.empty()) t.taps.emplace_back(clampIdx(x0), 0.0);  // every tap excluded: 0
  }
  return res;
}

/// An interpolated value as element type T: integers round to nearest (ties to even) and
/// saturate, rather than truncate, so that resizing a constant integer image keeps it constant.
template <class T>
T fromInterpolated(double v) {
  if constexpr (std::is_integral_v<T>)
    return convertElement<T>(std::nearbyint(v));
  else
    return convertElement<T>(v);
}

std::vector<double> floatValues(const NDArray& a, const std::string& what, const char* name) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  dispatch<kFloats>(a.dtype(), fmt::format("{} input '{}'", what, name), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < a.numel(); ++i) v[i] = static_cast<double>(static_cast<ComputeType<T>>(a.data<T>()[i]));
  });
  return v;
}

/// Resize's geometry for one call: the output shape and the taps of every output coordinate
/// along every axis, from X's shape and the roi/scales/sizes inputs (k's inputs `roiInput`,
/// +1, +2).
struct ResizeGeometry {
  Shape out;
  std::vector<std::vector<AxisTaps>> axes;
};

ResizeGeometry resizeGeometry(const ResizeAttrs& a, const KernelContext& k, const Shape& xShape, bool buildTaps,
                              size_t roiInput = 1) {
  const std::string& what = a.what;
  size_t roiIn = roiInput, scalesIn = roiInput + 1, sizesIn = roiInput + 2;
  int64_t r = static_cast<int64_t>(xShape.size());
  GRAFT_CHECK(r >= 1, "{}: input X must have rank >= 1", what);
  bool hasSizes = k.hasInput(sizesIn) && k.input(sizesIn).numel() > 0;
  bool hasScales = k.hasInput(scalesIn) && k.input(scalesIn).numel() > 0;
  GRAFT_CHECK(hasSizes != hasScales, "{}: exactly one of 'scales' and 'sizes' must be given (non-empty), got {}", what,
              hasSizes ? "both" : "neither");
  ResizeGeometry geo;
  Shape& out = geo.out;
  out = xShape;
  std::vector<double> scales(r, 1.0);
  // The axes the scales/sizes/roi values refer to; the others keep their extent (scale 1).
  std::vector<int64_t> axes;
  if (a.axes.empty()) {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  } else {
    std::vector<bool> seen(r, false);
    for (int64_t v : a.axes) {
      int64_t d = normalizeAxis(v, r, what);
      GRAFT_CHECK(!seen[d], "{}: attribute 'axes' lists axis {} twice", what, d);
      seen[d] = true;
      axes.push_back(d);
    }
  }
  auto na = static_cast<int64_t>(axes.size());
  const char* valuesOf = a.axes.empty() ? "the rank of X" : "one per axis in 'axes'";
  bool stretched = true;  // output length = scale * input length exactly (sizes without a policy)
  if (hasSizes) {
    GRAFT_CHECK(k.input(sizesIn).dtype() == DataType::Int64, "{}: sizes must be int64, got {}", what,
                dtypeName(k.input(sizesIn).dtype()));
    std::vector<int64_t> sizes = toInt64Vector(k.input(sizesIn));
    GRAFT_CHECK(static_cast<int64_t>(sizes.size()) == na, "{}: sizes must have {} values ({}), got {}", what, na,
                valuesOf, sizes.size());
    for (int64_t i = 0; i < na; ++i) {
      int64_t d = axes[i];
      GRAFT_CHECK(sizes[i] >= 0, "{}: sizes {} has a negative value", what, shapeToString(sizes));
      GRAFT_CHECK(xShape[d] > 0 || sizes[i] == 0, "{}: cannot resize the empty axis {} of X {} to {}", what, d,
                  shapeToString(xShape), sizes[i]);
      out[d] = sizes[i];
      scales[d] = xShape[d] > 0 ? static_cast<double>(sizes[i]) / static_cast<double>(xShape[d]) : 1.0;
    }
    if (a.policy != AspectPolicy::Stretch && na > 0) {
      // One scale for every listed axis, the smallest (not_larger) or largest (not_smaller);
      // lengths round half up, as ONNX's reference does.
      double sc = scales[axes[0]];
      for (int64_t d : axes)
        sc = a.policy == AspectPolicy::NotLarger ? std::min(sc, scales[d]) : std::max(sc, scales[d]);
      for (int64_t d : axes) {
        scales[d] = sc;
        double o = std::floor(sc * static_cast<double>(xShape[d]) + 0.5);
        GRAFT_CHECK(o < 9e15, "{}: output extent {} on axis {} is too large", what, o, d);
        out[d] = static_cast<int64_t>(o);
      }
      stretched = false;
    }
  } else {
    std::vector<double> given = floatValues(k.input(scalesIn), what, "scales");
    GRAFT_CHECK(static_cast<int64_t>(given.size()) == na, "{}: scales must have {} values ({}), got {}", what, na,
                valuesOf, given.size());
    for (int64_t i = 0; i < na; ++i) scales[axes[i]] = given[i];
    for (int64_t d : axes) {
      GRAFT_CHECK(std::isfinite(scales[d]) && scales[d] > 0, "{}: scales must be positive and finite, got {}", what,
                  scales[d]);
      // ONNX's shape inference (1.23) and reference multiply in double: do the same so the shapes agree.
      double o = std::floor(static_cast<double>(xShape[d]) * scales[d]);
      GRAFT_CHECK(o < 9e15, "{}: output extent {} on axis {} is too large", what, o, d);
      out[d] = static_cast<int64_t>(o);
    }
  }
  shapeNumel(out);  // throws on overflow
  std::vector<double> roi;
  if (a.coord == Coord::TfCropAndResize) {
    GRAFT_CHECK(k.hasInput(roiIn), "{}: tf_crop_and_resize needs the 'roi' input", what);
    std::vector<double> given = floatValues(k.input(roiIn), what, "roi");
    GRAFT_CHECK(static_cast<int64_t>(given.size()) == 2 * na,
                "{}: roi must have {} values (starts then ends{}), got {}", what, 2 * na,
                a.axes.empty() ? "" : ", of the axes in 'axes'", given.size());
    for (double v : given) GRAFT_CHECK(std::isfinite(v), "{}: roi values must be finite", what);
    roi.assign(2 * r, 0.0);
    std::fill(roi.begin() + r, roi.end(), 1.0);
    for (int64_t i = 0; i < na; ++i) {
      roi[axes[i]] = given[i];
      roi[axes[i] + r] = given[i + na];
    }
  }
  if (!buildTaps) return geo;
  geo.axes.resize(r);
  for (int64_t d = 0; d < r; ++d)
    geo.axes[d] =
        axisTaps(a, xShape[d], out[d], scales[d],
                 hasSizes && stretched ? static_cast<double>(out[d]) : scales[d] * static_cast<double>(xShape[d]),
                 roi.empty() ? 0.0 : roi[d], roi.empty() ? 1.0 : roi[d + r]);
  return geo;
}

/// Calls f(output offset, outside, taps) for every output element, where taps is the cartesian
/// product of the axes' taps as (input offset, weight) pairs; `outside`: a tf_crop_and_resize
/// position outside the input (no taps).
template <class F>
void forEachResizeOutput(const ResizeGeometry& geo, const Shape& xShape, F&& f) {
  int64_t r = static_cast<int64_t>(xShape.size());
  std::vector<int64_t> xs = stridesOf(xShape);
  std::vector<const AxisTaps*> cur(r);
  std::vector<size_t> ti(r);
  std::vector<std::pair<int64_t, double>> taps;
  Odometer o(geo.out);
  int64_t yi = 0;
  do {
    bool outside = false;
    for (int64_t d = 0; d < r; ++d) {
      cur[d] = &geo.axes[d][o.idx[d]];
      outside |= cur[d]->outside;
    }
    taps.clear();
    if (!outside) {
      std::fill(ti.begin(), ti.end(), 0);
      while (true) {
        double w = 1;
        int64_t off = 0;
        for (int64_t d = 0; d < r; ++d) {
          const auto& tp = cur[d]->taps[ti[d]];
          w *= tp.second;
          off += tp.first * xs[d];
        }
        taps.emplace_back(off, w);
        int64_t d = r - 1;
        for (; d >= 0; --d) {
          if (++ti[d] < cur[d]->taps.size()) break;
          ti[d] = 0;
        }
        if (d < 0) break;
      }
    }
    f(yi++, outside, taps);
  } while (o.next());
}

KernelFn resizeKernel(CompileContext& c) {
  ResizeAttrs a = parseResizeAttrs(c.node());
  return [a](KernelContext& k) {
    const std::string& what = a.what;
    const NDArray& x = k.input(0);
    ResizeGeometry geo = resizeGeometry(a, k, x.shape(), false);
    // Allocate first: the size limits apply before any per-axis table is built.
    NDArray& y = k.allocOutput(0, x.dtype(), geo.out);
    if (y.numel() == 0) return;
    geo = resizeGeometry(a, k, x.shape(), true);
    uint32_t types = a.interp == Interp::Nearest ? kAll : kNumeric;
    dispatch<kAll>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      GRAFT_CHECK((types >> static_cast<uint32_t>(x.dtype())) & 1u, "{}: {} interpolation needs numbers, got {}", what,
                  a.interp == Interp::Linear ? "linear" : "cubic", dtypeName(x.dtype()));
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      forEachResizeOutput(geo, x.shape(), [&](int64_t yi, bool outside, const auto& taps) {
        if (a.interp == Interp::Nearest) {
          // An exact copy, so any element type works.
          if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool>)
            yp[yi] = outside ? T{} : xp[taps[0].first];
          else
            yp[yi] = outside ? convertElement<T>(a.extrapolation) : xp[taps[0].first];
        } else if constexpr (!std::is_same_v<T, std::string> && !std::is_same_v<T, bool>) {
          double acc = a.extrapolation;
          if (!outside) {
            acc = 0;
            for (const auto& [off, w] : taps) acc += w * static_cast<double>(static_cast<ComputeType<T>>(xp[off]));
          }
          yp[yi] = fromInterpolated<T>(acc);
        }
      });
    });
  };
}

/// ai.graft ResizeGrad(dY, X, roi, scales, sizes) -> dX with Resize's attributes: every output
/// gradient goes back to the output's taps with their interpolation weights (the adjoint of
/// Resize as a linear map of X); extrapolated positions take no part.
KernelFn resizeGradKernel(CompileContext& c) {
  ResizeAttrs a = parseResizeAttrs(c.node());
  return [a](KernelContext& k) {
    const std::string& what = a.what;
    const NDArray& dy = k.input(0);
    const NDArray& x = k.input(1);
    ResizeGeometry geo = resizeGeometry(a, k, x.shape(), false, 2);
    GRAFT_CHECK(dy.shape() == geo.out, "{}: dY must have Resize's output shape {}, got {}", what,
                shapeToString(geo.out), shapeToString(dy.shape()));
    GRAFT_CHECK(dy.dtype() == x.dtype(), "{}: dY has data type {}, X has {}", what, dtypeName(dy.dtype()),
                dtypeName(x.dtype()));
    std::vector<double> g = floatValues(dy, what, "dY");
    std::vector<double> dx(static_cast<size_t>(x.numel()), 0.0);
    if (!g.empty()) {
      geo = resizeGeometry(a, k, x.shape(), true, 2);
      forEachResizeOutput(geo, x.shape(), [&](int64_t yi, bool, const auto& taps) {
        for (const auto& [off, w] : taps) dx[off] += w * g[yi];
      });
    }
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = k.allocOutputUninit(0, x.dtype(), x.shape()).data<T>();
      for (size_t i = 0; i < dx.size(); ++i) out[i] = convertElement<T>(dx[i]);
    });
  };
}

// ---- GridSample ---------------------------------------------------------------------------------

enum class GridPad { Zeros, Border, Reflection };

/// Reflects x into [lo, hi] by repeated mirroring at the borders.
double reflect(double x, double lo, double hi) {
  double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    double m = std::fmod(lo - x, 2 * range);
    return m <= range ? lo + m : hi - (m - range);
  }
  if (x > hi) {
    double m = std::fmod(x - hi, 2 * range);
    return m <= range ? hi - m : lo + (m - range);
  }
  return x;
}

KernelFn gridSampleKernel(CompileContext& c) {
  const auto& n = c.node();
  std::string what = n.describe();
  bool align = n.attrInt("align_corners", 0) != 0;
  // Opset 20 renamed bilinear/bicubic to linear/cubic (the converter rewrites older models).
  Interp interp = attrChoice<Interp>(n, "mode", "linear",
                                     {{"linear", Interp::Linear},
                                      {"bilinear", Interp::Linear},
                                      {"nearest", Interp::Nearest},
                                      {"cubic", Interp::Cubic},
                                      {"bicubic", Interp::Cubic}});
  GridPad pad = attrChoice<GridPad>(
      n, "padding_mode", "zeros",
      {{"zeros", GridPad::Zeros}, {"border", GridPad::Border}, {"reflection", GridPad::Reflection}});
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& grid = k.input(1);
    GRAFT_CHECK(x.rank() == 4, "{}: input X must have rank 4 ([N, C, H, W]), got shape {}", what,
                shapeToString(x.shape()));
    GRAFT_CHECK(grid.rank() == 4 && grid.dim(0) == x.dim(0) && grid.dim(3) == 2,
                "{}: grid must have shape [{}, H_out, W_out, 2], got {}", what, x.dim(0), shapeToString(grid.shape()));
    int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), OH = grid.dim(1), OW = grid.dim(2);
    std::vector<double> g = floatValues(grid, what, "grid");
    // Per axis: input extent, and the borders that reflection mirrors at.
    const int64_t len[2] = {W, H};
    double lo[2], hi[2];
    for (int a = 0; a < 2; ++a) {
      lo[a] = align ? 0.0 : -0.5;
      hi[a] = align ? static_cast<double>(len[a] - 1) : static_cast<double>(len[a]) - 0.5;
    }
    dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      T* yp = k.allocOutput(0, x.dtype(), {N, C, OH, OW}).data<T>();
      // The input index a tap reads along axis a, or -1 for a zero (outside, zeros padding).
      auto tapIndex = [&](int64_t i, int a) -> int64_t {
        if (i >= 0 && i < len[a]) return i;
        if (pad == GridPad::Zeros || len[a] == 0) return -1;
        if (pad == GridPad::Border) return std::min(std::max<int64_t>(i, 0), len[a] - 1);
        auto r = static_cast<int64_t>(reflect(static_cast<double>(i), lo[a], hi[a]));
        return std::min(std::max<int64_t>(r, 0), len[a] - 1);
      };
      for (int64_t nb = 0; nb < N; ++nb)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const double* gp = &g[((nb * OH + oh) * OW + ow) * 2];
            double pos[2];  // x (along W), y (along H) in input pixels
            bool valid = true;
            for (int a = 0; a < 2; ++a) {
              double L = static_cast<double>(len[a]);
              double v = align ? (gp[a] + 1) / 2 * (L - 1) : ((gp[a] + 1) * L - 1) / 2;
              if (interp == Interp::Nearest) v = std::nearbyint(v);
              if (std::isnan(v)) valid = false;
              if (v < lo[a] || v > hi[a]) {
                // Bicubic with border padding clamps each tap, not the coordinate (as PyTorch and
                // onnxruntime do).
                if (pad == GridPad::Border && interp != Interp::Cubic)
                  v = std::min(std::max(v, 0.0), L - 1);
                else if (pad == GridPad::Reflection && std::isfinite(v))
                  v = reflect(v, lo[a], hi[a]);
                else if (pad == GridPad::Reflection)
                  valid = false;
              }
              // Far outside, every tap reads padding: bound v so the integer conversions stay defined.
              pos[a] = std::min(std::max(v, -8.0), L + 8);
            }
            // Taps along each axis: (index, weight).
            std::vector<std::pair<int64_t, double>> taps[2];
            for (int a = 0; a < 2 && valid; ++a) {
              if (interp == Interp::Nearest) {
                taps[a].emplace_back(tapIndex(static_cast<int64_t>(pos[a]), a), 1.0);
                continue;
              }
              double f = std::floor(pos[a]), t = pos[a] - f;
              auto i0 = static_cast<int64_t>(f);
              if (interp == Interp::Linear) {
                taps[a].emplace_back(tapIndex(i0, a), 1 - t);
                taps[a].emplace_back(tapIndex(i0 + 1, a), t);
              } else {
                double w[4];
                cubicWeights(t, -0.75, w);
                for (int i = 0; i < 4; ++i) taps[a].emplace_back(tapIndex(i0 - 1 + i, a), w[i]);
              }
            }
            for (int64_t ch = 0; ch < C; ++ch) {
              const T* plane = xp + (nb * C + ch) * H * W;
              double acc = 0;
              if (valid)
                for (const auto& [yi, wy] : taps[1])
                  for (const auto& [xi, wx] : taps[0])
                    if (yi >= 0 && xi >= 0)
                      acc += wy * wx * static_cast<double>(static_cast<ComputeType<T>>(plane[yi * W + xi]));
              yp[((nb * C + ch) * OH + oh) * OW + ow] = fromInterpolated<T>(acc);
            }
          }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(resize) {
  r.add("Resize").setReference(resizeKernel).noGradient({1, 2, 3});
  r.add("ResizeGrad", kGraftDomain)
      .setReference(resizeGradKernel)
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{in.at(1)};
      });
  r.add("GridSample").setReference(gridSampleKernel);
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"

namespace graft::ops {

GRAFT_REGISTER_OPS(resize_vjp) {
  // Resize is linear in X: its adjoint scatters dY back over the interpolation taps.
  r.add("Resize").setVjp([](GradBuilder& g) {
    const ir::Node& n = g.node();
    std::vector<ir::Tensor*> in = {g.dy(0), g.in(0)};
    for (size_t i = 1; i < 4; ++i) in.push_back(i < n.numInputs() ? g.in(i) : nullptr);
    while (!in.back()) in.pop_back();
    g.setDx(0, g.op("ResizeGrad", in, n.attrs(), kGraftDomain));
  });
}

}  // namespace graft::ops
