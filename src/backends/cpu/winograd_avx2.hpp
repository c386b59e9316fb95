#pragma once
// graft's own Winograd F(4x4, 3x3) convolution for AVX2 hosts (winograd_avx2.cpp): the rule for
// which convolutions take it, public for its tests and for docs/cpu-backend.md's table.
#include <cstdint>

#include "backends/cpu/onednn_common.hpp"

namespace graft::backends::cpu::winograd {

/// Whether a 3x3 stride-1 convolution of `inChannels` input channels and output dims `y`
/// ([N, M, OH, OW]) runs faster on winograd_avx2 than on oneDNN's direct AVX2 kernel (measured on
/// the AVX2 host class: docs/cpu-backend.md, "Winograd on AVX2").
bool winogradAvx2Gains(int64_t inChannels, const onednn::Dims& y);

}  // namespace graft::backends::cpu::winograd
