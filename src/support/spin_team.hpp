#pragma once
// A team of threads for short jobs that follow one another closely (the split convolutions of a
// batch-1 inference step): the caller and numThreads - 1 helpers claim a job's tasks one at a
// time, so a helper that wakes late only takes what is left, and the caller never sleeps while a
// job runs (it spins until the last task is done). Between jobs a helper spins for a while
// (kSpinMicros) before it sleeps, so a step's next job finds it awake.
//
// Why not OpenMP: under OMP_WAIT_POLICY=passive (graft's default) every libgomp region wakes its
// sleeping workers and, when the caller finishes its static share first, sleeps until the last
// worker wakes it again: two wakes per region, 50-80 us each on the 2-vCPU VMs graft is measured on
// (a 17 us depthwise convolution took 76 us on two threads). Spinning waits (OpenMP's default)
// avoid it but burn the cores whenever a session runs. This team spins only for a short while
// after each job, and only the threads that have work coming.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace graft::support {

class SpinTeam {
 public:
  /// How long an idle helper spins for the next job before it sleeps.
  static constexpr int kSpinMicros = 100;

  /// `numThreads` counts the calling thread: 1 means jobs run on the caller only.
  explicit SpinTeam(int numThreads);
  ~SpinTeam();
  SpinTeam(const SpinTeam&) = delete;
  SpinTeam& operator=(const SpinTeam&) = delete;

  int numThreads() const { return static_cast<int>(helpers_.size()) + 1; }

  /// Runs fn(i) for every i in [0, tasks), on the calling thread and the helpers; returns when all
  /// are done. Runs them serially on the caller when the team has no helpers, when called from
  /// inside a task, or while another thread's job is running. The first exception a task throws
  /// is rethrown once the job is over.
  void run(int tasks, const std::function<void(int)>& fn);

 private:
  void helperLoop();
  /// Claims and runs tasks of job `job` until none is left.
  void work(uint32_t job);

  std::vector<std::thread> helpers_;
  std::mutex runMutex_;  // one job at a time
  std::mutex sleepMutex_;
  std::condition_variable wake_;
  std::atomic<uint32_t> job_{0};
  /// The current job's number, task count and next unclaimed task (spin_team.cpp, jobWord).
  std::atomic<uint64_t> next_{0};
  std::atomic<int> done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int)>* fn_ = nullptr;
  std::mutex errorMutex_;
  std::exception_ptr error_;
};

}  // namespace graft::support
