#pragma once
// Counts of the layout conversions (oneDNN reorders) the cpu backend's kernels run: every
// reorder that goes through onednn::execute, whether a graph's ToBlocked/FromBlocked node, a
// kernel converting an activation at its node, or a weight being packed. `graft bench --profile`
// reads them per step (docs/cpu-backend.md: layouts). Process-wide, thread-safe; kept without
// oneDNN's headers so that tools can read them.
#include <cstdint>

namespace graft::backends::cpu {

struct ReorderStats {
  int64_t count = 0;   ///< reorders run
  int64_t bytes = 0;   ///< bytes they wrote (destination sizes)
  double seconds = 0;  ///< wall time spent in them (on the calling threads)
};

/// Totals since the start of the process or the last resetReorderStats().
ReorderStats reorderStats();
void resetReorderStats();
/// Called by onednn::execute for each reorder.
void addReorder(int64_t bytes, double seconds);

}  // namespace graft::backends::cpu
