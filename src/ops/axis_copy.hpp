#pragma once
// Copies along one axis shared by the sequence and control-flow ops: slicing a tensor into parts
// (SplitToSequence, Scan inputs), and joining parts back (ConcatFromSequence, Loop and Scan
// outputs). Every function works for every element type, strings included.
#include <graft/ndarray.hpp>

#include <string>
#include <vector>

namespace graft::ops {

/// x[..., begin:begin+len, ...] along `axis` (already normalised into [0, rank)). Slices of the
/// leading axis are views of x's buffer; others are copies. Bounds are the caller's to check.
NDArray sliceAxis(const NDArray& x, int64_t axis, int64_t begin, int64_t len);

/// x[..., index, ...]: the slice at `index` of `axis`, with that axis removed.
NDArray takeAxis(const NDArray& x, int64_t axis, int64_t index);

/// Concatenates `parts` along `axis` (normalised into [0, rank)). The parts must share dtype and
/// rank and agree outside `axis`; otherwise throws graft::Error naming `what`. Needs >= 1 part.
NDArray concatAxis(const std::vector<NDArray>& parts, int64_t axis, const std::string& what);

/// Stacks equally shaped `parts` along a new axis inserted at `axis` (normalised into
/// [0, rank + 1)); `reverse` stacks the last part first. Throws graft::Error naming `what` when
/// dtypes or shapes differ. Needs >= 1 part.
NDArray stackAxis(const std::vector<NDArray>& parts, int64_t axis, bool reverse, const std::string& what);

}  // namespace graft::ops
