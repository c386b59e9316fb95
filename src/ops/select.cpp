// Ops whose output shape depends on input values: Compress, NonZero, Unique.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <type_traits>

#include "ops/copy_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/index_util.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

/// numpy truthiness of one element: non-zero numbers (NaN included), non-empty strings.
template <class T>
bool isNonZero(const T& v) {
  if constexpr (std::is_same_v<T, std::string>)
    return !v.empty();
  else if constexpr (std::is_same_v<T, bool>)
    return v;
  else
    return static_cast<ComputeType<T>>(v) != ComputeType<T>(0);
}

KernelFn compressKernel(CompileContext& c) {
  std::optional<int64_t> axisAttr;
  if (c.node().attrs().has("axis")) axisAttr = c.node().attrInt("axis");
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& cond = k.input(1);
    GRAFT_CHECK(cond.dtype() == DataType::Bool && cond.rank() == 1,
                "{}: condition must be a 1-D BOOL tensor, got {} {}", what, dtypeName(cond.dtype()),
                shapeToString(cond.shape()));
    // Without an axis the input is treated as flattened.
    Shape xs = axisAttr ? x.shape() : Shape{x.numel()};
    GRAFT_CHECK(!axisAttr || x.rank() >= 1, "{}: input must have rank >= 1 when axis is given", what);
    int64_t axis = axisAttr ? normalizeAxis(*axisAttr, x.rank(), what) : 0;
    int64_t n = xs[axis];
    const bool* cp = cond.data<bool>();
    std::vector<int64_t> sel;
    for (int64_t i = 0; i < cond.numel(); ++i) {
      if (!cp[i]) continue;
      // numpy.compress semantics: a condition longer than the axis is fine while its extra
      // entries are false.
      GRAFT_CHECK(i < n, "{}: condition is true at position {}, past the end of axis {} (size {})", what, i, axis, n);
      sel.push_back(i);
    }
    int64_t inner = shapeProduct(xs, axis + 1, static_cast<int64_t>(xs.size()));
    int64_t outer = shapeProduct(xs, 0, axis);
    Shape os = xs;
    os[axis] = static_cast<int64_t>(sel.size());
    NDArray& y = k.allocOutput(0, x.dtype(), os);
    std::vector<int64_t> starts;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i : sel) starts.push_back((o * n + i) * inner);
    gatherBlocks(x, starts, inner, y);
  };
}

KernelFn nonZeroKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& x = k.input(0);
    std::vector<int64_t> flat;
    dispatch<kAll>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = x.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i)
        if (isNonZero(p[i])) flat.push_back(i);
    });
    // Shape [rank, count], as ONNX's shape inference has it (a scalar gives [0, count]).
    int64_t r = x.rank(), cnt = static_cast<int64_t>(flat.size());
    NDArray& y = k.allocOutputUninit(0, DataType::Int64, {r, cnt});
    int64_t* yp = y.data<int64_t>();
    auto st = stridesOf(x.shape());
    for (int64_t j = 0; j < cnt; ++j)
      for (int64_t d = 0; d < r; ++d) yp[d * cnt + j] = (flat[j] / st[d]) % x.dim(d);
  };
}

// ---- Unique -----------------------------------------------------------------------------------

/// A total order on elements for sorting: NaN sorts after every number and equals NaN (as
/// numpy.unique groups NaNs); -0.0 equals 0.0.
template <class T>
int compareElements(const T& a, const T& b) {
  if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool> || std::is_integral_v<T>) {
    return a < b ? -1 : (b < a ? 1 : 0);
  } else {
    using C = ComputeType<T>;
    C x = static_cast<C>(a), y = static_cast<C>(b);
    bool nx = std::isnan(x), ny = std::isnan(y);
    if (nx || ny) return nx == ny ? 0 : (nx ? 1 : -1);
    return x < y ? -1 : (y < x ? 1 : 0);
  }
}

KernelFn uniqueKernel(CompileContext& c) {
  std::optional<int64_t> axisAttr;
  if (c.node().attrs().has("axis")) axisAttr = c.node().attrInt("axis");
  bool sorted = c.node().attrInt("sorted", 1) != 0;
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    // Without an axis, Unique works on the flattened input: slices are single elements.
    Shape xs = axisAttr ? x.shape() : Shape{x.numel()};
    GRAFT_CHECK(!axisAttr || x.rank() >= 1, "{}: input must have rank >= 1 when axis is given", what);
    int64_t axis = axisAttr ? normalizeAxis(*axisAttr, x.rank(), what) : 0;
    int64_t n = xs[axis];
    int64_t outer = shapeProduct(xs, 0, axis), inner = shapeProduct(xs, axis + 1, static_cast<int64_t>(xs.size()));
    // Slice i compares element by element in row-major order of the other axes.
    auto elemOffset = [&](int64_t slice, int64_t e) { return ((e / inner) * n + slice) * inner + e % inner; };
    int64_t sliceLen = outer * inner;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::vector<int64_t> group(static_cast<size_t>(n));  // slice -> index of its unique value
    std::vector<int64_t> first;                          // unique value -> first slice holding it
    std::vector<int64_t> counts;
    dispatch<kAll>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = x.data<T>();
      auto cmp = [&](int64_t a, int64_t b) {
        for (int64_t e = 0; e < sliceLen; ++e) {
          int r = compareElements<T>(p[elemOffset(a, e)], p[elemOffset(b, e)]);
          if (r != 0) return r;
        }
        return 0;
      };
      // Stable, so each run of equal slices starts with the earliest occurrence.
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
      for (size_t i = 0; i < order.size(); ++i) {
        if (i == 0 || cmp(order[i - 1], order[i]) != 0) {
          first.push_back(order[i]);
          counts.push_back(0);
        }
        group[order[i]] = static_cast<int64_t>(first.size()) - 1;
        ++counts.back();
      }
    });
    int64_t u = static_cast<int64_t>(first.size());
    // rank[g]: output position of unique value g (sorted: g itself; else by first occurrence).
    std::vector<int64_t> rank(static_cast<size_t>(u));
    std::iota(rank.begin(), rank.end(), 0);
    if (!sorted) {
      std::vector<int64_t> byFirst(rank);
      std::sort(byFirst.begin(), byFirst.end(), [&](int64_t a, int64_t b) { return first[a] < first[b]; });
      for (int64_t pos = 0; pos < u; ++pos) rank[byFirst[pos]] = pos;
    }
    std::vector<int64_t> firstOut(u), countsOut(u);
    for (int64_t g = 0; g < u; ++g) {
      firstOut[rank[g]] = first[g];
      countsOut[rank[g]] = counts[g];
    }
    Shape ys = axisAttr ? x.shape() : Shape{u};
    ys[axis] = u;
    NDArray& y = k.allocOutput(0, x.dtype(), ys);
    std::vector<int64_t> src;
    src.reserve(static_cast<size_t>(u * sliceLen));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < u; ++j)
        for (int64_t e = 0; e < inner; ++e) src.push_back((o * n + firstOut[j]) * inner + e);
    gatherFlat(x, src, y);
    auto put = [&](size_t out, const std::vector<int64_t>& v) {
      NDArray& a = k.allocOutputUninit(out, DataType::Int64, {static_cast<int64_t>(v.size())});
      std::copy(v.begin(), v.end(), a.data<int64_t>());
    };
    if (k.numOutputs() > 1) put(1, firstOut);
    if (k.numOutputs() > 2) {
      std::vector<int64_t> inverse(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) inverse[i] = rank[group[i]];
      put(2, inverse);
    }
    if (k.numOutputs() > 3) put(3, countsOut);
  };
}

}  // namespace

GRAFT_REGISTER_OPS(select) {
  r.add("Compress").setReference(compressKernel).noGradient({1});
  r.add("NonZero").setReference(nonZeroKernel);
  r.add("Unique").setReference(uniqueKernel);
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {
namespace {

using namespace gradutil;

// Compress picks the distinct positions where the condition holds: gathering the gradient by
// their inverse puts each slice back and zeros the rest (see inversePositions).
void compressVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  ir::Tensor* x = g.in(0);
  bool hasAxis = n.attrs().has("axis");
  int64_t axis = hasAxis ? normAxis(g, n.attrInt("axis"), rankOf(g, x)) : 0;
  ir::Tensor* dim;
  if (hasAxis)
    dim = dimOf(g, x, axis);
  else if (x->info().isStatic())
    dim = g.int64s({x->info().nelms()});
  else
    dim = reshapeTo(g, g.op("Size", {x}), g.int64s({1}));
  // NonZero of the 1-D condition is [1, count].
  ir::Tensor* picked = g.op("Squeeze", {g.op("NonZero", {g.in(1)}), g.int64s({0})});
  ir::Attributes a;
  a.set("axis", axis);
  ir::Tensor* dx = g.op("Gather", {padEndOnAxes(g, g.dy(), {axis}), inversePositions(g, picked, dim)}, a);
  g.setDx(0, hasAxis ? dx : reshapeLike(g, dx, x));
}

}  // namespace

GRAFT_REGISTER_OPS(select_vjp) { r.add("Compress").setVjp(compressVjp); }

}  // namespace graft::ops
