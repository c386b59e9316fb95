#include "support/thread_pool.hpp"

#include "support/spin_team.hpp"

#include <omp.h>

#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

namespace graft::support {

ThreadPool::ThreadPool(int numThreads) : threads_(std::max(1, numThreads)) {}

ThreadPool::~ThreadPool() = default;

SpinTeam& ThreadPool::team() {
  std::call_once(teamOnce_, [this] { team_ = std::make_unique<SpinTeam>(threads_); });
  return *team_;
}

int ThreadPool::hardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

bool ThreadPool::openMpWaitsPassively() {
  // Read once, as libgomp reads them (at start-up).
  static const bool passive = [] {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    return policy && strcasecmp(policy, "passive") == 0 && (!spin || std::string(spin) == "0");
  }();
  return passive;
}

void ThreadPool::parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, threads_);
  if (chunks <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  int64_t chunk = (n + chunks - 1) / chunks;
  chunks = (n + chunk - 1) / chunk;
  runTasks(static_cast<int>(chunks), [&](int c) { fn(c * chunk, std::min(n, (c + 1) * chunk)); });
}

void ThreadPool::runTasks(int tasks, const std::function<void(int)>& fn) {
  if (tasks <= 0) return;
  if (tasks == 1 || threads_ == 1 || omp_in_parallel()) {
    for (int i = 0; i < tasks; ++i) fn(i);
    return;
  }
  if (openMpWaitsPassively()) {
    // graft's own team: no wake when its helpers are still spinning from the last job.
    team().run(tasks, fn);
    return;
  }
  std::exception_ptr error;
  std::mutex mu;
  // Exceptions must not leave an OpenMP region: the first is kept and rethrown after it.
#pragma omp parallel for num_threads(std::min(tasks, threads_)) schedule(dynamic, 1)
  for (int i = 0; i < tasks; ++i) {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace graft::support
