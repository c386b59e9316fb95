#include "support/spin_team.hpp"

#include <sched.h>

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GRAFT_SPIN_PAUSE() _mm_pause()
#else
#define GRAFT_SPIN_PAUSE() ((void)0)
#endif

namespace graft::support {
namespace {

thread_local bool inTask = false;

}  // namespace

SpinTeam::SpinTeam(int numThreads) {
  for (int i = 1; i < numThreads; ++i) helpers_.emplace_back([this] { helperLoop(); });
}

SpinTeam::~SpinTeam() {
  {
    std::lock_guard<std::mutex> lock(sleepMutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

// next_: the job's number (24 bits), its task count (20 bits) and the next unclaimed task (20 bits)
// in one word, so that a claim checks all three at once. A helper still in a finished job's loop
// finds every task of it claimed and cannot claim one of the next job.
constexpr int kTaskBits = 20;
constexpr uint64_t kTaskMask = (uint64_t{1} << kTaskBits) - 1;

uint64_t jobWord(uint32_t job, int tasks) {
  return (uint64_t{job & 0xffffff} << (2 * kTaskBits)) | (static_cast<uint64_t>(tasks) << kTaskBits);
}

void SpinTeam::work(uint32_t job) {
  const uint64_t tag = uint64_t{job & 0xffffff} << (2 * kTaskBits);
  int ran = 0;
  for (uint64_t v = next_.load(std::memory_order_acquire);;) {
    const uint64_t index = v & kTaskMask, tasks = (v >> kTaskBits) & kTaskMask;
    if ((v >> (2 * kTaskBits)) << (2 * kTaskBits) != tag || index >= tasks) break;
    if (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) continue;
    inTask = true;
    try {
      (*fn_)(static_cast<int>(index));
    } catch (...) {
      std::lock_guard<std::mutex> lock(errorMutex_);
      if (!error_) error_ = std::current_exception();
    }
    inTask = false;
    ++ran;
    v = next_.load(std::memory_order_acquire);
  }
  if (ran) done_.fetch_add(ran, std::memory_order_acq_rel);
}

void SpinTeam::helperLoop() {
  uint32_t seen = 0;
  for (;;) {
    // Spin for the next job for a while, then sleep until one comes.
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; job_.load() == seen && !stop_.load(std::memory_order_relaxed); ++i) {
      GRAFT_SPIN_PAUSE();
      if ((i & 63) == 63) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(kSpinMicros)) break;
        sched_yield();  // a runnable thread of another team (OpenMP's) gets the core
      }
    }
    if (job_.load() == seen && !stop_.load()) {
      sleepers_.fetch_add(1);
      {
        std::unique_lock<std::mutex> lock(sleepMutex_);
        wake_.wait(lock, [&] { return stop_.load() || job_.load() != seen; });
      }
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = job_.load(std::memory_order_acquire);
    work(seen);
  }
}

void SpinTeam::run(int tasks, const std::function<void(int)>& fn) {
  if (tasks <= 0) return;
  std::unique_lock<std::mutex> lock(runMutex_, std::defer_lock);
  if (helpers_.empty() || tasks == 1 || inTask || static_cast<uint64_t>(tasks) > kTaskMask || !lock.try_lock()) {
    for (int i = 0; i < tasks; ++i) fn(i);
    return;
  }
  fn_ = &fn;
  error_ = nullptr;
  done_.store(0);
  const uint32_t job = job_.load() + 1;
  next_.store(jobWord(job, tasks));
  job_.store(job);  // (sequentially consistent: a helper going to sleep sees it, or is counted below)
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> l(sleepMutex_); }
    wake_.notify_all();
  }
  work(job);
  for (int i = 0; done_.load(std::memory_order_acquire) < tasks; ++i) {
    GRAFT_SPIN_PAUSE();
    if ((i & 1023) == 1023) sched_yield();
  }
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace graft::support
