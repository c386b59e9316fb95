// Index-driven reads and writes: Gather, GatherElements, GatherND, ScatterElements, ScatterND.
// Every index is checked against its axis (negative ones wrap, as the spec allows) before any
// element moves, so bad indices raise graft::Error instead of reading out of bounds.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/copy_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/index_util.hpp"
#include "ops/fallback_infer.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

// ---- gathers ----------------------------------------------------------------------------------

KernelFn gatherKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", 0);
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& data = k.input(0);
    const NDArray& ind = k.input(1);
    int64_t r = data.rank();
    GRAFT_CHECK(r >= 1, "{}: data must have rank >= 1, got a scalar", what);
    int64_t axis = normalizeAxis(axisAttr, r, what);
    std::vector<int64_t> idx = readIndexTensor(ind, what, "indices");
    int64_t s = data.dim(axis);
    for (int64_t& v : idx) v = wrapIndex(v, s, what, "indices", axis);
    Shape os(data.shape().begin(), data.shape().begin() + axis);
    os.insert(os.end(), ind.shape().begin(), ind.shape().end());
    os.insert(os.end(), data.shape().begin() + axis + 1, data.shape().end());
    NDArray& y = k.allocOutput(0, data.dtype(), os);
    int64_t outer = shapeProduct(data.shape(), 0, axis), inner = shapeProduct(data.shape(), axis + 1, r);
    if (y.numel() == 0) return;
    std::vector<int64_t> starts;
    starts.reserve(static_cast<size_t>(outer) * idx.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t v : idx) starts.push_back((o * s + v) * inner);
    gatherBlocks(data, starts, inner, y);
  };
}

/// Checks the shape rules GatherElements and ScatterElements share: indices of the data's rank,
/// no larger than the data on any axis but `axis`.
void checkElementsShapes(const NDArray& data, const NDArray& ind, int64_t axis, const std::string& what) {
  GRAFT_CHECK(ind.rank() == data.rank(), "{}: indices must have the rank of data ({}), got rank {}", what, data.rank(),
              ind.rank());
  for (int64_t d = 0; d < data.rank(); ++d)
    GRAFT_CHECK(d == axis || ind.dim(d) <= data.dim(d),
                "{}: indices shape {} exceeds data shape {} on axis {} (only axis {} may differ)", what,
                shapeToString(ind.shape()), shapeToString(data.shape()), d, axis);
}

/// Flat data offsets addressed by GatherElements/ScatterElements indices.
std::vector<int64_t> elementOffsets(const NDArray& data, const NDArray& ind, int64_t axis, const std::string& what) {
  std::vector<int64_t> idx = readIndexTensor(ind, what, "indices");
  std::vector<int64_t> offs(idx.size());
  if (idx.empty()) return offs;
  auto st = stridesOf(data.shape());
  int64_t s = data.dim(axis);
  MultiIndex mi(ind.shape());
  size_t p = 0;
  do {
    int64_t off = 0;
    for (int64_t d = 0; d < data.rank(); ++d)
      off += (d == axis ? wrapIndex(idx[p], s, what, "indices", axis) : mi.idx[d]) * st[d];
    offs[p++] = off;
  } while (mi.next());
  return offs;
}

KernelFn gatherElementsKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", 0);
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& data = k.input(0);
    const NDArray& ind = k.input(1);
    GRAFT_CHECK(data.rank() >= 1, "{}: data must have rank >= 1, got a scalar", what);
    int64_t axis = normalizeAxis(axisAttr, data.rank(), what);
    checkElementsShapes(data, ind, axis, what);
    std::vector<int64_t> offs = elementOffsets(data, ind, axis, what);
    NDArray& y = k.allocOutput(0, data.dtype(), ind.shape());
    gatherFlat(data, offs, y);
  };
}

/// The part GatherND and ScatterND share: each row of `k` indices (the last axis of `ind`)
/// addresses a block of data.shape[batch+k:]. Returns the flat data offset of every block, in
/// the order of the index rows, and the block length.
struct NdBlocks {
  std::vector<int64_t> starts;
  int64_t blockLen = 1;
  int64_t k = 0;
};

NdBlocks ndBlocks(const NDArray& data, const NDArray& ind, int64_t batchDims, const std::string& what) {
  int64_t r = data.rank(), q = ind.rank();
  GRAFT_CHECK(r >= 1 && q >= 1, "{}: data and indices must have rank >= 1 (got {} and {})", what, r, q);
  GRAFT_CHECK(batchDims >= 0 && batchDims < std::min(r, q), "{}: batch_dims {} must be in [0, {})", what, batchDims,
              std::min(r, q));
  for (int64_t d = 0; d < batchDims; ++d)
    GRAFT_CHECK(ind.dim(d) == data.dim(d),
                "{}: the first {} (batch_dims) dimensions of indices {} and data {} must match", what, batchDims,
                shapeToString(ind.shape()), shapeToString(data.shape()));
  NdBlocks b;
  b.k = ind.dim(-1);
  GRAFT_CHECK(b.k >= 1 && b.k <= r - batchDims, "{}: the last dimension of indices ({}) must be in [1, {}] for data {}",
              what, b.k, r - batchDims, shapeToString(data.shape()));
  std::vector<int64_t> idx = readIndexTensor(ind, what, "indices");
  auto st = stridesOf(data.shape());
  b.blockLen = shapeProduct(data.shape(), batchDims + b.k, r);
  int64_t rows = static_cast<int64_t>(idx.size()) / b.k;
  int64_t batches = shapeProduct(data.shape(), 0, batchDims);
  int64_t rowsPerBatch = batches == 0 ? 0 : rows / batches;
  int64_t batchStride = shapeProduct(data.shape(), batchDims, r);
  b.starts.resize(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row) {
    int64_t off = (row / rowsPerBatch) * batchStride;
    for (int64_t j = 0; j < b.k; ++j) {
      int64_t axis = batchDims + j;
      off += wrapIndex(idx[row * b.k + j], data.dim(axis), what, "indices", axis) * st[axis];
    }
    b.starts[row] = off;
  }
  return b;
}

KernelFn gatherNdKernel(CompileContext& c) {
  int64_t batchDims = c.node().attrInt("batch_dims", 0);
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& data = k.input(0);
    const NDArray& ind = k.input(1);
    NdBlocks b = ndBlocks(data, ind, batchDims, what);
    Shape os(ind.shape().begin(), ind.shape().end() - 1);
    os.insert(os.end(), data.shape().begin() + batchDims + b.k, data.shape().end());
    NDArray& y = k.allocOutput(0, data.dtype(), os);
    gatherBlocks(data, b.starts, b.blockLen, y);
  };
}

// ---- scatters ---------------------------------------------------------------------------------

enum class Reduction { None, Add, Mul, Max, Min };

Reduction parseReduction(const ir::Node& n) {
  std::string s = n.attrString("reduction", "none");
  if (s == "none") return Reduction::None;
  if (s == "add") return Reduction::Add;
  if (s == "mul") return Reduction::Mul;
  // max/min arrive with opset 18; accepting them early costs nothing.
  if (s == "max") return Reduction::Max;
  if (s == "min") return Reduction::Min;
  GRAFT_THROW("{}: reduction must be one of none, add, mul, max, min; got '{}'", n.describe(), s);
}

/// acc (op) v for one element type. Integer arithmetic wraps (computed in uint64) rather than
/// overflowing; half types compute in float; BOOL treats add/max as or and mul/min as and.
template <class T>
T reduceElement(Reduction red, const T& acc, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return v;  // only Reduction::None reaches here (checked by the caller)
  } else if constexpr (std::is_same_v<T, bool>) {
    switch (red) {
      case Reduction::Add:
      case Reduction::Max:
        return acc || v;
      case Reduction::Mul:
      case Reduction::Min:
        return acc && v;
      default:
        return v;
    }
  } else if constexpr (std::is_integral_v<T>) {
    switch (red) {
      case Reduction::Add:
        return static_cast<T>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
      case Reduction::Mul:
        return static_cast<T>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
      case Reduction::Max:
        return std::max(acc, v);
      case Reduction::Min:
        return std::min(acc, v);
      default:
        return v;
    }
  } else {
    using C = ComputeType<T>;
    C a = static_cast<C>(acc), b = static_cast<C>(v);
    switch (red) {
      case Reduction::Add:
        return static_cast<T>(a + b);
      case Reduction::Mul:
        return static_cast<T>(a * b);
      // NaN propagates, as numpy's maximum/minimum do.
      case Reduction::Max:
        return static_cast<T>(std::isnan(a) || std::isnan(b) ? a + b : std::max(a, b));
      case Reduction::Min:
        return static_cast<T>(std::isnan(a) || std::isnan(b) ? a + b : std::min(a, b));
      default:
        return v;
    }
  }
}

/// y[dst[i] + j] = y[...] (red) upd[i * blockLen + j] for every i, j, in order (so with
/// reduction none the last of duplicate indices wins).
void scatterApply(NDArray& y, const NDArray& upd, const std::vector<int64_t>& dst, int64_t blockLen, Reduction red,
                  const std::string& what) {
  GRAFT_CHECK(upd.dtype() == y.dtype(), "{}: updates have dtype {}, expected {} like data", what,
              dtypeName(upd.dtype()), dtypeName(y.dtype()));
  GRAFT_CHECK(red == Reduction::None || y.dtype() != DataType::String,
              "{}: a reduction other than none is not defined for STRING tensors", what);
  dispatch<kAll>(y.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* yp = y.data<T>();
    const T* up = upd.data<T>();
    for (size_t i = 0; i < dst.size(); ++i)
      for (int64_t j = 0; j < blockLen; ++j) {
        T& acc = yp[dst[i] + j];
        acc = reduceElement<T>(red, acc, up[static_cast<int64_t>(i) * blockLen + j]);
      }
  });
}

KernelFn scatterElementsKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", 0);
  Reduction red = parseReduction(c.node());
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& data = k.input(0);
    const NDArray& ind = k.input(1);
    const NDArray& upd = k.input(2);
    GRAFT_CHECK(data.rank() >= 1, "{}: data must have rank >= 1, got a scalar", what);
    int64_t axis = normalizeAxis(axisAttr, data.rank(), what);
    checkElementsShapes(data, ind, axis, what);
    GRAFT_CHECK(upd.shape() == ind.shape(), "{}: updates have shape {}, expected the indices shape {}", what,
                shapeToString(upd.shape()), shapeToString(ind.shape()));
    std::vector<int64_t> offs = elementOffsets(data, ind, axis, what);
    NDArray& y = k.setOutput(0, data.clone());
    scatterApply(y, upd, offs, 1, red, what);
  };
}

KernelFn scatterNdKernel(CompileContext& c) {
  Reduction red = parseReduction(c.node());
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& data = k.input(0);
    const NDArray& ind = k.input(1);
    const NDArray& upd = k.input(2);
    NdBlocks b = ndBlocks(data, ind, 0, what);
    Shape want(ind.shape().begin(), ind.shape().end() - 1);
    want.insert(want.end(), data.shape().begin() + b.k, data.shape().end());
    GRAFT_CHECK(upd.shape() == want, "{}: updates have shape {}, expected {} (indices.shape[:-1] + data.shape[{}:])",
                what, shapeToString(upd.shape()), shapeToString(want), b.k);
    NDArray& y = k.setOutput(0, data.clone());
    scatterApply(y, upd, b.starts, b.blockLen, red, what);
  };
}

// TensorScatter (opset 24): a KV-cache update. present = past_cache with, per batch b, update's
// slices along `axis` written from position write_indices[b] (0 when absent) on; "circular"
// wraps positions modulo the cache length, "linear" requires them to fit.
KernelFn tensorScatterKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  std::string mode = n.attrString("mode", "linear");
  int64_t axisAttr = n.attrInt("axis", -2);
  GRAFT_CHECK(mode == "linear" || mode == "circular", "{}: mode must be 'linear' or 'circular', got '{}'", what, mode);
  return [=](KernelContext& k) {
    const NDArray& past = k.input(0);
    const NDArray& upd = k.input(1);
    GRAFT_CHECK(past.rank() >= 2 && upd.rank() == past.rank(), "{}: past_cache {} and update {} must have one rank >= 2",
                what, shapeToString(past.shape()), shapeToString(upd.shape()));
    GRAFT_CHECK(upd.dtype() == past.dtype(), "{}: update must have past_cache's type {}, got {}", what,
                dtypeName(past.dtype()), dtypeName(upd.dtype()));
    int64_t axis = normalizeAxis(axisAttr, past.rank(), what);
    GRAFT_CHECK(axis != 0, "{}: axis must not be the batch axis 0", what);
    for (int64_t d = 0; d < past.rank(); ++d)
      GRAFT_CHECK(d == axis ? upd.dim(d) <= past.dim(d) : upd.dim(d) == past.dim(d),
                  "{}: update of shape {} does not fit past_cache of shape {} (axis {})", what, shapeToString(upd.shape()),
                  shapeToString(past.shape()), axis);
    int64_t B = past.dim(0), maxLen = past.dim(axis), len = upd.dim(axis);
    std::vector<int64_t> starts(static_cast<size_t>(B), 0);
    if (k.hasInput(2)) {
      starts = readIndexTensor(k.input(2), what, "write_indices");
      GRAFT_CHECK(static_cast<int64_t>(starts.size()) == B, "{}: write_indices must have {} values, got {}", what, B,
                  starts.size());
    }
    NDArray& y = k.allocOutputUninit(0, past.dtype(), past.shape());
    copyElements(past, 0, y, 0, past.numel());
    int64_t mid = shapeProduct(past.shape(), 1, axis), inner = shapeProduct(past.shape(), axis + 1, past.rank());
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t s = 0; s < len; ++s) {
        int64_t pos = starts[b] + s;
        if (mode == "circular") pos = ((pos % maxLen) + maxLen) % maxLen;
        GRAFT_CHECK(pos >= 0 && pos < maxLen, "{}: batch {} writes position {}, outside the cache length {}", what, b, pos,
                    maxLen);
        for (int64_t m = 0; m < mid; ++m)
          copyElements(upd, ((b * mid + m) * len + s) * inner, y, ((b * mid + m) * maxLen + pos) * inner, inner);
      }
    }
  };
}

}  // namespace

GRAFT_REGISTER_OPS(indexing) {
  r.add("Gather").setReference(gatherKernel).noGradient({1});
  r.add("GatherElements").setReference(gatherElementsKernel).noGradient({1});
  r.add("GatherND").setReference(gatherNdKernel).noGradient({1});
  r.add("ScatterElements").setReference(scatterElementsKernel).noGradient({1});
  r.add("TensorScatter").setReference(tensorScatterKernel).noGradient({2});
  r.add("ScatterND").setReference(scatterNdKernel).noGradient({1});
  // Until the linked onnx has their schemas (opset > 17).
  setFallbackInfer("", "TensorScatter", sameTypeAsInput(0));
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {
namespace {

using namespace gradutil;

// The gradient of a scatter with reduction "none" reaches an update only where that update is
// the one left in the output: with repeated indices the kernel keeps the last write. Scattering
// each update's position (0, 1, ...) through the same op and reading it back finds the winners,
// so the gradient stays exact for any index pattern. Returns a BOOL mask shaped like the updates.
ir::Tensor* scatterWinners(GradBuilder& g, const std::string& gatherOp, const ir::Attributes& attrs) {
  ir::Tensor *data = g.in(0), *ind = g.in(1), *upd = g.in(2);
  ir::Tensor* count = upd->info().isStatic() ? scalarInt64(g, upd->info().nelms()) : g.op("Size", {upd});
  ir::Tensor* ids = reshapeTo(g, g.op("Range", {scalarInt64(g, 0), count, scalarInt64(g, 1)}), shapeOf(g, upd));
  ir::Tensor* none = g.op("Expand", {scalarInt64(g, -1), shapeOf(g, data)});
  ir::Tensor* owner = g.op(g.node().type(), {none, ind, ids}, attrs);
  return g.op("Equal", {g.op(gatherOp, {owner, ind}, attrs), ids});
}

// Scatters: data's gradient is dy except where an update overwrote it (reduction none); the
// updates' gradient is dy read back at their positions.
void scatterVjp(GradBuilder& g, const std::string& gatherOp) {
  const ir::Node& n = g.node();
  std::string red = n.attrString("reduction", "none");
  GRAFT_CHECK(red == "none" || red == "add", "{}: the gradient of {} is defined for reduction none and add, not '{}'",
              n.describe(), n.type(), red);
  ir::Attributes plain;  // the scatter's axis (ScatterElements), without the reduction
  if (n.attrs().has("axis")) plain.set("axis", n.attrInt("axis"));
  ir::Tensor *ind = g.in(1), *upd = g.in(2), *dy = g.dy();
  if (g.wants(0)) g.setDx(0, red == "add" ? dy : g.op(n.type(), {dy, ind, g.zerosLike(upd)}, plain));
  if (g.wants(2)) {
    ir::Tensor* du = g.op(gatherOp, {dy, ind}, plain);
    if (red == "none") du = g.where(scatterWinners(g, gatherOp, plain), du, g.scalarLike(0, du));
    g.setDx(2, du);
  }
}

void gatherNdVjp(GradBuilder& g) {
  ir::Tensor *data = g.in(0), *ind = toInt64(g, g.in(1));
  int64_t b = g.node().attrInt("batch_dims", 0);
  int64_t q = rankOf(g, ind);
  GRAFT_CHECK(b >= 0 && b < q, "{}: batch_dims {} is out of range for indices of rank {}", g.node().describe(), b, q);
  if (b > 0) {
    // ScatterND has no batch_dims: prepend each batch coordinate to the index rows instead.
    ir::Tensor* rowsShape = concatInts(g, {shapeOf(g, ind, 0, q - 1), g.int64s({1})});
    std::vector<ir::Tensor*> cols;
    for (int64_t j = 0; j < b; ++j) {
      ir::Tensor* size = dimOf(g, ind, j);
      ir::Tensor* iota = g.op("Range", {scalarInt64(g, 0), reshapeTo(g, size, g.int64s({})), scalarInt64(g, 1)});
      std::vector<ir::Tensor*> shape;
      for (int64_t d = 0; d < q; ++d) shape.push_back(d == j ? size : g.int64s({1}));
      cols.push_back(g.op("Expand", {reshapeTo(g, iota, concatInts(g, shape)), rowsShape}));
    }
    cols.push_back(ind);
    ir::Attributes a;
    a.set("axis", int64_t{-1});
    ind = g.op("Concat", cols, a);
  }
  ir::Attributes a;
  a.set("reduction", std::string("add"));
  g.setDx(0, g.op("ScatterND", {g.zerosLike(data), ind, g.dy()}, a));
}

}  // namespace

GRAFT_REGISTER_OPS(indexing_vjp) {
  // Embedding lookups: the adjoint scatter-adds, so repeated indices accumulate.
  r.add("Gather").setVjp([](GradBuilder& g) {
    ir::Tensor* data = g.in(0);
    int64_t axis = normAxis(g, g.node().attrInt("axis", 0), rankOf(g, data));
    g.setDx(0, scatterAddAlongAxis(g, g.dy(), g.in(1), axis, dimOf(g, data, axis)));
  });
  r.add("GatherElements").setVjp([](GradBuilder& g) {
    ir::Attributes a;
    a.set("axis", g.node().attrInt("axis", 0));
    a.set("reduction", std::string("add"));
    g.setDx(0, g.op("ScatterElements", {g.zerosLike(g.in(0)), g.in(1), g.dy()}, a));
  });
  r.add("GatherND").setVjp(gatherNdVjp);
  r.add("ScatterElements").setVjp([](GradBuilder& g) { scatterVjp(g, "GatherElements"); });
  r.add("ScatterND").setVjp([](GradBuilder& g) { scatterVjp(g, "GatherND"); });
  // TensorScatter: the written positions take update's gradient, the others past_cache's.
  r.add("TensorScatter").setVjp([](GradBuilder& g) {
    ir::Tensor *past = g.in(0), *upd = g.in(1);
    ir::Tensor* w = g.node().numInputs() > 2 ? g.in(2) : nullptr;
    int64_t rank = rankOf(g, past);
    int64_t axis = normAxis(g, g.node().attrInt("axis", -2), rank);
    if (g.wants(0)) {
      std::vector<ir::Tensor*> ins{g.dy(), g.zerosLike(upd)};
      if (w) ins.push_back(w);
      g.setDx(0, g.op("TensorScatter", ins, g.node().attrs()));
    }
    if (!g.wants(1)) return;
    const auto& ud = upd->info().dims();
    const auto& pd = past->info().dims();
    GRAFT_CHECK(upd->info().hasShape() && ud[axis].known() && pd[axis].known(),
                "{}: the gradient needs the sequence lengths of past_cache and update", g.node().describe());
    int64_t len = ud[axis].value, maxLen = pd[axis].value;
    // Position of update slice s in batch b: s + write_indices[b] (modulo the cache length when circular).
    Shape rs(static_cast<size_t>(rank), 1);
    rs[axis] = len;
    NDArray steps(DataType::Int64, rs);
    for (int64_t i = 0; i < len; ++i) steps.data<int64_t>()[i] = i;
    ir::Tensor* idx = g.constant(steps);
    if (w) {
      std::vector<int64_t> ws(static_cast<size_t>(rank), 1);
      ws[0] = -1;
      idx = g.add(idx, g.op("Reshape", {toInt64(g, w), g.int64s(ws)}));
    }
    if (g.node().attrString("mode", "linear") == "circular") {
      ir::Attributes fmod;
      fmod.set("fmod", int64_t{0});
      idx = g.op("Mod", {idx, scalarInt64(g, maxLen)}, fmod);
    }
    idx = g.op("Expand", {idx, g.op("Shape", {upd})});
    ir::Attributes a;
    a.set("axis", axis);
    g.setDx(1, g.op("GatherElements", {g.dy(), idx}, a));
  });
}

}  // namespace graft::ops
