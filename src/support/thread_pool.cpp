#include "support/thread_pool.hpp"

#include <algorithm>

namespace graft::support {

ThreadPool::ThreadPool(int numThreads) {
  for (int i = 1; i < std::max(1, numThreads); ++i) workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::hardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

void ThreadPool::workerLoop(int) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || (generation_ != seen && nextChunk_ < numChunks_); });
    if (stop_) return;
    seen = generation_;
    while (nextChunk_ < numChunks_) {
      int64_t c = nextChunk_++;
      const auto* job = job_;
      lock.unlock();
      std::exception_ptr err;
      try {
        (*job)(c * chunk_, std::min(n_, (c + 1) * chunk_));
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

void ThreadPool::parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t maxChunks = std::min<int64_t>((n + grain - 1) / grain, numThreads());
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (maxChunks <= 1 || busy_) {
      lock.unlock();
      fn(0, n);
      return;
    }
    busy_ = true;
    job_ = &fn;
    n_ = n;
    numChunks_ = maxChunks;
    chunk_ = (n + maxChunks - 1) / maxChunks;
    numChunks_ = (n + chunk_ - 1) / chunk_;
    nextChunk_ = 0;
    pending_ = numChunks_;
    error_ = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  std::unique_lock<std::mutex> lock(mu_);
  while (nextChunk_ < numChunks_) {
    int64_t c = nextChunk_++;
    lock.unlock();
    std::exception_ptr err;
    try {
      fn(c * chunk_, std::min(n, (c + 1) * chunk_));
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    if (err && !error_) error_ = err;
    --pending_;
  }
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  busy_ = false;
  job_ = nullptr;
  auto err = error_;
  error_ = nullptr;
  lock.unlock();
  if (err) std::rethrow_exception(err);
}

}  // namespace graft::support
