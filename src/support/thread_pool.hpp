#pragma once
// The threads kernels use for data-parallel loops. Under spinning OpenMP waits (OpenMP's default)
// they are OpenMP's: oneDNN (the cpu backend's heavy kernels) runs on OpenMP too, so graft's own
// loops and oneDNN's primitives share one team of threads instead of two sets competing for the
// cores (a spinning idle OpenMP thread would steal a core from a separate pool's workers). Under
// passive waits (graft's default) every OpenMP region costs two wakes, so parallelFor runs on
// team() (support/spin_team.hpp), graft's own threads, which spin only briefly between jobs; the
// kernels that split their work themselves use team() directly.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

namespace graft::support {

class SpinTeam;

class ThreadPool {
 public:
  /// `numThreads` counts the calling thread: 1 means loops run on the caller only.
  explicit ThreadPool(int numThreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int numThreads() const { return threads_; }

  /// Splits [0, n) into contiguous chunks of at least `grain` items and runs fn(begin, end) on
  /// them, the calling thread included (on team() under passive OpenMP waits, in an OpenMP region
  /// otherwise); returns when all are done. A nested call from inside fn
  /// (or from inside any other parallel region) runs serially. Exceptions from fn are rethrown
  /// (the first one).
  void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  /// Runs fn(i) for every i in [0, tasks), the calling thread included, each task taken by the
  /// next thread that is free (a thread that starts late takes only what is left): on team() under
  /// passive OpenMP waits, in an OpenMP region otherwise; serially when nested (as parallelFor).
  /// Exceptions from fn are rethrown (the first one).
  void runTasks(int tasks, const std::function<void(int)>& fn);

  /// A team of numThreads() threads of graft's own, for kernels that split their work into
  /// tasks themselves (support/spin_team.hpp: no OpenMP region, so no wake under passive waits);
  /// its helpers start at the first call.
  SpinTeam& team();

  /// Number of threads of the machine (std::thread::hardware_concurrency, at least 1).
  static int hardwareThreads();

  /// Whether OpenMP's idle threads sleep at once (OMP_WAIT_POLICY=passive, GOMP_SPINCOUNT unset or
  /// 0): then a short job is cheaper on team() than in an OpenMP region. With spinning waits
  /// (OpenMP's default) an OpenMP region costs no wake, and libgomp's idle workers spin on the
  /// cores team() would need.
  static bool openMpWaitsPassively();

 private:
  int threads_;
  std::once_flag teamOnce_;
  std::unique_ptr<SpinTeam> team_;
};

}  // namespace graft::support
