#pragma once
// Reductions over any set of axes for the vectorised kernels (ReduceSum and friends,
// UnbroadcastTo, the gradient of broadcasting). Accumulation is in double, and each output
// element folds its inputs in one fixed order, so results do not depend on the thread count.
#include <vector>

#include "backends/cpu/vec_common.hpp"

namespace graft::backends::cpu {

enum class FoldKind { Sum, SumSquare, L1, Max, Min };

/// For each output element (the product of the kept axes, in row-major order), the fold of the
/// input elements over the reduced axes, in double. `reduced[d]` marks axis d. T is float or
/// double.
template <class T>
void reduceAxes(support::ThreadPool& pool, const T* in, const Shape& shape, const std::vector<bool>& reduced, FoldKind kind,
                double* out);

/// Number of input elements folded into each output element.
int64_t reducedCount(const Shape& shape, const std::vector<bool>& reduced);

}  // namespace graft::backends::cpu
