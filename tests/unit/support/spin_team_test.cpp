// support::SpinTeam: every task of every job runs exactly once, whichever thread claims it; a
// task's exception reaches the caller; nested and concurrent jobs run serially on their caller.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "support/spin_team.hpp"
#include "support/thread_pool.hpp"

namespace graft::support {
namespace {

TEST(SpinTeam, EveryTaskOfEveryJobRunsOnce) {
  SpinTeam team(3);
  EXPECT_EQ(team.numThreads(), 3);
  std::set<std::thread::id> threads;
  std::mutex mu;
  for (int job = 0; job < 2000; ++job) {
    const int tasks = 1 + job % 7;
    std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
    // Every 100th job waits long enough for the helpers to have gone to sleep.
    if (job % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(SpinTeam::kSpinMicros * 3));
    team.run(tasks, [&](int i) {
      runs[static_cast<size_t>(i)].fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    });
    for (int i = 0; i < tasks; ++i) ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1) << "job " << job << " task " << i;
  }
  // The helpers took some of them. On a loaded VM (steal time) they may not have been scheduled
  // during the short jobs: then jobs of tasks that take a millisecond each give them the time.
  for (int job = 0; job < 200 && threads.size() < 2; ++job)
    team.run(6, [&](int) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    });
  EXPECT_GE(threads.size(), 2u);
}

TEST(SpinTeam, ATasksExceptionReachesTheCallerAfterTheJob) {
  SpinTeam team(2);
  std::atomic<int> ran{0};
  try {
    team.run(6, [&](int i) {
      ran.fetch_add(1);
      if (i == 3) throw std::runtime_error("task 3 failed");
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "task 3 failed");
  }
  EXPECT_EQ(ran.load(), 6);
  // The team works on afterwards.
  std::atomic<int> again{0};
  team.run(4, [&](int) { again.fetch_add(1); });
  EXPECT_EQ(again.load(), 4);
}

TEST(SpinTeam, NestedAndConcurrentJobsRunSeriallyOnTheirCaller) {
  SpinTeam team(2);
  std::atomic<int> inner{0};
  team.run(2, [&](int) {
    const auto self = std::this_thread::get_id();
    team.run(3, [&](int) {
      EXPECT_EQ(std::this_thread::get_id(), self);
      inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), 6);
  // Two callers at once: each job completes (one of them may run serially).
  std::atomic<int> total{0};
  auto caller = [&] {
    for (int j = 0; j < 500; ++j) team.run(4, [&](int) { total.fetch_add(1); });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 4000);
}

TEST(SpinTeam, APoolsTeamHasItsThreads) {
  ThreadPool one(1), two(2);
  EXPECT_EQ(one.team().numThreads(), 1);
  EXPECT_EQ(two.team().numThreads(), 2);
  std::atomic<int> n{0};
  one.team().run(5, [&](int) { n.fetch_add(1); });
  EXPECT_EQ(n.load(), 5);
}

}  // namespace
}  // namespace graft::support
