#pragma once
// Backends turn nodes into kernels. The reference backend runs every op's reference kernel (the
// golden model); the cpu backend uses fast kernels where it has them and the reference kernels
// elsewhere.
#include <memory>
#include <string>

#include "plan/executable.hpp"

namespace graft::backends {

class Backend : public plan::KernelProvider {
 public:
  /// Number of threads kernels may use.
  virtual int numThreads() const = 0;
};

/// The golden model: reference kernels only.
std::unique_ptr<Backend> makeReferenceBackend();
/// The fast CPU backend with `numThreads` threads (0: all cores).
std::unique_ptr<Backend> makeCpuBackend(int numThreads);

}  // namespace graft::backends
