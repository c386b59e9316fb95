// Ops that make new values from shapes or scalars: ConstantOfShape, Range, EyeLike, OneHot, and
// the elementwise Shrink.
#include <cmath>
#include <limits>
#include <optional>

#include "ops/cast_util.hpp"
#include "ops/copy_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/elementwise.hpp"
#include "ops/index_util.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

KernelFn constantOfShapeKernel(CompileContext& c) {
  std::string what = c.node().describe();
  NDArray value(DataType::Float, {});  // the default: one float 0
  if (c.node().attrs().has("value")) {
    value = c.node().attrTensor("value");
    GRAFT_CHECK(value.numel() == 1, "{}: value must hold exactly one element, got shape {}", what,
                shapeToString(value.shape()));
  }
  return [what, value](KernelContext& k) {
    const NDArray& s = k.input(0);
    GRAFT_CHECK(s.dtype() == DataType::Int64 && s.rank() == 1, "{}: input must be a 1-D INT64 shape, got {} {}", what,
                dtypeName(s.dtype()), shapeToString(s.shape()));
    Shape os = toInt64Vector(s);  // empty: a scalar
    for (int64_t d : os) GRAFT_CHECK(d >= 0, "{}: shape {} has a negative dimension", what, shapeToString(os));
    shapeNumel(os);
    NDArray& y = k.allocOutputUninit(0, value.dtype(), os);
    std::vector<int64_t> src(static_cast<size_t>(y.numel()), -1);
    gatherFlat(value, src, y, &value);
  };
}

/// Reads a scalar (or one-element) input of Range as T.
template <class T>
T rangeScalar(const NDArray& a, DataType dt, const std::string& what, const char* name) {
  GRAFT_CHECK(a.dtype() == dt && a.numel() == 1, "{}: {} must be one {} value, got {} {}", what, name, dtypeName(dt),
              dtypeName(a.dtype()), shapeToString(a.shape()));
  return a.data<T>()[0];
}

KernelFn rangeKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    DataType dt = k.input(0).dtype();
    dispatch<kFloats | kSignedInts>(dt, what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      C start = static_cast<C>(rangeScalar<T>(k.input(0), dt, what, "start"));
      C limit = static_cast<C>(rangeScalar<T>(k.input(1), dt, what, "limit"));
      C delta = static_cast<C>(rangeScalar<T>(k.input(2), dt, what, "delta"));
      GRAFT_CHECK(delta != C(0), "{}: delta is 0", what);
      int64_t n = 0;
      if constexpr (std::is_integral_v<C>) {
        // Exact: 128-bit so that limit - start cannot overflow.
        __int128 span = static_cast<__int128>(limit) - start;
        // ceil(span / delta) when both have the same sign; otherwise the range is empty.
        __int128 cnt = (span > 0) == (delta > 0) && span != 0 ? span / delta + (span % delta != 0 ? 1 : 0) : 0;
        GRAFT_CHECK(cnt <= std::numeric_limits<int64_t>::max(), "{}: range({}, {}, {}) has more elements than fit in int64",
                    what, start, limit, delta);
        n = cnt > 0 ? static_cast<int64_t>(cnt) : 0;
        NDArray& y = k.allocOutputUninit(0, dt, {n});
        for (int64_t i = 0; i < n; ++i) y.data<T>()[i] = static_cast<T>(start + static_cast<__int128>(i) * delta);
      } else {
        double cnt = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta));
        GRAFT_CHECK(!std::isnan(cnt) && cnt < 9.0e18, "{}: range({}, {}, {}) does not have a finite length", what,
                    static_cast<double>(start), static_cast<double>(limit), static_cast<double>(delta));
        n = cnt > 0 ? static_cast<int64_t>(cnt) : 0;
        NDArray& y = k.allocOutputUninit(0, dt, {n});
        for (int64_t i = 0; i < n; ++i)
          y.data<T>()[i] = static_cast<T>(static_cast<C>(static_cast<double>(start) + static_cast<double>(i) * delta));
      }
    });
  };
}

KernelFn eyeLikeKernel(CompileContext& c) {
  std::optional<DataType> dtAttr;
  if (c.node().attrs().has("dtype")) dtAttr = static_cast<DataType>(c.node().attrInt("dtype"));
  int64_t diag = c.node().attrInt("k", 0);
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() == 2, "{}: input must be 2-D, got shape {}", what, shapeToString(x.shape()));
    DataType dt = dtAttr ? *dtAttr : x.dtype();
    NDArray& y = k.allocOutput(0, dt, x.shape());
    dispatch<kNumericBool>(dt, what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T one = convertElement<T>(1);
      int64_t rows = x.dim(0), cols = x.dim(1);
      for (int64_t i = 0; i < rows; ++i) {
        // Column i + diag, tested without overflow for extreme k.
        bool inside = diag >= 0 ? i < cols - diag : (i + diag >= 0 && i + diag < cols);
        if (inside) y.data<T>()[i * cols + i + diag] = one;
      }
    });
  };
}

/// Reads a numeric scalar as a double (OneHot accepts any numeric type for indices and depth).
double numericAt(const NDArray& a, int64_t i, const std::string& what) {
  double v = 0;
  dispatch<kNumeric>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(static_cast<ComputeType<T>>(a.data<T>()[i]));
  });
  return v;
}

KernelFn oneHotKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", -1);
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& ind = k.input(0);
    const NDArray& depthT = k.input(1);
    const NDArray& values = k.input(2);
    GRAFT_CHECK(depthT.numel() == 1, "{}: depth must hold one value, got shape {}", what,
                shapeToString(depthT.shape()));
    GRAFT_CHECK(values.numel() == 2, "{}: values must hold [off_value, on_value], got shape {}", what,
                shapeToString(values.shape()));
    double depthD = numericAt(depthT, 0, what);
    GRAFT_CHECK(std::isfinite(depthD) && depthD >= 1 && depthD < 9.0e18, "{}: depth must be a positive number, got {}",
                what, depthD);
    auto depth = static_cast<int64_t>(depthD);
    int64_t r = ind.rank();
    GRAFT_CHECK(axisAttr >= -r - 1 && axisAttr <= r, "{}: axis {} is out of range for an output of rank {}", what,
                axisAttr, r + 1);
    int64_t axis = axisAttr < 0 ? axisAttr + r + 1 : axisAttr;
    Shape os = ind.shape();
    os.insert(os.begin() + axis, depth);
    int64_t total = shapeNumel(os);
    NDArray& y = k.allocOutputUninit(0, values.dtype(), os);
    int64_t outer = shapeProduct(ind.shape(), 0, axis), inner = shapeProduct(ind.shape(), axis, r);
    // Every output is off_value (values[0]) except one on_value (values[1]) per in-range index;
    // indices outside [-depth, depth) give an all-off row, as the spec says.
    std::vector<int64_t> src(static_cast<size_t>(total), 0);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double v = numericAt(ind, o * inner + i, what);
        if (std::isnan(v) || v < -static_cast<double>(depth) || v >= static_cast<double>(depth)) continue;
        auto iv = static_cast<int64_t>(v);  // truncation, like numpy's cast of float indices
        if (iv < 0) iv += depth;
        src[(o * depth + iv) * inner + i] = 1;
      }
    gatherFlat(values, src, y);
  };
}

}  // namespace

GRAFT_REGISTER_OPS(generate) {
  r.add("ConstantOfShape").setReference(constantOfShapeKernel).noGradient({0});
  r.add("Range").setReference(rangeKernel).noGradient({1});
  r.add("EyeLike").setReference(eyeLikeKernel).noGradient({0});
  r.add("OneHot").setReference(oneHotKernel).noGradient({0, 1});
  r.add("Shrink")
      .setReference(unaryKernelWith<kNumeric>([](CompileContext& c) {
        double lambd = c.node().attrFloat("lambd", 0.5f), bias = c.node().attrFloat("bias", 0.0f);
        return [lambd, bias](auto x) {
          using C = decltype(x);
          auto v = static_cast<double>(x);
          double y = v < -lambd ? v + bias : (v > lambd ? v - bias : 0.0);
          return convertElement<C>(y);
        };
      }))
      .elementwise();
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {
namespace {

using namespace gradutil;

// y[i] = start + i * delta: start gets the sum of dy, delta the sum of i * dy. The length of y
// is piecewise constant in the inputs, so limit gets no gradient.
void rangeVjp(GradBuilder& g) {
  ir::Tensor* dy = g.dy();
  if (g.wants(0)) g.setDx(0, g.unbroadcast(dy, g.in(0)));
  if (g.wants(2)) {
    ir::Tensor* count = reshapeTo(g, shapeOf(g, g.out(0)), g.int64s({}));
    ir::Tensor* i = g.op("CastLike", {g.op("Range", {scalarInt64(g, 0), count, scalarInt64(g, 1)}), dy});
    g.setDx(2, g.unbroadcast(g.mul(dy, i), g.in(2)));
  }
}

// values = [off, on]: each gets the sum of dy where the output holds it.
void oneHotVjp(GradBuilder& g) {
  ir::Tensor *dy = g.dy(), *values = g.in(2);
  ir::Attributes a;
  a.set("axis", g.node().attrInt("axis", -1));
  ir::Tensor* mask = g.op("OneHot", {g.in(0), g.in(1), g.op("CastLike", {g.int64s({0, 1}), dy})}, a);
  ir::Tensor* scalar = g.scalarLike(0, dy);
  ir::Tensor* on = g.unbroadcast(g.mul(dy, mask), scalar);
  ir::Tensor* off = g.sub(g.unbroadcast(dy, scalar), on);
  ir::Tensor* one = g.int64s({1});
  ir::Attributes c;
  c.set("axis", int64_t{0});
  g.setDx(2, reshapeLike(g, g.op("Concat", {reshapeTo(g, off, one), reshapeTo(g, on, one)}, c), values));
}

void shrinkVjp(GradBuilder& g) {
  ir::Tensor* x = g.in(0);
  double lambd = g.node().attrFloat("lambd", 0.5f);
  ir::Tensor* outside =
      g.op("Or", {g.op("Less", {x, g.scalarLike(-lambd, x)}), g.op("Greater", {x, g.scalarLike(lambd, x)})});
  g.setDx(0, g.where(outside, g.dy(), g.scalarLike(0, x)));
}

}  // namespace

GRAFT_REGISTER_OPS(generate_vjp) {
  r.add("Range").setVjp(rangeVjp);
  r.add("OneHot").setVjp(oneHotVjp);
  r.add("Shrink").setVjp(shrinkVjp);
  // The output depends only on the input's shape: nothing flows back, but a loss may still
  // depend on it without that being an error.
  r.add("EyeLike").setVjp([](GradBuilder&) {});
}

}  // namespace graft::ops
