// Vectorised reductions: the reduction engine (vec_reduce.hpp), ReduceSum/Mean/Max/Min/
// SumSquare/L1/L2/LogSum for float and double, and ArgMax/ArgMin. Axes and attributes follow
// ai.onnx opset 17 (axes as an attribute, or as input 1 for ReduceSum), as the reference does.
#include "backends/cpu/vec_reduce.hpp"

#include <cmath>
#include <limits>
#include <optional>

#include "backends/cpu/cpu_kernels.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::backends::cpu {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct SumOp {
  static constexpr double kInit = 0;
  double operator()(double a, double x) const { return a + x; }
  double combine(double a, double b) const { return a + b; }
};
struct SumSquareOp {
  static constexpr double kInit = 0;
  double operator()(double a, double x) const { return a + x * x; }
  double combine(double a, double b) const { return a + b; }
};
struct L1Op {
  static constexpr double kInit = 0;
  double operator()(double a, double x) const { return a + std::fabs(x); }
  double combine(double a, double b) const { return a + b; }
};
// NaN wins: once the accumulator is NaN no comparison replaces it.
struct MaxOp {
  static constexpr double kInit = -kInf;
  double operator()(double a, double x) const { return (x > a || x != x) ? x : a; }
  double combine(double a, double b) const { return (*this)(a, b); }
};
struct MinOp {
  static constexpr double kInit = kInf;
  double operator()(double a, double x) const { return (x < a || x != x) ? x : a; }
  double combine(double a, double b) const { return (*this)(a, b); }
};

// Fold of a contiguous run with 16 interleaved accumulators, combined in a fixed tree.
template <class Op, class T>
GRAFT_VEC_LOOP double foldRun(const T* p, int64_t n, Op op) {
  constexpr int kW = 16;
  double acc[kW];
  for (int l = 0; l < kW; ++l) acc[l] = Op::kInit;
  int64_t i = 0;
  for (; i + kW <= n; i += kW)
    for (int l = 0; l < kW; ++l) acc[l] = op(acc[l], static_cast<double>(p[i + l]));
  for (int w = kW / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = op.combine(acc[l], acc[l + w]);
  double r = acc[0];
  for (; i < n; ++i) r = op(r, static_cast<double>(p[i]));
  return r;
}

template <class Op, class T>
GRAFT_VEC_LOOP void foldColumns(double* acc, const T* p, int64_t n, Op op) {
  for (int64_t j = 0; j < n; ++j) acc[j] = op(acc[j], static_cast<double>(p[j]));
}

template <class Op, class T>
void reduceWith(support::ThreadPool& pool, const T* in, const Shape& shape, const std::vector<bool>& reduced, Op op, double* out) {
  // Merge adjacent axes of the same kind; size-1 axes disappear.
  std::vector<int64_t> dims;
  std::vector<bool> red;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!dims.empty() && red.back() == reduced[d]) dims.back() *= shape[d];
    else dims.push_back(shape[d]), red.push_back(reduced[d]);
  }
  if (dims.empty()) dims.push_back(1), red.push_back(false);
  int64_t r = static_cast<int64_t>(dims.size());
  std::vector<int64_t> st(r, 1);
  for (int64_t d = r - 2; d >= 0; --d) st[d] = st[d + 1] * dims[d + 1];
  std::vector<int64_t> keptDims, keptStrides, redDims, redStrides;
  for (int64_t d = 0; d + 1 < r; ++d) {
    (red[d] ? redDims : keptDims).push_back(dims[d]);
    (red[d] ? redStrides : keptStrides).push_back(st[d]);
  }
  std::vector<int64_t> bases = ops::offsetsOf(keptDims, keptStrides), roffs = ops::offsetsOf(redDims, redStrides);
  int64_t inner = dims.back();
  auto numOut = static_cast<int64_t>(bases.size());
  auto numRuns = static_cast<int64_t>(roffs.size());
  if (red.back()) {
    if (numOut == 1 && numRuns == 1 && inner > int64_t{2} * 65536) {
      // One long contiguous reduction: fixed blocks folded in parallel, combined in order.
      constexpr int64_t kB = 65536;
      int64_t nb = (inner + kB - 1) / kB;
      std::vector<double> part(static_cast<size_t>(nb));
      parallelRanges(pool, nb, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) part[i] = GRAFT_VEC_RUN(foldRun(in + i * kB, std::min(kB, inner - i * kB), op));
      });
      double acc = Op::kInit;
      for (double v : part) acc = op.combine(acc, v);
      out[0] = acc;
      return;
    }
    int64_t grain = std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, inner * numRuns));
    parallelRanges(pool, numOut, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        double acc = Op::kInit;
        for (int64_t ro : roffs) acc = op.combine(acc, GRAFT_VEC_RUN(foldRun(in + bases[o] + ro, inner, op)));
        out[o] = acc;
      }
    });
    return;
  }
  // The innermost axis is kept: rows of `inner` outputs fold whole input rows.
  constexpr int64_t kChunk = 2048;
  int64_t chunks = (inner + kChunk - 1) / kChunk;
  int64_t tasks = numOut * chunks;
  int64_t grain = std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, std::min(inner, kChunk) * numRuns));
  parallelRanges(pool, tasks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t g = t / chunks, c0 = (t % chunks) * kChunk, len = std::min(kChunk, inner - c0);
      double* acc = out + g * inner + c0;
      for (int64_t j = 0; j < len; ++j) acc[j] = Op::kInit;
      for (int64_t ro : roffs) GRAFT_VEC_RUN(foldColumns(acc, in + bases[g] + ro + c0, len, op));
    }
  });
}

}  // namespace

int64_t reducedCount(const Shape& shape, const std::vector<bool>& reduced) {
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (reduced[d]) n *= shape[d];
  return n;
}

template <class T>
void reduceAxes(support::ThreadPool& pool, const T* in, const Shape& shape, const std::vector<bool>& reduced, FoldKind kind,
                double* out) {
  int64_t numOut = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!reduced[d]) numOut *= shape[d];
  if (numOut == 0) return;
  if (reducedCount(shape, reduced) == 0) {
    double init = kind == FoldKind::Max ? -kInf : kind == FoldKind::Min ? kInf : 0.0;
    for (int64_t i = 0; i < numOut; ++i) out[i] = init;
    return;
  }
  switch (kind) {
    case FoldKind::Sum: return reduceWith(pool, in, shape, reduced, SumOp{}, out);
    case FoldKind::SumSquare: return reduceWith(pool, in, shape, reduced, SumSquareOp{}, out);
    case FoldKind::L1: return reduceWith(pool, in, shape, reduced, L1Op{}, out);
    case FoldKind::Max: return reduceWith(pool, in, shape, reduced, MaxOp{}, out);
    case FoldKind::Min: return reduceWith(pool, in, shape, reduced, MinOp{}, out);
  }
}

template void reduceAxes<float>(support::ThreadPool&, const float*, const Shape&, const std::vector<bool>&, FoldKind, double*);
template void reduceAxes<double>(support::ThreadPool&, const double*, const Shape&, const std::vector<bool>&, FoldKind,
                                 double*);

namespace {

enum class Finish { None, Mean, Sqrt, Log };

ops::KernelFactory reduceKernel(FoldKind kind, Finish finish) {
  return [kind, finish](ops::CompileContext& c) -> ops::KernelFn {
    const ir::Node& n = c.node();
    std::string what = n.describe();
    bool keepdims = n.attrInt("keepdims", 1) != 0;
    bool noopEmpty = n.attrInt("noop_with_empty_axes", 0) != 0;
    std::optional<std::vector<int64_t>> attrAxes;
    if (n.attrs().has("axes")) attrAxes = n.attrInts("axes");
    return [=](ops::KernelContext& k) {
      const NDArray& x = k.input(0);
      std::vector<int64_t> axes;
      if (k.hasInput(1)) {
        GRAFT_CHECK(!attrAxes, "{}: axes are given both as attribute and as input", what);
        const NDArray& a = k.input(1);
        GRAFT_CHECK(a.rank() <= 1, "{}: the axes input must be 1-D, got shape {}", what, shapeToString(a.shape()));
        axes = ops::toInt64Vector(a);
      } else if (attrAxes) {
        axes = *attrAxes;
      }
      if (axes.empty() && noopEmpty) {
        NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
        if (x.nbytes()) std::memcpy(y.rawData(), x.rawData(), x.nbytes());
        return;
      }
      std::vector<bool> reduced(static_cast<size_t>(x.rank()), axes.empty());
      for (int64_t a : ops::normalizeAxes(axes, x.rank(), what)) reduced[static_cast<size_t>(a)] = true;
      Shape os;
      for (int64_t d = 0; d < x.rank(); ++d)
        if (!reduced[d]) os.push_back(x.dim(d));
        else if (keepdims) os.push_back(1);
      double count = static_cast<double>(reducedCount(x.shape(), reduced));
      ops::dispatch<ops::kFloats>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          NDArray& y = k.allocOutputUninit(0, x.dtype(), os);
          std::vector<double> acc(static_cast<size_t>(y.numel()));
          reduceAxes<T>(k.pool(), x.data<T>(), x.shape(), reduced, kind, acc.data());
          T* yp = y.data<T>();
          for (int64_t i = 0; i < y.numel(); ++i) {
            double v = acc[i];
            if (finish == Finish::Mean) v = v / count;
            else if (finish == Finish::Sqrt) v = std::sqrt(v);
            else if (finish == Finish::Log) v = std::log(v);
            yp[i] = static_cast<T>(v);
          }
        } else {
          GRAFT_THROW("{}: unsupported data type {}", what, dtypeName(x.dtype()));
        }
      });
    };
  };
}

// ArgMax / ArgMin: NaN counts as the extreme (the first NaN, or the last with
// select_last_index), as the reference and numpy do.
ops::KernelFactory argKernel(bool isMax) {
  return [isMax](ops::CompileContext& c) -> ops::KernelFn {
    const ir::Node& n = c.node();
    std::string what = n.describe();
    int64_t axisAttr = n.attrInt("axis", 0);
    bool keepdims = n.attrInt("keepdims", 1) != 0;
    bool last = n.attrInt("select_last_index", 0) != 0;
    return [=](ops::KernelContext& k) {
      const NDArray& x = k.input(0);
      GRAFT_CHECK(x.rank() >= 1, "{}: the input must have rank >= 1, got a scalar", what);
      int64_t axis = ops::normalizeAxis(axisAttr, x.rank(), what);
      int64_t len = x.dim(axis), outer = ops::shapeProduct(x.shape(), 0, axis),
              inner = ops::shapeProduct(x.shape(), axis + 1, x.rank());
      Shape os = x.shape();
      if (keepdims) os[axis] = 1;
      else os.erase(os.begin() + axis);
      GRAFT_CHECK(outer * inner == 0 || len > 0, "{}: cannot take the index of an extreme over axis {} of shape {}, which is "
                  "empty", what, axis, shapeToString(x.shape()));
      NDArray& y = k.allocOutputUninit(0, DataType::Int64, os);
      int64_t* yp = y.data<int64_t>();
      ops::dispatch<ops::kNumeric>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = ops::ComputeType<T>;
        const T* xp = x.data<T>();
        auto nan = [](C v) {
          if constexpr (std::is_floating_point_v<C>) return v != v;
          else return false;
        };
        parallelRanges(k.pool(), outer * inner, std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, len)),
                       [&](int64_t b, int64_t e) {
          for (int64_t o = b; o < e; ++o) {
            const T* base = xp + (o / inner) * len * inner + o % inner;
            int64_t best = 0;
            C bv = static_cast<C>(base[0]);
            for (int64_t j = 1; j < len && !nan(bv); ++j) {
              C v = static_cast<C>(base[j * inner]);
              if (nan(v) || (isMax ? v > bv : v < bv) || (last && v == bv)) best = j, bv = v;
            }
            if (last && nan(bv))
              for (int64_t j = best + 1; j < len; ++j)
                if (nan(static_cast<C>(base[j * inner]))) best = j;
            yp[o] = best;
          }
        });
      });
    };
  };
}

bool floatOrDouble(const ir::Node& n) {
  return typeIn(n.input(0), (1u << static_cast<int>(DataType::Float)) | (1u << static_cast<int>(DataType::Double)));
}

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_reduce) {
  auto add = [&](const char* type, FoldKind kind, Finish finish) {
    r.add({"", type, "vec_reduce", floatOrDouble, reduceKernel(kind, finish)});
  };
  add("ReduceSum", FoldKind::Sum, Finish::None);
  add("ReduceMean", FoldKind::Sum, Finish::Mean);
  add("ReduceMax", FoldKind::Max, Finish::None);
  add("ReduceMin", FoldKind::Min, Finish::None);
  add("ReduceSumSquare", FoldKind::SumSquare, Finish::None);
  add("ReduceL1", FoldKind::L1, Finish::None);
  add("ReduceL2", FoldKind::SumSquare, Finish::Sqrt);
  add("ReduceLogSum", FoldKind::Sum, Finish::Log);
  auto numeric = [](const ir::Node& n) { return typeIn(n.input(0), ops::kNumeric); };
  r.add({"", "ArgMax", "vec_arg", numeric, argKernel(true)});
  r.add({"", "ArgMin", "vec_arg", numeric, argKernel(false)});
}

}  // namespace graft::backends::cpu
