// Reductions (ReduceSum, ReduceMean, ... ReduceSumSquare), ArgMax/ArgMin and TopK; CumSum's
// gradient (its kernel is CumProd's, in cumulative.cpp).
//
// A reduction is planned as two offset lists: for each output element the flat input offset of
// its group's first element (kept axes), and the offsets within one group (reduced axes). The
// kernels then fold each group; floating-point folds accumulate in double, integer sums and
// products wrap modulo 2^64 (no signed overflow), as numpy's integer arithmetic does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "ops/cast_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

struct ReducePlan {
  Shape outShape;                      // keepdims applied
  std::vector<int64_t> groupStart;     // per output element: input offset of its group
  std::vector<int64_t> groupOffsets;   // offsets of a group's elements, relative to its start
};

ReducePlan planReduction(const Shape& in, const std::vector<bool>& reduced, bool keepdims) {
  ReducePlan p;
  auto st = stridesOf(in);
  Shape keptDims, redDims;
  std::vector<int64_t> keptStrides, redStrides;
  for (size_t d = 0; d < in.size(); ++d) {
    if (reduced[d]) {
      redDims.push_back(in[d]);
      redStrides.push_back(st[d]);
      if (keepdims) p.outShape.push_back(1);
    } else {
      keptDims.push_back(in[d]);
      keptStrides.push_back(st[d]);
      p.outShape.push_back(in[d]);
    }
  }
  p.groupStart = offsetsOf(keptDims, keptStrides);
  p.groupOffsets = offsetsOf(redDims, redStrides);
  return p;
}

// ---- Reduce* -------------------------------------------------------------------------------------

enum class ReduceKind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

template <class C>
bool isNaN(C v) {
  if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
  else return false;
}

// A reduced value as T: integers by ONNX's Cast rules (a mean of integers need not fit).
template <class T>
T reducedValue(double v) {
  if constexpr (std::is_integral_v<T>) return convertElement<T>(v);
  else
    return fromDouble<T>(v);
}

// max + log(sum(exp(x - max))): the plain formula overflows for x > ~88 in float.
template <class T>
double logSumExp(const T* base, const std::vector<int64_t>& offs) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t o : offs) {
    double v = toDouble(base[o]);
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  if (std::isinf(m)) return m;  // empty, all -inf, or some +inf
  double s = 0;
  for (int64_t o : offs) s += std::exp(toDouble(base[o]) - m);
  return m + std::log(s);
}

template <class T>
T reduceFloatGroup(ReduceKind kind, const T* base, const std::vector<int64_t>& offs) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double acc = 0;
  switch (kind) {
    case ReduceKind::Sum:
    case ReduceKind::Mean:
    case ReduceKind::LogSum:
      for (int64_t o : offs) acc += toDouble(base[o]);
      if (kind == ReduceKind::Mean) acc = offs.empty() ? std::numeric_limits<double>::quiet_NaN() : acc / double(offs.size());
      if (kind == ReduceKind::LogSum) acc = std::log(acc);
      break;
    case ReduceKind::Max:
    case ReduceKind::Min: {
      bool isMax = kind == ReduceKind::Max;
      acc = isMax ? -kInf : kInf;
      for (int64_t o : offs) {
        double v = toDouble(base[o]);
        if (std::isnan(v)) return base[o];  // NaN propagates, as in numpy
        acc = isMax ? std::max(acc, v) : std::min(acc, v);
      }
      break;
    }
    case ReduceKind::Prod:
      acc = 1;
      for (int64_t o : offs) acc *= toDouble(base[o]);
      break;
    case ReduceKind::L1:
      for (int64_t o : offs) acc += std::abs(toDouble(base[o]));
      break;
    case ReduceKind::L2:
    case ReduceKind::SumSquare:
      for (int64_t o : offs) {
        double v = toDouble(base[o]);
        acc += v * v;
      }
      if (kind == ReduceKind::L2) acc = std::sqrt(acc);
      break;
    case ReduceKind::LogSumExp:
      acc = logSumExp(base, offs);
      break;
  }
  return reducedValue<T>(acc);
}

template <class T>
uint64_t wrapAbs(T v) {
  if constexpr (std::is_signed_v<T>) return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  else return static_cast<uint64_t>(v);
}

template <class T>
T reduceIntGroup(ReduceKind kind, const T* base, const std::vector<int64_t>& offs) {
  uint64_t u = 0;  // wrapping accumulator: converting back to T is modular (C++20)
  switch (kind) {
    case ReduceKind::Sum:
      for (int64_t o : offs) u += static_cast<uint64_t>(base[o]);
      return static_cast<T>(u);
    case ReduceKind::Prod:
      u = 1;
      for (int64_t o : offs) u *= static_cast<uint64_t>(base[o]);
      return static_cast<T>(u);
    case ReduceKind::SumSquare:
      for (int64_t o : offs) u += static_cast<uint64_t>(base[o]) * static_cast<uint64_t>(base[o]);
      return static_cast<T>(u);
    case ReduceKind::L1:
      for (int64_t o : offs) u += wrapAbs(base[o]);
      return static_cast<T>(u);
    case ReduceKind::Max:
    case ReduceKind::Min: {
      bool isMax = kind == ReduceKind::Max;
      T acc = isMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
      for (int64_t o : offs) acc = isMax ? std::max(acc, base[o]) : std::min(acc, base[o]);
      return acc;
    }
    default:
      break;
  }
  // Mean, L2, LogSum and LogSumExp of integers go through double, then saturate back to T.
  std::vector<double> vals;
  vals.reserve(offs.size());
  for (int64_t o : offs) vals.push_back(static_cast<double>(base[o]));
  std::vector<int64_t> idx(vals.size());
  std::iota(idx.begin(), idx.end(), 0);
  return reducedValue<T>(reduceFloatGroup<double>(kind, vals.data(), idx));
}

KernelFactory reduceKernel(ReduceKind kind) {
  return [kind](CompileContext& c) -> KernelFn {
    const ir::Node& n = c.node();
    std::string what = n.describe();
    bool keepdims = n.attrInt("keepdims", 1) != 0;
    bool noopEmpty = n.attrInt("noop_with_empty_axes", 0) != 0;
    std::optional<std::vector<int64_t>> attrAxes;
    if (n.attrs().has("axes")) attrAxes = n.attrInts("axes");
    return [=](KernelContext& k) {
      const NDArray& x = k.input(0);
      std::vector<int64_t> axes;
      if (k.hasInput(1)) {
        GRAFT_CHECK(!attrAxes, "{}: axes are given both as attribute and as input", what);
        const NDArray& a = k.input(1);
        GRAFT_CHECK(a.rank() <= 1, "{}: the axes input must be 1-D, got shape {}", what, shapeToString(a.shape()));
        axes = toInt64Vector(a);
      } else if (attrAxes) {
        axes = *attrAxes;
      }
      if (axes.empty() && noopEmpty) {
        dispatch<kNumeric>(x.dtype(), what, [&](auto) { k.setOutput(0, x.clone()); });
        return;
      }
      std::vector<bool> reduced(static_cast<size_t>(x.rank()), axes.empty());
      for (int64_t a : normalizeAxes(axes, x.rank(), what)) reduced[static_cast<size_t>(a)] = true;
      ReducePlan p = planReduction(x.shape(), reduced, keepdims);
      dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        NDArray& y = k.allocOutputUninit(0, x.dtype(), p.outShape);
        const T* xp = x.data<T>();
        T* yp = y.data<T>();
        for (size_t i = 0; i < p.groupStart.size(); ++i) {
          if constexpr (kIsFloat<T>) yp[i] = reduceFloatGroup<T>(kind, xp + p.groupStart[i], p.groupOffsets);
          else yp[i] = reduceIntGroup<T>(kind, xp + p.groupStart[i], p.groupOffsets);
        }
      });
    };
  };
}

// ---- ArgMax / ArgMin -----------------------------------------------------------------------------

KernelFactory argKernel(bool isMax) {
  return [isMax](CompileContext& c) -> KernelFn {
    const ir::Node& n = c.node();
    std::string what = n.describe();
    int64_t axisAttr = n.attrInt("axis", 0);
    bool keepdims = n.attrInt("keepdims", 1) != 0;
    bool last = n.attrInt("select_last_index", 0) != 0;
    return [=](KernelContext& k) {
      const NDArray& x = k.input(0);
      GRAFT_CHECK(x.rank() >= 1, "{}: the input must have rank >= 1, got a scalar", what);
      int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
      std::vector<bool> reduced(static_cast<size_t>(x.rank()), false);
      reduced[static_cast<size_t>(axis)] = true;
      ReducePlan p = planReduction(x.shape(), reduced, keepdims);
      GRAFT_CHECK(p.groupStart.empty() || !p.groupOffsets.empty(), "{}: cannot take the index of an extreme over axis {} of "
                  "shape {}, which is empty", what, axis, shapeToString(x.shape()));
      dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = ComputeType<T>;
        NDArray& y = k.allocOutputUninit(0, DataType::Int64, p.outShape);
        const T* xp = x.data<T>();
        int64_t* yp = y.data<int64_t>();
        for (size_t i = 0; i < p.groupStart.size(); ++i) {
          const T* base = xp + p.groupStart[i];
          // NaN counts as the extreme (numpy's argmax/argmin return the first NaN).
          // Values compare in their own type: int64 through double would merge neighbours.
          size_t best = 0;
          C bv = static_cast<C>(base[p.groupOffsets[0]]);
          for (size_t j = 1; j < p.groupOffsets.size() && !isNaN(bv); ++j) {
            C v = static_cast<C>(base[p.groupOffsets[j]]);
            bool better = isNaN(v) || (isMax ? v > bv : v < bv) || (last && v == bv);
            if (better) {
              best = j;
              bv = v;
            }
          }
          if (last && isNaN(bv))
            for (size_t j = best + 1; j < p.groupOffsets.size(); ++j)
              if (isNaN(static_cast<C>(base[p.groupOffsets[j]]))) best = j;
          yp[i] = static_cast<int64_t>(best);
        }
      });
    };
  };
}

// ---- TopK ----------------------------------------------------------------------------------------

KernelFn topKKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axisAttr = n.attrInt("axis", -1);
  bool largest = n.attrInt("largest", 1) != 0;
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& kT = k.input(1);
    GRAFT_CHECK(kT.numel() == 1 && kT.rank() <= 1, "{}: K must be a 1-element tensor, got shape {}", what,
                shapeToString(kT.shape()));
    GRAFT_CHECK(x.rank() >= 1, "{}: the input must have rank >= 1, got a scalar", what);
    int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
    int64_t K = toInt64Vector(kT)[0];
    int64_t len = x.dim(axis);
    GRAFT_CHECK(K >= 0 && K <= len, "{}: K must be in [0, {}] (the size of axis {} of input shape {}), got {}", what, len,
                axis, shapeToString(x.shape()), K);
    int64_t inner = shapeProduct(x.shape(), axis + 1, x.rank());
    int64_t outer = shapeProduct(x.shape(), 0, axis);
    Shape os = x.shape();
    os[static_cast<size_t>(axis)] = K;
    dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& vals = k.allocOutputUninit(0, x.dtype(), os);
      NDArray& idxs = k.allocOutputUninit(1, DataType::Int64, os);
      const T* xp = x.data<T>();
      std::vector<int64_t> order(static_cast<size_t>(len));
      std::vector<ComputeType<T>> v(static_cast<size_t>(len));
      // A strict total order: NaN above every number; equal values keep the lower index first,
      // as the ONNX spec requires.
      auto before = [&](int64_t a, int64_t b) {
        auto va = v[a], vb = v[b];
        bool na = isNaN(va), nb = isNaN(vb);
        if (na != nb) return largest ? na : nb;
        if (!na && va != vb) return largest ? va > vb : va < vb;
        return a < b;
      };
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t in = 0; in < inner; ++in) {
          int64_t base = o * len * inner + in;
          for (int64_t j = 0; j < len; ++j) v[j] = static_cast<ComputeType<T>>(xp[base + j * inner]);
          std::iota(order.begin(), order.end(), 0);
          std::partial_sort(order.begin(), order.begin() + K, order.end(), before);
          int64_t obase = o * K * inner + in;
          for (int64_t j = 0; j < K; ++j) {
            vals.data<T>()[obase + j * inner] = xp[base + order[j] * inner];
            idxs.data<int64_t>()[obase + j * inner] = order[j];
          }
        }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(reduce) {
  const std::pair<const char*, ReduceKind> reductions[] = {
      {"ReduceSum", ReduceKind::Sum},       {"ReduceMean", ReduceKind::Mean},
      {"ReduceMax", ReduceKind::Max},       {"ReduceMin", ReduceKind::Min},
      {"ReduceProd", ReduceKind::Prod},     {"ReduceL1", ReduceKind::L1},
      {"ReduceL2", ReduceKind::L2},         {"ReduceLogSum", ReduceKind::LogSum},
      {"ReduceLogSumExp", ReduceKind::LogSumExp}, {"ReduceSumSquare", ReduceKind::SumSquare},
  };
  for (const auto& [name, kind] : reductions) r.add(name).setReference(reduceKernel(kind)).noGradient({1});
  r.add("ArgMax").setReference(argKernel(true));
  r.add("ArgMin").setReference(argKernel(false));
  r.add("TopK").setReference(topKKernel).noGradient({1});
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"

namespace graft::ops {
namespace {

// How a Reduce* node chose its axes, in the form its gradient needs.
struct ReduceSpec {
  bool identity = false;  // noop_with_empty_axes with no axes: the output is the input
  bool all = false;       // no axes (and not noop): every axis is reduced
  bool keepdims = true;
  bool noop = false;
  ir::Tensor* axes = nullptr;  // 1-D INT64: a constant, or the node's own (computed) axes input
};

ReduceSpec reduceSpec(GradBuilder& g) {
  const ir::Node& n = g.node();
  ReduceSpec s;
  s.keepdims = n.attrInt("keepdims", 1) != 0;
  s.noop = n.attrInt("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> axes;
  if (ir::Tensor* a = g.in(1)) {
    if (!a->data()) {
      // Computed axes: the gradient reads the same tensor, and the reductions it adds get the
      // node's noop_with_empty_axes, so that an empty axes list means what it meant forward.
      s.axes = a;
      return s;
    }
    axes = toInt64Vector(*a->data());
  } else if (n.attrs().has("axes")) {
    axes = n.attrInts("axes");
  }
  if (axes.empty()) {
    s.identity = s.noop;
    s.all = !s.noop;
    return s;
  }
  s.axes = g.int64s(axes);
  return s;
}

// t (shaped like the node's output) with the reduced axes back as 1s: broadcastable to the input.
ir::Tensor* keepShape(GradBuilder& g, const ReduceSpec& s, ir::Tensor* t) {
  if (s.keepdims || s.all) return t;  // keepdims shape, or a scalar
  return g.op("Unsqueeze", {t, s.axes});
}

// ReduceSum of t over the node's axes, keeping them.
ir::Tensor* sumKeep(GradBuilder& g, const ReduceSpec& s, ir::Tensor* t) {
  ir::Attributes a;
  a.set("keepdims", int64_t{1});
  a.set("noop_with_empty_axes", int64_t{s.noop && !s.all});
  std::vector<ir::Tensor*> in{t};
  if (s.axes) in.push_back(s.axes);
  return g.op("ReduceSum", in, a);
}

// The same reduction as the node (same op and axes) of t, keeping the reduced axes.
ir::Tensor* sameReductionKeep(GradBuilder& g, ir::Tensor* t) {
  ir::Attributes a = g.node().attrs();
  a.set("keepdims", int64_t{1});
  std::vector<ir::Tensor*> in{t};
  if (g.in(1)) in.push_back(g.in(1));
  return g.op(g.node().type(), in, a);
}

ir::Tensor* expandLike(GradBuilder& g, ir::Tensor* t, ir::Tensor* like) {
  if (t->info().isStatic() && like->info().isStatic() && t->info().shape() == like->info().shape()) return t;
  return g.op("Expand", {t, g.op("Shape", {like})});
}

// numel(b) / numel(a) in a's type (0 when a is empty): the 1/count of a mean.
ir::Tensor* sizeRatio(GradBuilder& g, ir::Tensor* b, ir::Tensor* a) {
  if (a->info().isStatic() && b->info().isStatic()) {
    int64_t na = a->info().nelms(), nb = b->info().nelms();
    return g.scalarLike(na == 0 ? 0.0 : static_cast<double>(nb) / static_cast<double>(na), a);
  }
  return g.div(g.op("CastLike", {g.op("Size", {b}), a}), g.op("CastLike", {g.op("Size", {a}), a}));
}

using ReduceVjp = std::function<ir::Tensor*(GradBuilder&, const ReduceSpec&, ir::Tensor* dyK)>;

// Wraps a reduction's gradient: the identity case, and dy with the reduced axes kept.
VjpFn reduceVjp(const ReduceVjp& f) {
  return [f](GradBuilder& g) {
    ReduceSpec s = reduceSpec(g);
    if (s.identity) {
      g.setDx(0, g.dy());
      return;
    }
    g.setDx(0, f(g, s, keepShape(g, s, g.dy())));
  };
}

ir::Tensor* maxMinGrad(GradBuilder& g, const ReduceSpec& s, ir::Tensor* dyK) {
  // As PyTorch's amax/amin: the gradient is shared evenly between the elements equal to the
  // extreme (ties included), so that the gradient's sum is dy whatever the ties.
  ir::Tensor* x = g.in(0);
  ir::Tensor* mask = g.op("Equal", {x, keepShape(g, s, g.out(0))});
  ir::Tensor* count = sumKeep(g, s, g.op("CastLike", {mask, x}));
  return g.where(mask, g.div(dyK, count), g.scalarLike(0, x));
}

ir::Tensor* prodGrad(GradBuilder& g, const ReduceSpec& s, ir::Tensor* dyK) {
  // d prod / d x_i is the product of the other elements. Dividing the product by x_i fails at
  // zeros, so count them: none, prod/x_i everywhere; one, the product of the non-zeros at the
  // zero and 0 elsewhere; more, 0 everywhere (PyTorch's result).
  ir::Tensor* x = g.in(0);
  ir::Tensor* zero = g.scalarLike(0, x);
  ir::Tensor* isZero = g.op("Equal", {x, zero});
  ir::Tensor* x1 = g.where(isZero, g.scalarLike(1, x), x);
  ir::Tensor* prodNonZero = sameReductionKeep(g, x1);
  ir::Tensor* zeros = sumKeep(g, s, g.op("CastLike", {isZero, x}));
  ir::Tensor* atNonZero = g.where(g.op("Equal", {zeros, zero}), g.div(prodNonZero, x1), zero);
  ir::Tensor* atZero = g.where(g.op("Equal", {zeros, g.scalarLike(1, x)}), prodNonZero, zero);
  return g.mul(g.where(isZero, atZero, atNonZero), dyK);
}

}  // namespace

GRAFT_REGISTER_OPS(reduce_vjp) {
  r.add("ReduceSum").setVjp(reduceVjp([](GradBuilder& g, const ReduceSpec&, ir::Tensor* dyK) {
    return expandLike(g, dyK, g.in(0));
  }));
  r.add("ReduceMean").setVjp(reduceVjp([](GradBuilder& g, const ReduceSpec&, ir::Tensor* dyK) {
    return g.mul(expandLike(g, dyK, g.in(0)), sizeRatio(g, g.out(0), g.in(0)));
  }));
  r.add("ReduceSumSquare").setVjp(reduceVjp([](GradBuilder& g, const ReduceSpec&, ir::Tensor* dyK) {
    return g.mul(g.scale(g.in(0), 2.0), dyK);
  }));
  r.add("ReduceL1").setVjp(reduceVjp([](GradBuilder& g, const ReduceSpec&, ir::Tensor* dyK) {
    return g.mul(g.op("Sign", {g.in(0)}), dyK);
  }));
  r.add("ReduceL2").setVjp(reduceVjp([](GradBuilder& g, const ReduceSpec& s, ir::Tensor* dyK) {
    // x / |x|, and 0 where the norm is 0 (as PyTorch's norm backward).
    ir::Tensor* x = g.in(0);
    ir::Tensor* yK = keepShape(g, s, g.out(0));
    ir::Tensor* zero = g.scalarLike(0, x);
    return g.mul(g.where(g.op("Equal", {yK, zero}), zero, g.div(x, yK)), dyK);
  }));
  r.add("ReduceLogSum").setVjp(reduceVjp([](GradBuilder& g, const ReduceSpec& s, ir::Tensor* dyK) {
    return expandLike(g, g.div(dyK, sumKeep(g, s, g.in(0))), g.in(0));
  }));
  r.add("ReduceLogSumExp").setVjp(reduceVjp([](GradBuilder& g, const ReduceSpec& s, ir::Tensor* dyK) {
    ir::Tensor* x = g.in(0);
    return g.mul(g.op("Exp", {g.sub(x, keepShape(g, s, g.out(0)))}), dyK);
  }));
  r.add("ReduceMax").setVjp(reduceVjp(maxMinGrad));
  r.add("ReduceMin").setVjp(reduceVjp(maxMinGrad));
  r.add("ReduceProd").setVjp(reduceVjp(prodGrad));
  r.add("CumSum").setVjp([](GradBuilder& g) {
    // Each input element reaches the outputs on its side of the scan: scan dy the other way.
    ir::Attributes a;
    a.set("exclusive", g.node().attrInt("exclusive", 0));
    a.set("reverse", int64_t{g.node().attrInt("reverse", 0) == 0});
    g.setDx(0, g.op("CumSum", {g.dy(), g.in(1)}, a));
  });
  r.add("TopK").setVjp([](GradBuilder& g) {
    // The values' gradient goes back to the positions they were taken from.
    ir::Attributes a;
    a.set("axis", g.node().attrInt("axis", -1));
    g.setDx(0, g.op("ScatterElements", {g.zerosLike(g.in(0)), g.out(1), g.dy(0)}, a));
  });
}

}  // namespace graft::ops
