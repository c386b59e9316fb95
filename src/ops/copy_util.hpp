#pragma once
// Type-agnostic element movement for data-movement ops (Gather, Slice, Pad, Tile, ...). Kernels
// work out *where* elements come from as int64 offsets; these helpers do the typed copying, for
// every element type including STRING, so each op needs no per-type template of its own.
#include <graft/ndarray.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace graft::ops {

/// Copies `n` consecutive elements: dst[dstOff + i] = src[srcOff + i]. Same dtype required.
void copyElements(const NDArray& src, int64_t srcOff, NDArray& dst, int64_t dstOff, int64_t n);

/// dst[i] = src[index[i]] for every i in [0, index.size()). Where index[i] < 0, dst[i] becomes
/// the single element of `fill` when given (padding, masking), else stays untouched. dst must
/// have at least index.size() elements; every index must be < src.numel().
void gatherFlat(const NDArray& src, const std::vector<int64_t>& index, NDArray& dst, const NDArray* fill = nullptr);

/// Copies blocks of `blockLen` elements: dst block i = src block at element offset srcStarts[i].
void gatherBlocks(const NDArray& src, const std::vector<int64_t>& srcStarts, int64_t blockLen, NDArray& dst);

/// Fills a new array of `shape` from `src` through a strided view: element at output multi-index
/// (i0, i1, ...) comes from src[base + sum(ik * strides[k])]. Strides may be 0 (broadcast) or
/// negative (reversal); the caller guarantees every reached offset lies inside src.
NDArray stridedCopy(const NDArray& src, int64_t base, const std::vector<int64_t>& strides, const Shape& shape);

/// a * b for non-negative sizes; throws graft::Error mentioning `what` on int64 overflow.
int64_t checkedMul(int64_t a, int64_t b, const std::string& what);

}  // namespace graft::ops
