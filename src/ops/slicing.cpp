// Ops that cut, repeat, pad or reorder a tensor without arithmetic: Slice, Split, Expand, Tile,
// Pad, ReverseSequence, Trilu. Each works out source offsets as int64 and leaves the typed
// copying to ops/copy_util, so every element type (STRING included) is handled alike.
#include <algorithm>
#include <numeric>

#include "ops/copy_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/index_util.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

int64_t checkedAdd(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  GRAFT_CHECK(!__builtin_add_overflow(a, b, &r), "{}: size {} + {} overflows int64", what, a, b);
  return r;
}

/// Reads a shape-like INT64 input (Expand, Tile, Pad) and checks its rank.
std::vector<int64_t> readInt64Vector(const NDArray& a, const std::string& what, const char* name) {
  GRAFT_CHECK(a.dtype() == DataType::Int64, "{}: {} must be INT64, got {}", what, name, dtypeName(a.dtype()));
  GRAFT_CHECK(a.rank() <= 1, "{}: {} must be a 1-D tensor, got shape {}", what, name, shapeToString(a.shape()));
  return toInt64Vector(a);
}

// ---- Slice ------------------------------------------------------------------------------------

/// One axis of a slice after clamping: first index, step and number of elements.
struct SliceRange {
  int64_t start = 0, step = 1, count = 0;
};

SliceRange clampSlice(int64_t dim, int64_t start, int64_t end, int64_t step) {
  SliceRange r;
  r.step = step;
  if (dim == 0) return r;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    r.count = end > start ? 1 + (end - start - 1) / step : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    // |step| as unsigned: step may be INT64_MIN.
    uint64_t mag = static_cast<uint64_t>(-(step + 1)) + 1u;
    r.count = start > end ? 1 + static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / mag) : 0;
  }
  r.start = start;
  return r;
}

KernelFn sliceKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& x = k.input(0);
    int64_t r = x.rank();
    std::vector<int64_t> starts = readIndexTensor(k.input(1), what, "starts");
    std::vector<int64_t> ends = readIndexTensor(k.input(2), what, "ends");
    std::vector<int64_t> axes(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
    if (k.hasInput(3)) axes = readIndexTensor(k.input(3), what, "axes");
    std::vector<int64_t> steps(starts.size(), 1);
    if (k.hasInput(4)) steps = readIndexTensor(k.input(4), what, "steps");
    GRAFT_CHECK(ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(),
                "{}: starts, ends, axes and steps must have the same length; got {}, {}, {}, {}", what, starts.size(),
                ends.size(), axes.size(), steps.size());
    axes = normalizeAxes(axes, r, what);
    auto st = stridesOf(x.shape());
    Shape os = x.shape();
    std::vector<int64_t> strides = st;
    int64_t base = 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i];
      GRAFT_CHECK(steps[i] != 0, "{}: step for axis {} is 0", what, a);
      SliceRange sr = clampSlice(x.dim(a), starts[i], ends[i], steps[i]);
      os[a] = sr.count;
      base += sr.start * st[a];
      // With at most one element the step is never applied (and may be huge).
      strides[a] = sr.count > 1 ? st[a] * sr.step : 0;
    }
    k.setOutput(0, stridedCopy(x, base, strides, os));
  };
}

// ---- Split ------------------------------------------------------------------------------------

KernelFn splitKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", 0);
  int64_t numOutputs = c.node().attrInt("num_outputs", 0);
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 1, "{}: input must have rank >= 1, got a scalar", what);
    int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
    int64_t dim = x.dim(axis);
    auto n = static_cast<int64_t>(k.numOutputs());
    std::vector<int64_t> sizes;
    if (k.hasInput(1) && k.input(1).numel() > 0) {
      sizes = readIndexTensor(k.input(1), what, "split");
      GRAFT_CHECK(static_cast<int64_t>(sizes.size()) == n, "{}: split has {} entries for {} outputs", what,
                  sizes.size(), n);
      int64_t sum = 0;
      for (int64_t s : sizes) {
        GRAFT_CHECK(s >= 0, "{}: split entries must be >= 0, got {}", what, s);
        sum = checkedAdd(sum, s, what);
      }
      GRAFT_CHECK(sum == dim, "{}: split sizes sum to {}, but axis {} has size {}", what, sum, axis, dim);
    } else {
      sizes = splitEvenSizes(dim, n, numOutputs, what);
    }
    int64_t outer = shapeProduct(x.shape(), 0, axis), inner = shapeProduct(x.shape(), axis + 1, x.rank());
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
      Shape os = x.shape();
      os[axis] = sizes[i];
      NDArray& y = k.allocOutput(i, x.dtype(), os);
      std::vector<int64_t> starts;
      for (int64_t o = 0; o < outer; ++o) starts.push_back((o * dim + at) * inner);
      gatherBlocks(x, starts, sizes[i] * inner, y);
      at += sizes[i];
    }
  };
}

// ---- Expand, Tile -----------------------------------------------------------------------------

KernelFn expandKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& x = k.input(0);
    std::vector<int64_t> shape = readInt64Vector(k.input(1), what, "shape");
    for (int64_t d : shape) GRAFT_CHECK(d >= 0, "{}: shape {} has a negative dimension", what, shapeToString(shape));
    Shape os = broadcastShapes(x.shape(), shape, what);
    k.setOutput(0, stridedCopy(x, 0, broadcastStrides(x.shape(), os), os));
  };
}

KernelFn tileKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& x = k.input(0);
    std::vector<int64_t> reps = readInt64Vector(k.input(1), what, "repeats");
    GRAFT_CHECK(static_cast<int64_t>(reps.size()) == x.rank(), "{}: repeats has {} entries for an input of rank {}",
                what, reps.size(), x.rank());
    Shape os = x.shape();
    for (size_t d = 0; d < reps.size(); ++d) {
      GRAFT_CHECK(reps[d] >= 0, "{}: repeats must be >= 0, got {}", what, reps[d]);
      os[d] = checkedMul(os[d], reps[d], what);
    }
    int64_t total = shapeNumel(os);
    NDArray& y = k.allocOutput(0, x.dtype(), os);
    if (total == 0) return;
    auto st = stridesOf(x.shape());
    std::vector<int64_t> src(static_cast<size_t>(total));
    MultiIndex mi(os);
    for (int64_t i = 0; i < total; ++i, mi.next()) {
      int64_t off = 0;
      for (int64_t d = 0; d < x.rank(); ++d) off += (mi.idx[d] % x.dim(d)) * st[d];
      src[i] = off;
    }
    gatherFlat(x, src, y);
  };
}

// ---- Pad --------------------------------------------------------------------------------------

enum class PadMode { Constant, Reflect, Edge, Wrap };

/// For each output position along one axis, the input position it reads (-1: the constant).
/// Negative pads crop first; the positive pads then extend the cropped range.
std::vector<int64_t> padAxisMap(int64_t dim, int64_t before, int64_t after, PadMode mode, int64_t axis,
                                const std::string& what) {
  int64_t cropBegin = before < 0 ? -before : 0;
  int64_t size = checkedAdd(checkedAdd(dim, std::min<int64_t>(before, 0), what), std::min<int64_t>(after, 0), what);
  GRAFT_CHECK(size >= 0, "{}: pads {} and {} remove more than the {} elements of axis {}", what, before, after, dim,
              axis);
  int64_t pb = std::max<int64_t>(before, 0), pe = std::max<int64_t>(after, 0);
  int64_t out = checkedAdd(checkedAdd(size, pb, what), pe, what);
  GRAFT_CHECK(mode == PadMode::Constant || size > 0 || out == 0,
              "{}: cannot pad axis {} of size 0 in reflect, edge or wrap mode", what, axis);
  std::vector<int64_t> map(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = o - pb;
    if (i < 0 || i >= size) {
      switch (mode) {
        case PadMode::Constant:
          map[o] = -1;
          continue;
        case PadMode::Edge:
          i = std::clamp<int64_t>(i, 0, size - 1);
          break;
        case PadMode::Wrap:
          i = ((i % size) + size) % size;
          break;
        case PadMode::Reflect: {
          // numpy's reflect: mirror without repeating the edge, repeatedly for wide pads.
          if (size == 1) {
            i = 0;
            break;
          }
          int64_t period = 2 * (size - 1);
          i = ((i % period) + period) % period;
          if (i >= size) i = period - i;
          break;
        }
      }
    }
    map[o] = cropBegin + i;
  }
  return map;
}

KernelFn padKernel(CompileContext& c) {
  std::string modeName = c.node().attrString("mode", "constant");
  PadMode mode;
  if (modeName == "constant")
    mode = PadMode::Constant;
  else if (modeName == "reflect")
    mode = PadMode::Reflect;
  else if (modeName == "edge")
    mode = PadMode::Edge;
  else if (modeName == "wrap")
    mode = PadMode::Wrap;  // opset 19; harmless to accept
  else
    GRAFT_THROW("{}: mode must be constant, reflect or edge, got '{}'", c.node().describe(), modeName);
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    int64_t r = x.rank();
    std::vector<int64_t> pads = readInt64Vector(k.input(1), what, "pads");
    std::vector<int64_t> axes(static_cast<size_t>(r));
    std::iota(axes.begin(), axes.end(), 0);
    if (k.hasInput(3)) axes = normalizeAxes(readIndexTensor(k.input(3), what, "axes"), r, what);  // opset 18
    GRAFT_CHECK(pads.size() == 2 * axes.size(), "{}: pads has {} entries, expected {} (2 x {} axes)", what, pads.size(),
                2 * axes.size(), axes.size());
    NDArray fill(x.dtype(), {});
    if (k.hasInput(2) && k.input(2).numel() > 0) {
      const NDArray& cv = k.input(2);
      GRAFT_CHECK(cv.dtype() == x.dtype() && cv.numel() == 1, "{}: constant_value must be one {} element, got {} {}",
                  what, dtypeName(x.dtype()), dtypeName(cv.dtype()), shapeToString(cv.shape()));
      copyElements(cv, 0, fill, 0, 1);
    }
    std::vector<int64_t> before(static_cast<size_t>(r), 0), after(static_cast<size_t>(r), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      before[axes[i]] = pads[i];
      after[axes[i]] = pads[axes.size() + i];
    }
    std::vector<std::vector<int64_t>> maps(static_cast<size_t>(r));
    Shape os(static_cast<size_t>(r));
    for (int64_t d = 0; d < r; ++d) {
      maps[d] = padAxisMap(x.dim(d), before[d], after[d], mode, d, what);
      os[d] = static_cast<int64_t>(maps[d].size());
    }
    int64_t total = shapeNumel(os);
    NDArray& y = k.allocOutputUninit(0, x.dtype(), os);
    if (total == 0) return;
    auto st = stridesOf(x.shape());
    std::vector<int64_t> src(static_cast<size_t>(total));
    MultiIndex mi(os);
    for (int64_t i = 0; i < total; ++i, mi.next()) {
      int64_t off = 0;
      for (int64_t d = 0; d < r && off >= 0; ++d) {
        int64_t m = maps[d][mi.idx[d]];
        off = m < 0 ? -1 : off + m * st[d];
      }
      src[i] = off;
    }
    gatherFlat(x, src, y, &fill);
  };
}

// ---- ReverseSequence, Trilu -------------------------------------------------------------------

KernelFn reverseSequenceKernel(CompileContext& c) {
  int64_t batchAxis = c.node().attrInt("batch_axis", 1);
  int64_t timeAxis = c.node().attrInt("time_axis", 0);
  std::string what = c.node().describe();
  GRAFT_CHECK((batchAxis == 0 || batchAxis == 1) && (timeAxis == 0 || timeAxis == 1) && batchAxis != timeAxis,
              "{}: batch_axis and time_axis must be 0 and 1 in some order, got {} and {}", what, batchAxis, timeAxis);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 2, "{}: input must have rank >= 2, got shape {}", what, shapeToString(x.shape()));
    const NDArray& lensT = k.input(1);
    GRAFT_CHECK(lensT.rank() == 1 && lensT.numel() == x.dim(batchAxis),
                "{}: sequence_lens must have shape [{}] (the batch size), got {}", what, x.dim(batchAxis),
                shapeToString(lensT.shape()));
    std::vector<int64_t> lens = readInt64Vector(lensT, what, "sequence_lens");
    int64_t steps = x.dim(timeAxis);
    for (int64_t l : lens)
      GRAFT_CHECK(l >= 0 && l <= steps, "{}: sequence_lens value {} is out of range [0, {}]", what, l, steps);
    NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    auto st = stridesOf(x.shape());
    std::vector<int64_t> src(static_cast<size_t>(x.numel()));
    MultiIndex mi(x.shape());
    for (int64_t i = 0; i < x.numel(); ++i, mi.next()) {
      int64_t t = mi.idx[timeAxis], len = lens[mi.idx[batchAxis]];
      src[i] = i + (t < len ? (len - 1 - 2 * t) * st[timeAxis] : 0);
    }
    gatherFlat(x, src, y);
  };
}

KernelFn triluKernel(CompileContext& c) {
  bool upper = c.node().attrInt("upper", 1) != 0;
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 2, "{}: input must have rank >= 2, got shape {}", what, shapeToString(x.shape()));
    int64_t diag = 0;
    if (k.hasInput(1)) {
      std::vector<int64_t> kv = readInt64Vector(k.input(1), what, "k");
      GRAFT_CHECK(kv.size() == 1, "{}: k must hold one value, got {}", what, kv.size());
      diag = kv[0];
    }
    int64_t rows = x.dim(-2), cols = x.dim(-1);
    NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
    std::vector<int64_t> src(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t col = i % cols, row = (i / cols) % rows;
      bool keep = upper ? col - row >= diag : col - row <= diag;
      src[i] = keep ? i : -1;
    }
    NDArray zero(x.dtype(), {});
    gatherFlat(x, src, y, &zero);
  };
}

}  // namespace

GRAFT_REGISTER_OPS(slicing) {
  r.add("Slice").setReference(sliceKernel).noGradient({1, 2, 3, 4});
  r.add("Split").setReference(splitKernel).noGradient({1});
  r.add("Expand").setReference(expandKernel).noGradient({1});
  r.add("Tile").setReference(tileKernel).noGradient({1});
  r.add("Pad").setReference(padKernel).noGradient({1, 3});
  r.add("ReverseSequence").setReference(reverseSequenceKernel).noGradient({1});
  r.add("Trilu").setReference(triluKernel).noGradient({1});
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {
namespace {

using namespace gradutil;

// Element i of a 1-D index input as a 1-element INT64 tensor.
ir::Tensor* component(GradBuilder& g, ir::Tensor* t, int64_t i) {
  if (auto v = constantInts(t)) return g.int64s({v->at(static_cast<size_t>(i))});
  return toInt64(g, g.op("Slice", {t, g.int64s({i}), g.int64s({i + 1})}));
}

// The slice picks distinct positions along each sliced axis: slicing a Range with the node's own
// starts/ends/steps lists them (so clamping, negative indices and steps follow the kernel), and
// gathering the gradient by the inverse positions puts every element back, zeros elsewhere.
void sliceVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  ir::Tensor* x = g.in(0);
  int64_t r = rankOf(g, x);
  ir::Tensor *starts = g.in(1), *ends = g.in(2);
  ir::Tensor* axesT = n.numInputs() > 3 ? n.input(3) : nullptr;
  ir::Tensor* stepsT = n.numInputs() > 4 ? n.input(4) : nullptr;
  std::vector<int64_t> axes;
  if (axesT) {
    auto v = constantInts(axesT);
    GRAFT_CHECK(v, "{}: the gradient of Slice needs constant axes; '{}' is computed", n.describe(), axesT->id());
    axes = *v;
  } else {
    GRAFT_CHECK(starts->info().isStatic() && starts->info().rank() == 1,
                "{}: the gradient of Slice needs the length of starts '{}'", n.describe(), starts->id());
    axes.resize(static_cast<size_t>(starts->info().shape()[0]));
    std::iota(axes.begin(), axes.end(), 0);
  }
  for (int64_t& a : axes) a = normAxis(g, a, r);
  // Constant bounds, unit steps and static dims on the sliced axes: dx is dy padded with zeros
  // before and after, one Pad (the general form below pads and then gathers every element again:
  // lstm2's gate reordering in training, three Slices per weight, spent 2 ms a step there).
  auto startsC = constantInts(starts), endsC = constantInts(ends);
  auto stepsC =
      stepsT ? constantInts(stepsT) : std::optional<std::vector<int64_t>>(std::vector<int64_t>(axes.size(), 1));
  bool simple = startsC && endsC && stepsC && startsC->size() == axes.size() && endsC->size() == axes.size() &&
                stepsC->size() == axes.size() && x->info().isStatic();
  for (size_t i = 0; simple && i < axes.size(); ++i) simple = (*stepsC)[i] == 1;
  if (simple) {
    std::vector<int64_t> pads(static_cast<size_t>(2 * r), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t dim = x->info().shape()[static_cast<size_t>(axes[i])];
      const SliceRange sr = clampSlice(dim, (*startsC)[i], (*endsC)[i], 1);  // as the kernel reads them
      pads[static_cast<size_t>(axes[i])] += sr.start;
      pads[static_cast<size_t>(r + axes[i])] += dim - sr.start - sr.count;
    }
    g.setDx(0, g.op("Pad", {g.dy(), g.int64s(pads)}));
    return;
  }
  ir::Tensor* dx = padEndOnAxes(g, g.dy(), axes);
  for (size_t i = 0; i < axes.size(); ++i) {
    auto k = static_cast<int64_t>(i);
    ir::Tensor* dim = dimOf(g, x, axes[i]);
    ir::Tensor* all = g.op("Range", {scalarInt64(g, 0), reshapeTo(g, dim, g.int64s({})), scalarInt64(g, 1)});
    std::vector<ir::Tensor*> in{all, component(g, starts, k), component(g, ends, k), g.int64s({0})};
    if (stepsT) in.push_back(component(g, stepsT, k));
    ir::Tensor* picked = g.op("Slice", in);
    ir::Attributes a;
    a.set("axis", axes[i]);
    dx = g.op("Gather", {dx, inversePositions(g, picked, dim)}, a);
  }
  g.setDx(0, dx);
}

void tileVjp(GradBuilder& g) {
  ir::Tensor* x = g.in(0);
  int64_t r = rankOf(g, x);
  if (r == 0) return g.setDx(0, g.dy());
  // View dy as [r0, d0, r1, d1, ...]; the tiles then broadcast x viewed as [1, d0, 1, d1, ...].
  ir::Tensor* reps = toInt64(g, g.in(1));
  ir::Tensor* pairs;
  auto rv = constantInts(reps);
  if (rv && x->info().isStatic()) {
    std::vector<int64_t> v;
    for (int64_t d = 0; d < r; ++d) v.insert(v.end(), {(*rv)[d], x->info().shape()[d]});
    pairs = g.int64s(v);
  } else {
    ir::Tensor* one = g.int64s({1});
    ir::Attributes a;
    a.set("axis", int64_t{1});
    ir::Tensor* cols = g.op("Concat", {g.op("Unsqueeze", {reps, one}), g.op("Unsqueeze", {shapeOf(g, x), one})}, a);
    pairs = reshapeTo(g, cols, g.int64s({2 * r}));
  }
  std::vector<int64_t> tileAxes;
  for (int64_t d = 0; d < r; ++d) tileAxes.push_back(2 * d);
  ir::Tensor* like = g.op("Unsqueeze", {x, g.int64s(tileAxes)});
  g.setDx(0, reshapeLike(g, g.unbroadcast(reshapeTo(g, g.dy(), pairs), like), x));
}

void padVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  std::string modeName = n.attrString("mode", "constant");
  ir::Tensor *x = g.in(0), *pads = g.in(1), *dy = g.dy();
  ir::Tensor* value = n.numInputs() > 2 ? n.input(2) : nullptr;
  ir::Tensor* axesT = n.numInputs() > 3 ? n.input(3) : nullptr;
  if (modeName == "constant") {
    // The adjoint of padding is cropping by the same amounts (and padding what was cropped).
    auto pv = constantInts(pads);
    ir::Tensor* neg;
    if (pv) {
      for (int64_t& p : *pv) p = -p;
      neg = g.int64s(*pv);
    } else {
      neg = g.neg(pads);
    }
    std::vector<ir::Tensor*> in{dy, neg};
    if (axesT) in.insert(in.end(), {nullptr, axesT});
    ir::Tensor* dx = g.op("Pad", in);
    if (g.wants(0)) g.setDx(0, dx);
    if (value && g.wants(2)) {
      // Every output element not read from x is the constant: its gradient sums dy there.
      bool one = value->info().isStatic() && value->info().nelms() == 1;
      g.setDx(2, one ? g.sub(g.unbroadcast(dy, value), g.unbroadcast(dx, value)) : g.zerosLike(value));
    }
    return;
  }
  GRAFT_CHECK(modeName == "reflect" || modeName == "edge" || modeName == "wrap",
              "{}: mode must be constant, reflect or edge, got '{}'", n.describe(), modeName);
  if (value && g.wants(2)) g.setDx(2, g.zerosLike(value));
  if (!g.wants(0)) return;
  // Several outputs read one input element: each padded axis' position map (output position ->
  // input position, as padAxisMap computes it) is built with integer ops from the axis' size,
  // which may be known only at run time, and the gradient is scatter-added back through it.
  int64_t r = rankOf(g, x);
  auto pv = constantInts(pads);
  GRAFT_CHECK(pv, "{}: the gradient of Pad in {} mode needs constant pads; '{}' is computed", n.describe(), modeName,
              pads->id());
  std::vector<int64_t> axes(static_cast<size_t>(r));
  std::iota(axes.begin(), axes.end(), 0);
  if (axesT) {
    auto av = constantInts(axesT);
    GRAFT_CHECK(av, "{}: the gradient of Pad in {} mode needs constant axes; '{}' is computed", n.describe(), modeName,
                axesT->id());
    axes = *av;
    for (int64_t& a : axes) a = normAxis(g, a, r);
  }
  GRAFT_CHECK(pv->size() == 2 * axes.size(), "{}: pads has {} entries, expected {} (2 x {} axes)", n.describe(),
              pv->size(), 2 * axes.size(), axes.size());
  auto c = [&](int64_t v) { return scalarInt64(g, v); };
  ir::Tensor* dx = dy;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t d = axes[i], before = (*pv)[i], after = (*pv)[axes.size() + i];
    if (before == 0 && after == 0) continue;
    int64_t pb = std::max<int64_t>(before, 0), pe = std::max<int64_t>(after, 0);
    ir::Tensor* dim = dimOf(g, x, d);
    ir::Tensor* size =
        g.add(reshapeTo(g, dim, g.int64s({})), c(std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0)));
    ir::Tensor* pos = g.sub(g.op("Range", {c(0), g.add(size, c(pb + pe)), c(1)}), c(pb));
    ir::Tensor* last = g.sub(size, c(1));
    if (modeName == "edge") {
      pos = g.op("Max", {g.op("Min", {pos, last}), c(0)});
    } else if (modeName == "wrap") {
      ir::Tensor* m = g.op("Max", {size, c(1)});
      pos = g.op("Mod", {pos, m});  // Python's sign rule: already in [0, m)
    } else {
      // numpy's reflect, repeated for wide pads; a size-1 axis maps everything to 0.
      ir::Tensor* period = g.op("Max", {g.add(last, last), c(1)});
      pos = g.op("Mod", {pos, period});
      pos = g.where(g.op("GreaterOrEqual", {pos, size}), g.sub(period, pos), pos);
    }
    if (before < 0) pos = g.add(pos, c(-before));
    // ONNX's inference may lose the rank of these 1-D vectors of unknown length.
    if (!pos->info().hasShape()) pos = g.op("Reshape", {pos, g.int64s({-1})});
    dx = scatterAddAlongAxis(g, dx, pos, d, dim);
  }
  g.setDx(0, dx);
}

}  // namespace

GRAFT_REGISTER_OPS(slicing_vjp) {
  r.add("Slice").setVjp(sliceVjp);
  r.add("Split").setVjp([](GradBuilder& g) {
    std::vector<ir::Tensor*> dys;
    for (size_t i = 0; i < g.node().numOutputs(); ++i) dys.push_back(g.dy(i));
    ir::Attributes a;
    a.set("axis", g.node().attrInt("axis", 0));
    g.setDx(0, g.op("Concat", dys, a));
  });
  r.add("Expand").setVjp([](GradBuilder& g) { g.setDx(0, g.unbroadcast(g.dy(), g.in(0))); });
  r.add("Tile").setVjp(tileVjp);
  r.add("Pad").setVjp(padVjp);
  // Reversing the first len steps of each sequence, and masking a triangle, are self-adjoint.
  r.add("ReverseSequence").setVjp([](GradBuilder& g) {
    ir::Attributes a;
    a.set("batch_axis", g.node().attrInt("batch_axis", 1));
    a.set("time_axis", g.node().attrInt("time_axis", 0));
    g.setDx(0, g.op("ReverseSequence", {g.dy(), g.in(1)}, a));
  });
  r.add("Trilu").setVjp([](GradBuilder& g) {
    ir::Attributes a;
    a.set("upper", g.node().attrInt("upper", 1));
    std::vector<ir::Tensor*> in{g.dy()};
    if (g.node().numInputs() > 1 && g.in(1)) in.push_back(g.in(1));
    g.setDx(0, g.op("Trilu", in, a));
  });
}

}  // namespace graft::ops
