#pragma once
// A fixed pool of worker threads for data-parallel loops inside kernels.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace graft::support {

class ThreadPool {
 public:
  /// `numThreads` counts the calling thread: 1 means no workers are started.
  explicit ThreadPool(int numThreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int numThreads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Splits [0, n) into contiguous chunks of at least `grain` items and runs fn(begin, end) on
  /// them, the calling thread included; returns when all are done. Not re-entrant: a nested call
  /// from inside fn runs serially. Exceptions from fn are rethrown (the first one).
  void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  /// Number of threads of the machine (std::thread::hardware_concurrency, at least 1).
  static int hardwareThreads();

 private:
  void workerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, chunk_ = 0, numChunks_ = 0;
  int64_t nextChunk_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  bool busy_ = false;
  std::exception_ptr error_;
};

}  // namespace graft::support
