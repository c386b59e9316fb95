// Data movement for the cpu backend, in bytes (every element type but STRING): Transpose
// (contiguous runs copied with memcpy when the innermost axis stays innermost, cache-blocked
// tiles otherwise), Concat, Split, Slice, Gather, GatherElements, Expand, Tile and constant Pad.
// Index and attribute checks are the reference's; work is split over the threads by output
// position.
#include <algorithm>
#include <numeric>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/vec_common.hpp"
#include "ops/copy_util.hpp"
#include "ops/index_util.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::backends::cpu {
namespace {

constexpr int64_t kCopyGrainBytes = 1 << 17;

// Copies fixed-size elements; the size is a template argument so that the copy compiles to one
// move (or a vector of them).
template <size_t E>
void copyStrided(const std::byte* src, int64_t srcStride, std::byte* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * E, src + i * srcStride * static_cast<int64_t>(E), E);
}

void copyStridedAny(const std::byte* src, int64_t srcStride, std::byte* dst, int64_t n, size_t esize) {
  switch (esize) {
    case 1: return copyStrided<1>(src, srcStride, dst, n);
    case 2: return copyStrided<2>(src, srcStride, dst, n);
    case 4: return copyStrided<4>(src, srcStride, dst, n);
    case 8: return copyStrided<8>(src, srcStride, dst, n);
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * esize, src + i * srcStride * static_cast<int64_t>(esize), esize);
  }
}

// Output = input through a strided view (offsets in elements): out[i0, i1, ...] =
// in[base + sum ik * strides[k]]. Runs along the innermost axis are memcpy'd when contiguous.
void stridedGather(support::ThreadPool& pool, const NDArray& x, int64_t base, const std::vector<int64_t>& strides,
                   NDArray& y) {
  int64_t total = y.numel();
  if (total == 0) return;
  size_t es = dtypeSize(x.dtype());
  // Merge output axes that walk the input contiguously; drop size-1 axes.
  std::vector<int64_t> dims, st;
  for (size_t d = 0; d < y.shape().size(); ++d) {
    if (y.shape()[d] == 1) continue;
    if (!dims.empty() && st.back() == strides[d] * y.shape()[d]) {
      dims.back() *= y.shape()[d];
      st.back() = strides[d];
      continue;
    }
    dims.push_back(y.shape()[d]);
    st.push_back(strides[d]);
  }
  if (dims.empty()) dims.push_back(1), st.push_back(1);
  int64_t r = static_cast<int64_t>(dims.size()), inner = dims.back(), innerStride = st.back();
  const auto* src = static_cast<const std::byte*>(x.rawData());
  auto* dst = static_cast<std::byte*>(y.rawData());
  int64_t runs = total / inner;
  int64_t grain = std::max<int64_t>(1, kCopyGrainBytes / std::max<int64_t>(1, inner * static_cast<int64_t>(es)));
  parallelRanges(pool, runs, grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(r, 0);
    int64_t rest = b, off = base;
    for (int64_t d = r - 2; d >= 0; --d) {
      idx[d] = rest % dims[d];
      rest /= dims[d];
      off += idx[d] * st[d];
    }
    for (int64_t run = b; run < e; ++run) {
      std::byte* out = dst + run * inner * static_cast<int64_t>(es);
      const std::byte* in = src + off * static_cast<int64_t>(es);
      if (innerStride == 1) std::memcpy(out, in, static_cast<size_t>(inner) * es);
      else copyStridedAny(in, innerStride, out, inner, es);
      for (int64_t d = r - 2; d >= 0; --d) {
        off += st[d];
        if (++idx[d] < dims[d]) break;
        off -= st[d] * dims[d];
        idx[d] = 0;
      }
    }
  });
}

// ---- Transpose -------------------------------------------------------------------------------

template <size_t E>
void transposeTile(const std::byte* src, int64_t srcRow, std::byte* dst, int64_t dstRow, int64_t rows, int64_t cols) {
  // dst[c][r] = src[r][c] for a tile small enough for L1.
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t rr = 0; rr < rows; ++rr) std::memcpy(dst + (c * dstRow + rr) * E, src + (rr * srcRow + c) * E, E);
}

void transposeTileAny(size_t es, const std::byte* src, int64_t srcRow, std::byte* dst, int64_t dstRow, int64_t rows,
                      int64_t cols) {
  switch (es) {
    case 1: return transposeTile<1>(src, srcRow, dst, dstRow, rows, cols);
    case 2: return transposeTile<2>(src, srcRow, dst, dstRow, rows, cols);
    case 4: return transposeTile<4>(src, srcRow, dst, dstRow, rows, cols);
    default: return transposeTile<8>(src, srcRow, dst, dstRow, rows, cols);
  }
}

ops::KernelFn transposeKernel(ops::CompileContext& c) {
  std::vector<int64_t> permAttr = c.node().attrInts("perm", {});
  std::string what = c.node().describe();
  return [=](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    int64_t r = x.rank();
    std::vector<int64_t> perm = permAttr;
    if (perm.empty()) {
      perm.resize(static_cast<size_t>(r));
      std::iota(perm.rbegin(), perm.rend(), 0);
    }
    GRAFT_CHECK(static_cast<int64_t>(perm.size()) == r, "{}: perm has {} entries for an input of rank {}", what, perm.size(), r);
    perm = ops::normalizeAxes(perm, r, what);
    Shape os(static_cast<size_t>(r));
    for (int64_t i = 0; i < r; ++i) os[i] = x.dim(perm[i]);
    NDArray& y = k.allocOutputUninit(0, x.dtype(), os);
    if (y.numel() == 0) return;
    auto ist = ops::stridesOf(x.shape());
    std::vector<int64_t> st(static_cast<size_t>(r));
    for (int64_t i = 0; i < r; ++i) st[i] = ist[perm[i]];
    // The innermost output axis walks the input with stride 1 (or has size 1): contiguous runs.
    int64_t lastNonUnit = r - 1;
    while (lastNonUnit >= 0 && os[lastNonUnit] == 1) --lastNonUnit;
    if (lastNonUnit < 0 || st[lastNonUnit] == 1 || os[lastNonUnit] * static_cast<int64_t>(dtypeSize(x.dtype())) < 16 || r < 2) {
      stridedGather(k.pool(), x, 0, st, y);
      return;
    }
    // Otherwise tile the plane of the output's innermost axis (a) and the output axis that is
    // the input's innermost (b): reads and writes then both touch whole cache lines.
    int64_t a = lastNonUnit;
    int64_t b = -1;
    for (int64_t i = 0; i < r; ++i)
      if (st[i] == 1 && os[i] > 1) b = i;
    if (b < 0) {
      stridedGather(k.pool(), x, 0, st, y);
      return;
    }
    size_t es = dtypeSize(x.dtype());
    auto ost = ops::stridesOf(os);
    Shape outerDims;
    std::vector<int64_t> outerIn, outerOut;
    for (int64_t i = 0; i < r; ++i)
      if (i != a && i != b) outerDims.push_back(os[i]), outerIn.push_back(st[i]), outerOut.push_back(ost[i]);
    int64_t outer = shapeNumel(outerDims);
    constexpr int64_t kT = 32;
    int64_t na = os[a], nb = os[b];
    int64_t tilesA = (na + kT - 1) / kT, tilesB = (nb + kT - 1) / kT;
    const auto* src = static_cast<const std::byte*>(x.rawData());
    auto* dst = static_cast<std::byte*>(y.rawData());
    int64_t tasks = outer * tilesA * tilesB;
    parallelRanges(k.pool(), tasks, std::max<int64_t>(1, 4096 / (kT * kT)), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        int64_t o = t / (tilesA * tilesB), ta = (t / tilesB) % tilesA, tb = t % tilesB;
        int64_t inOff = 0, outOff = 0, rest = o;
        for (int64_t d = static_cast<int64_t>(outerDims.size()) - 1; d >= 0; --d) {
          int64_t i = rest % outerDims[d];
          rest /= outerDims[d];
          inOff += i * outerIn[d];
          outOff += i * outerOut[d];
        }
        int64_t a0 = ta * kT, b0 = tb * kT;
        // Tile: input rows along a (stride st[a]), columns along b (stride 1); output rows along b
        // (stride ost[b]), columns along a (stride 1).
        transposeTileAny(es, src + (inOff + a0 * st[a] + b0) * static_cast<int64_t>(es), st[a],
                         dst + (outOff + b0 * ost[b] + a0) * static_cast<int64_t>(es), ost[b], std::min(kT, na - a0),
                         std::min(kT, nb - b0));
      }
    });
  };
}

// ---- Concat, Split ---------------------------------------------------------------------------

// One contiguous copy of a Concat or Split.
struct CopySegment {
  std::byte* dst;
  const std::byte* src;
  int64_t bytes;
};

// The segments, in chunks of kCopyGrainBytes over the pool: for a Concat or Split with fewer
// rows than threads (along axis 0 there is one row per input), whose rows would otherwise each be
// one thread's memcpy. (A training step's weight reordering, torch's LSTM gates: four Concats and
// Splits of 4 MB each on one thread took 0.5 ms apiece, lstm2 b1.)
void copyChunked(support::ThreadPool& pool, const std::vector<CopySegment>& segs) {
  std::vector<int64_t> at(segs.size() + 1, 0);  // each segment's first byte in the whole
  for (size_t i = 0; i < segs.size(); ++i) at[i + 1] = at[i] + segs[i].bytes;
  const int64_t total = at.back(), chunks = (total + kCopyGrainBytes - 1) / kCopyGrainBytes;
  parallelRanges(pool, chunks, 1, [&](int64_t c0, int64_t c1) {
    int64_t b = c0 * kCopyGrainBytes;
    const int64_t e = std::min(total, c1 * kCopyGrainBytes);
    auto i = static_cast<size_t>(std::upper_bound(at.begin(), at.end(), b) - at.begin() - 1);
    for (; b < e; ++i) {
      const int64_t off = b - at[i], n = std::min(e, at[i + 1]) - b;
      if (n > 0) std::memcpy(segs[i].dst + off, segs[i].src + off, static_cast<size_t>(n));
      b += std::max<int64_t>(n, 0);
    }
  });
}

// Whether a copy of `outer` rows of `rowBytes` should go by chunks (copyChunked).
bool copyByChunks(const support::ThreadPool& pool, int64_t outer, int64_t rowBytes) {
  return pool.numThreads() > 1 && outer < int64_t{2} * pool.numThreads() && outer * rowBytes >= 2 * kCopyGrainBytes;
}

ops::KernelFn concatKernel(ops::CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis");
  std::string what = c.node().describe();
  return [=](ops::KernelContext& k) {
    const NDArray& first = k.input(0);
    int64_t r = first.rank();
    int64_t axis = ops::normalizeAxis(axisAttr, r, what);
    std::vector<const NDArray*> xs;
    for (size_t i = 0; i < k.numInputs(); ++i) xs.push_back(&k.input(i));
    Shape os = ops::concatShape(xs, axis, what);
    NDArray& y = k.allocOutputUninit(0, first.dtype(), os);
    if (y.numel() == 0) return;
    int64_t es = static_cast<int64_t>(dtypeSize(first.dtype()));
    int64_t outer = ops::shapeProduct(os, 0, axis), inner = ops::shapeProduct(os, axis + 1, r) * es;
    int64_t rowOut = os[axis] * inner;
    auto* dst = static_cast<std::byte*>(y.rawData());
    if (copyByChunks(k.pool(), outer, rowOut)) {
      std::vector<CopySegment> segs;
      for (int64_t o = 0; o < outer; ++o) {
        int64_t at = 0;
        for (size_t i = 0; i < k.numInputs(); ++i) {
          const NDArray& x = k.input(i);
          int64_t rowIn = x.dim(axis) * inner;
          segs.push_back({dst + o * rowOut + at, static_cast<const std::byte*>(x.rawData()) + o * rowIn, rowIn});
          at += rowIn;
        }
      }
      copyChunked(k.pool(), segs);
      return;
    }
    parallelRanges(k.pool(), outer, std::max<int64_t>(1, kCopyGrainBytes / std::max<int64_t>(1, rowOut)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        int64_t at = 0;
        for (size_t i = 0; i < k.numInputs(); ++i) {
          const NDArray& x = k.input(i);
          int64_t rowIn = x.dim(axis) * inner;
          if (rowIn) std::memcpy(dst + o * rowOut + at, static_cast<const std::byte*>(x.rawData()) + o * rowIn, static_cast<size_t>(rowIn));
          at += rowIn;
        }
      }
    });
  };
}

ops::KernelFn splitKernel(ops::CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", 0);
  int64_t numOutputs = c.node().attrInt("num_outputs", 0);
  std::string what = c.node().describe();
  return [=](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 1, "{}: input must have rank >= 1, got a scalar", what);
    int64_t axis = ops::normalizeAxis(axisAttr, x.rank(), what);
    int64_t dim = x.dim(axis);
    auto n = static_cast<int64_t>(k.numOutputs());
    std::vector<int64_t> sizes;
    if (k.hasInput(1) && k.input(1).numel() > 0) {
      sizes = ops::readIndexTensor(k.input(1), what, "split");
      GRAFT_CHECK(static_cast<int64_t>(sizes.size()) == n, "{}: split has {} entries for {} outputs", what, sizes.size(), n);
      int64_t sum = 0;
      for (int64_t s : sizes) {
        GRAFT_CHECK(s >= 0 && s <= dim, "{}: split entries must be in [0, {}], got {}", what, dim, s);
        sum += s;
      }
      GRAFT_CHECK(sum == dim, "{}: split sizes sum to {}, but axis {} has size {}", what, sum, axis, dim);
    } else {
      sizes = ops::splitEvenSizes(dim, n, numOutputs, what);
    }
    int64_t es = static_cast<int64_t>(dtypeSize(x.dtype()));
    int64_t outer = ops::shapeProduct(x.shape(), 0, axis), inner = ops::shapeProduct(x.shape(), axis + 1, x.rank()) * es;
    const auto* src = static_cast<const std::byte*>(x.rawData());
    const bool chunked = copyByChunks(k.pool(), outer, dim * inner);
    std::vector<CopySegment> segs;
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
      Shape os = x.shape();
      os[axis] = sizes[i];
      NDArray& y = k.allocOutputUninit(i, x.dtype(), os);
      auto* dst = static_cast<std::byte*>(y.rawData());
      int64_t row = sizes[i] * inner, start = at;
      if (chunked) {
        for (int64_t o = 0; o < outer; ++o) segs.push_back({dst + o * row, src + o * dim * inner + start, row});
      } else if (row)
        parallelRanges(k.pool(), outer, std::max<int64_t>(1, kCopyGrainBytes / row), [&](int64_t b, int64_t e) {
          for (int64_t o = b; o < e; ++o) std::memcpy(dst + o * row, src + o * dim * inner + start, static_cast<size_t>(row));
        });
      at += row;
    }
    if (chunked) copyChunked(k.pool(), segs);
  };
}

// ---- Slice, Expand ---------------------------------------------------------------------------

ops::KernelFn sliceKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    int64_t r = x.rank();
    std::vector<int64_t> starts = ops::readIndexTensor(k.input(1), what, "starts");
    std::vector<int64_t> ends = ops::readIndexTensor(k.input(2), what, "ends");
    std::vector<int64_t> axes(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
    if (k.hasInput(3)) axes = ops::readIndexTensor(k.input(3), what, "axes");
    std::vector<int64_t> steps(starts.size(), 1);
    if (k.hasInput(4)) steps = ops::readIndexTensor(k.input(4), what, "steps");
    GRAFT_CHECK(ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(),
                "{}: starts, ends, axes and steps must have the same length; got {}, {}, {}, {}", what, starts.size(),
                ends.size(), axes.size(), steps.size());
    axes = ops::normalizeAxes(axes, r, what);
    auto st = ops::stridesOf(x.shape());
    Shape os = x.shape();
    std::vector<int64_t> strides = st;
    int64_t base = 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i], dim = x.dim(a), step = steps[i];
      GRAFT_CHECK(step != 0, "{}: step for axis {} is 0", what, a);
      int64_t s = starts[i], e = ends[i], count = 0;
      if (dim > 0) {
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        if (step > 0) {
          s = std::clamp<int64_t>(s, 0, dim);
          e = std::clamp<int64_t>(e, 0, dim);
          count = e > s ? 1 + (e - s - 1) / step : 0;
        } else {
          s = std::clamp<int64_t>(s, 0, dim - 1);
          e = std::clamp<int64_t>(e, -1, dim - 1);
          uint64_t mag = static_cast<uint64_t>(-(step + 1)) + 1u;
          count = s > e ? 1 + static_cast<int64_t>(static_cast<uint64_t>(s - e - 1) / mag) : 0;
        }
      } else {
        s = 0;
      }
      os[a] = count;
      base += s * st[a];
      strides[a] = count > 1 ? st[a] * step : 0;
    }
    NDArray& y = k.allocOutputUninit(0, x.dtype(), os);
    stridedGather(k.pool(), x, base, strides, y);
  };
}

ops::KernelFn expandKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& s = k.input(1);
    GRAFT_CHECK(s.dtype() == DataType::Int64 && s.rank() <= 1, "{}: shape must be a 1-D INT64 tensor, got {} {}", what,
                dtypeName(s.dtype()), shapeToString(s.shape()));
    std::vector<int64_t> shape = ops::toInt64Vector(s);
    for (int64_t d : shape) GRAFT_CHECK(d >= 0, "{}: shape {} has a negative dimension", what, shapeToString(shape));
    Shape os = ops::broadcastShapes(x.shape(), shape, what);
    NDArray& y = k.allocOutputUninit(0, x.dtype(), os);
    stridedGather(k.pool(), x, 0, ops::broadcastStrides(x.shape(), os), y);
  };
}

// ---- Gather, GatherElements ------------------------------------------------------------------

ops::KernelFn gatherKernel(ops::CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", 0);
  std::string what = c.node().describe();
  return [=](ops::KernelContext& k) {
    const NDArray& data = k.input(0);
    const NDArray& ind = k.input(1);
    int64_t r = data.rank();
    GRAFT_CHECK(r >= 1, "{}: data must have rank >= 1, got a scalar", what);
    int64_t axis = ops::normalizeAxis(axisAttr, r, what);
    std::vector<int64_t> idx = ops::readIndexTensor(ind, what, "indices");
    int64_t s = data.dim(axis);
    for (int64_t& v : idx) v = ops::wrapIndex(v, s, what, "indices", axis);
    Shape os(data.shape().begin(), data.shape().begin() + axis);
    os.insert(os.end(), ind.shape().begin(), ind.shape().end());
    os.insert(os.end(), data.shape().begin() + axis + 1, data.shape().end());
    NDArray& y = k.allocOutputUninit(0, data.dtype(), os);
    if (y.numel() == 0) return;
    int64_t es = static_cast<int64_t>(dtypeSize(data.dtype()));
    int64_t outer = ops::shapeProduct(data.shape(), 0, axis), inner = ops::shapeProduct(data.shape(), axis + 1, r) * es;
    auto ni = static_cast<int64_t>(idx.size());
    const auto* src = static_cast<const std::byte*>(data.rawData());
    auto* dst = static_cast<std::byte*>(y.rawData());
    parallelRanges(k.pool(), outer * ni, std::max<int64_t>(1, kCopyGrainBytes / std::max<int64_t>(1, inner)), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t o = t / ni, j = t % ni;
        std::memcpy(dst + t * inner, src + (o * s + idx[j]) * inner, static_cast<size_t>(inner));
      }
    });
  };
}

ops::KernelFn gatherElementsKernel(ops::CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", 0);
  std::string what = c.node().describe();
  return [=](ops::KernelContext& k) {
    const NDArray& data = k.input(0);
    const NDArray& ind = k.input(1);
    GRAFT_CHECK(data.rank() >= 1, "{}: data must have rank >= 1, got a scalar", what);
    int64_t axis = ops::normalizeAxis(axisAttr, data.rank(), what);
    GRAFT_CHECK(ind.rank() == data.rank(), "{}: indices must have the rank of data ({}), got rank {}", what, data.rank(),
                ind.rank());
    for (int64_t d = 0; d < data.rank(); ++d)
      GRAFT_CHECK(d == axis || ind.dim(d) <= data.dim(d),
                  "{}: indices shape {} exceeds data shape {} on axis {} (only axis {} may differ)", what,
                  shapeToString(ind.shape()), shapeToString(data.shape()), d, axis);
    std::vector<int64_t> idx = ops::readIndexTensor(ind, what, "indices");
    int64_t s = data.dim(axis);
    for (int64_t& v : idx) v = ops::wrapIndex(v, s, what, "indices", axis);
    NDArray& y = k.allocOutputUninit(0, data.dtype(), ind.shape());
    if (y.numel() == 0) return;
    size_t es = dtypeSize(data.dtype());
    auto dataStrides = ops::stridesOf(data.shape());
    int64_t r = data.rank(), inner = ind.dim(r - 1);
    const auto* src = static_cast<const std::byte*>(data.rawData());
    auto* dst = static_cast<std::byte*>(y.rawData());
    int64_t rows = y.numel() / inner;
    parallelRanges(k.pool(), rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t b, int64_t e) {
      std::vector<int64_t> mi(static_cast<size_t>(r), 0);
      for (int64_t row = b; row < e; ++row) {
        int64_t rest = row, base = 0;
        for (int64_t d = r - 2; d >= 0; --d) {
          mi[d] = rest % ind.dim(d);
          rest /= ind.dim(d);
          if (d != axis) base += mi[d] * dataStrides[d];
        }
        for (int64_t j = 0; j < inner; ++j) {
          int64_t p = row * inner + j;
          int64_t off = base + (r - 1 == axis ? idx[p] : j) * dataStrides[r - 1];
          if (axis != r - 1) off += idx[p] * dataStrides[axis];
          std::memcpy(dst + p * static_cast<int64_t>(es), src + off * static_cast<int64_t>(es), es);
        }
      }
    });
  };
}

// ---- Tile, Pad -------------------------------------------------------------------------------

ops::KernelFn tileKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& rt = k.input(1);
    GRAFT_CHECK(rt.dtype() == DataType::Int64 && rt.rank() <= 1, "{}: repeats must be a 1-D INT64 tensor, got {} {}", what,
                dtypeName(rt.dtype()), shapeToString(rt.shape()));
    std::vector<int64_t> reps = ops::toInt64Vector(rt);
    GRAFT_CHECK(static_cast<int64_t>(reps.size()) == x.rank(), "{}: repeats has {} entries for an input of rank {}", what,
                reps.size(), x.rank());
    // Tile = Expand of x viewed as [1, d0, 1, d1, ...] to [r0, d0, r1, d1, ...], then a reshape.
    Shape view, big, os = x.shape();
    for (size_t d = 0; d < reps.size(); ++d) {
      GRAFT_CHECK(reps[d] >= 0, "{}: repeats must be >= 0, got {}", what, reps[d]);
      os[d] = ops::checkedMul(os[d], reps[d], what);
      view.insert(view.end(), {1, x.dim(static_cast<int64_t>(d))});
      big.insert(big.end(), {reps[d], x.dim(static_cast<int64_t>(d))});
    }
    NDArray& y = k.allocOutputUninit(0, x.dtype(), os);
    NDArray yb = y.reshaped(big);
    stridedGather(k.pool(), x, 0, ops::broadcastStrides(view, big), yb);
  };
}

ops::KernelFn padKernel(ops::CompileContext& c) {
  std::string what = c.node().describe();
  return [what](ops::KernelContext& k) {
    const NDArray& x = k.input(0);
    int64_t r = x.rank();
    const NDArray& pt = k.input(1);
    GRAFT_CHECK(pt.dtype() == DataType::Int64 && pt.rank() <= 1, "{}: pads must be a 1-D INT64 tensor, got {} {}", what,
                dtypeName(pt.dtype()), shapeToString(pt.shape()));
    std::vector<int64_t> pads = ops::toInt64Vector(pt);
    std::vector<int64_t> axes(static_cast<size_t>(r));
    std::iota(axes.begin(), axes.end(), 0);
    if (k.hasInput(3)) axes = ops::normalizeAxes(ops::readIndexTensor(k.input(3), what, "axes"), r, what);
    GRAFT_CHECK(pads.size() == 2 * axes.size(), "{}: pads has {} entries, expected {} (2 x {} axes)", what, pads.size(),
                2 * axes.size(), axes.size());
    size_t es = dtypeSize(x.dtype());
    std::vector<std::byte> fill(es, std::byte{0});
    if (k.hasInput(2) && k.input(2).numel() > 0) {
      const NDArray& cv = k.input(2);
      GRAFT_CHECK(cv.dtype() == x.dtype() && cv.numel() == 1, "{}: constant_value must be one {} element, got {} {}", what,
                  dtypeName(x.dtype()), dtypeName(cv.dtype()), shapeToString(cv.shape()));
      std::memcpy(fill.data(), cv.rawData(), es);
    }
    std::vector<int64_t> before(static_cast<size_t>(r), 0), after(static_cast<size_t>(r), 0);
    for (size_t i = 0; i < axes.size(); ++i) before[axes[i]] = pads[i], after[axes[i]] = pads[axes.size() + i];
    // Output = fill, then the (possibly cropped) input copied into its window.
    Shape os(static_cast<size_t>(r)), window(static_cast<size_t>(r));
    int64_t srcBase = 0, dstBase = 0;
    auto ist = ops::stridesOf(x.shape());
    for (int64_t d = 0; d < r; ++d) {
      int64_t kept = x.dim(d) + std::min<int64_t>(before[d], 0) + std::min<int64_t>(after[d], 0);
      GRAFT_CHECK(kept >= 0, "{}: pads {} and {} remove more than the {} elements of axis {}", what, before[d], after[d],
                  x.dim(d), d);
      os[d] = kept + std::max<int64_t>(before[d], 0) + std::max<int64_t>(after[d], 0);
      window[d] = kept;
      srcBase += std::max<int64_t>(-before[d], 0) * ist[d];
    }
    NDArray& y = k.allocOutputUninit(0, x.dtype(), os);
    if (y.numel() == 0) return;
    auto ost = ops::stridesOf(os);
    for (int64_t d = 0; d < r; ++d) dstBase += std::max<int64_t>(before[d], 0) * ost[d];
    auto* dst = static_cast<std::byte*>(y.rawData());
    bool zero = std::all_of(fill.begin(), fill.end(), [](std::byte b) { return b == std::byte{0}; });
    parallelRanges(k.pool(), y.numel(), kCopyGrainBytes / static_cast<int64_t>(es), [&](int64_t b, int64_t e) {
      if (zero) {
        std::memset(dst + b * static_cast<int64_t>(es), 0, static_cast<size_t>(e - b) * es);
      } else {
        for (int64_t i = b; i < e; ++i) std::memcpy(dst + i * static_cast<int64_t>(es), fill.data(), es);
      }
    });
    if (shapeNumel(window) == 0) return;
    // The window's rows are strided in the output: copy row by row.
    int64_t rowLen = window[r - 1], rows = shapeNumel(window) / std::max<int64_t>(1, rowLen);
    const auto* src = static_cast<const std::byte*>(x.rawData());
    parallelRanges(k.pool(), rows, std::max<int64_t>(1, kCopyGrainBytes / std::max<int64_t>(1, rowLen * static_cast<int64_t>(es))),
                   [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t rest = row, so = srcBase, dO = dstBase;
        for (int64_t d = r - 2; d >= 0; --d) {
          int64_t i = rest % window[d];
          rest /= window[d];
          so += i * ist[d];
          dO += i * ost[d];
        }
        std::memcpy(dst + dO * static_cast<int64_t>(es), src + so * static_cast<int64_t>(es), static_cast<size_t>(rowLen) * es);
      }
    });
  };
}

bool notString(const ir::Node& n) { return typeIn(n.input(0), kVecTypes); }

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_move) {
  r.add({"", "Transpose", "vec_transpose", notString, transposeKernel});
  r.add({"", "Concat", "vec_concat", notString, concatKernel});
  r.add({"", "Split", "vec_split", notString, splitKernel});
  r.add({"", "Slice", "vec_slice", notString, sliceKernel});
  r.add({"", "Expand", "vec_expand", notString, expandKernel});
  r.add({"", "Gather", "vec_gather", notString, gatherKernel});
  r.add({"", "GatherElements", "vec_gather_elements", notString, gatherElementsKernel});
  r.add({"", "Tile", "vec_tile", notString, tileKernel});
  r.add({"", "Pad", "vec_pad", [](const ir::Node& n) { return notString(n) && n.attrString("mode", "constant") == "constant"; },
         padKernel});
}

}  // namespace graft::backends::cpu
