#pragma once
// graft's own bf16 Winograd F(2x2, 3x3) convolution for bf16 sessions (winograd_bf16.cpp): the
// rule for which convolutions take it, public for its tests and for docs/cpu-backend.md's table.
#include <cstdint>

#include "backends/cpu/onednn_common.hpp"

namespace graft::backends::cpu::winograd {

/// Whether a 3x3 stride-1 convolution of `inChannels` input channels and output dims `y`
/// ([N, M, OH, OW]) runs faster on winograd_bf16 than on oneDNN's direct bf16 kernel on a host of
/// this class (measured on the half-rate AVX-512 class: docs/cpu-backend.md, "bf16 Winograd").
bool winogradBf16Gains(int64_t inChannels, const onednn::Dims& y, bool avx512HalfRate);

}  // namespace graft::backends::cpu::winograd
