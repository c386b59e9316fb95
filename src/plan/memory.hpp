#pragma once
// Static memory planning: liveness of every value over the schedule, then one arena in which
// each value with a statically known size gets an offset (best fit). Views (Reshape, Identity,
// ...) share their input's buffer, and ops with an in-place trait may write their output over an
// input that dies at that step. Values whose size is known only at run time, graph outputs and
// sequences live on the heap.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.hpp"

namespace graft::plan {

/// Where a value produced by a step lives at run time.
enum class Placement : uint8_t {
  Arena,    ///< its own region of the arena
  View,     ///< a view of another value's buffer (viewOfInput trait)
  InPlace,  ///< written over an input that dies at this step (inplaceInput trait)
  Heap,     ///< allocated when produced (see MemoryEntry::reason)
};
std::string_view placementName(Placement p);

/// One value produced by a step of the schedule.
struct MemoryEntry {
  const ir::Tensor* tensor = nullptr;
  Placement placement = Placement::Heap;
  /// The buffer (index into MemoryPlan::buffers) whose region holds the value; -1 when none.
  int buffer = -1;
  /// Bytes of the value's data (0 when not statically known).
  size_t bytes = 0;
  /// Steps (indices into the schedule) that produce it and read it last (inclusive).
  int firstStep = 0, lastStep = 0;
  /// View / InPlace: the value whose buffer it reuses.
  const ir::Tensor* aliasOf = nullptr;
  /// Heap: why it is not in the arena.
  std::string reason;
};

/// A region of the arena shared by a value and its views and in-place successors.
struct Buffer {
  int64_t offset = 0;
  size_t bytes = 0;  ///< rounded up to the alignment
  int firstStep = 0, lastStep = 0;
  int root = -1;  ///< entry that allocates it
};

struct MemoryPlanOptions {
  /// Let ops with the inplaceInput trait overwrite an input that dies at their step.
  bool inplace = true;
  /// Alignment of every region, in bytes (a power of two).
  size_t alignment = 64;
};

/// The plan of one graph (subgraphs are planned when they are compiled).
struct MemoryPlan {
  std::vector<MemoryEntry> entries;  ///< in schedule order of their producers
  std::vector<Buffer> buffers;
  /// Peak: bytes of the arena.
  size_t arenaBytes = 0;
  /// What the arena values would take if no region were reused.
  size_t unsharedBytes = 0;
  std::unordered_map<const ir::Tensor*, int> entryOf;

  const MemoryEntry* find(const ir::Tensor* t) const {
    auto it = entryOf.find(t);
    return it == entryOf.end() ? nullptr : &entries[it->second];
  }
  /// Throws graft::InternalError naming both values when two buffers live at the same step
  /// overlap in the arena, or a region leaves the arena.
  void verify() const;
  /// A printable summary: peak, counts by placement; with `perValue` one line per value.
  std::string summary(bool perValue) const;
};

/// Plans the values produced by `schedule` (every node of `g`, in execution order).
MemoryPlan planMemory(const ir::Graph& g, const std::vector<const ir::Node*>& schedule,
                      const MemoryPlanOptions& options = {});

}  // namespace graft::plan
