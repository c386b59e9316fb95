#pragma once
// Backends turn nodes into kernels. The reference backend runs every op's reference kernel (the
// golden model); the cpu backend uses fast kernels where it has them and the reference kernels
// elsewhere.
#include <memory>
#include <string>
#include <vector>

#include "passes/pass.hpp"
#include "plan/executable.hpp"

namespace graft::backends {

/// What a graph is compiled for: an inference step, or a training step (forward, backward and
/// optimizer graph, whose weights change every step).
enum class PassMode { Inference, Training };

class Backend : public plan::KernelProvider {
 public:
  /// Number of threads kernels may use.
  virtual int numThreads() const = 0;
  /// The passes (ids, in order) run on a graph before it is compiled for this backend. They begin
  /// with passes::commonPrefix(); a backend without passes of its own runs just that.
  virtual const std::vector<std::string>& passes(PassMode) const { return passes::commonPrefix(); }
};

/// The golden model: reference kernels only.
std::unique_ptr<Backend> makeReferenceBackend();
/// The fast CPU backend with `numThreads` threads (0: all cores). `bf16`: its matmuls and
/// convolutions compute in bf16 with float32 accumulation and outputs (SessionOptions.enableBf16;
/// the session checks that the CPU has avx512_bf16 first; backends/cpu/bf16.hpp).
std::unique_ptr<Backend> makeCpuBackend(int numThreads, bool bf16 = false);

}  // namespace graft::backends
