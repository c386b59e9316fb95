#pragma once
// The process-wide seed of graft's random ops (PopART's session.setRandomSeed).
#include <cstdint>

namespace graft::ops {

/// From now on every random op without a `seed` attribute draws from a generator seeded from
/// `seed` and the op's identity (its type and first output), restarted at its next execution:
/// the same seed gives the same values in every session and at every thread count. Ops with a
/// `seed` attribute keep theirs.
void setRandomSeed(uint64_t seed);
/// The last seed given to setRandomSeed (0 before any).
uint64_t randomSeed();

}  // namespace graft::ops
