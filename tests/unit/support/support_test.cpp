// support: the thread pool and the 16-bit float types.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "support/float16.hpp"
#include "support/thread_pool.hpp"

namespace graft {
namespace {

using support::ThreadPool;

TEST(ThreadPool, ParallelForCoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.numThreads(), threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 100, 10000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int64_t> calls{0};
        pool.parallelFor(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LE(0, b);
          ASSERT_LT(b, e);
          ASSERT_LE(e, n);
          ++calls;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
        // Chunks hold at least `grain` items (except the last), so there are at most ceil(n/grain).
        EXPECT_LE(calls.load(), n == 0 ? 0 : (n + grain - 1) / grain);
      }
    }
  }
}

TEST(ThreadPool, ExceptionsPropagateAndThePoolStaysUsable) {
  ThreadPool pool(4);
  EXPECT_THROW(pool.parallelFor(1000, 1,
                                [&](int64_t b, int64_t e) {
                                  if (b <= 500 && 500 < e) throw std::runtime_error("chunk failed");
                                }),
               std::runtime_error);
  try {
    pool.parallelFor(10, 1, [](int64_t, int64_t) { throw std::invalid_argument("every chunk"); });
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "every chunk");
  }
  std::atomic<int64_t> sum{0};
  pool.parallelFor(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, RunTasksRunsEveryTaskOnceAndRethrows) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int tasks : {0, 1, 2, 5, 64}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
      pool.runTasks(tasks, [&](int i) {
        ASSERT_LE(0, i);
        ASSERT_LT(i, tasks);
        hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1) << threads << " threads, " << tasks << " tasks";
    }
    EXPECT_THROW(pool.runTasks(8,
                               [](int i) {
                                 if (i == 5) throw std::runtime_error("task 5");
                               }),
                 std::runtime_error);
    std::atomic<int> after{0};
    pool.runTasks(4, [&](int) { ++after; });
    EXPECT_EQ(after.load(), 4);
  }
}

TEST(ThreadPool, NestedCallsRunSerially) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(100);
  pool.parallelFor(10, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallelFor(10, 1, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) hits[static_cast<size_t>(i * 10 + j)]++;
      });
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

float bitsToFloat(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

TEST(Half, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    auto bits = static_cast<uint16_t>(b);
    float f = Half::toFloat(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(Half(f)))) << b;
      continue;
    }
    EXPECT_EQ(Half::fromFloat(f), bits) << "bit pattern " << b << " (" << f << ")";
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(Half::fromFloat(1.0f), 0x3c00);
  EXPECT_EQ(Half::fromFloat(-2.0f), 0xc000);
  EXPECT_EQ(Half::fromFloat(65504.0f), 0x7bff);                 // largest finite
  EXPECT_EQ(Half::fromFloat(0x1p-24f), 0x0001);                 // smallest subnormal
  EXPECT_EQ(Half::fromFloat(0x1p-14f), 0x0400);                 // smallest normal
  EXPECT_EQ(Half::fromFloat(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(Half::fromFloat(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(Half::toFloat(Half::fromFloat(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Half, RoundsToNearestEven) {
  // Between 1 and the next half (1 + 2^-10): the midpoint rounds to even (1), above it rounds up.
  EXPECT_EQ(Half::fromFloat(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(Half::fromFloat(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  // From an odd mantissa the midpoint rounds up to the even neighbour.
  EXPECT_EQ(Half::fromFloat(1.0f + 0x1p-10f + 0x1p-11f), 0x3c02);
  // Overflow: 65520 is the midpoint between 65504 and 2^16 and rounds to infinity; below it stays finite.
  EXPECT_EQ(Half::fromFloat(65519.0f), 0x7bff);
  EXPECT_EQ(Half::fromFloat(65520.0f), 0x7c00);
  EXPECT_EQ(Half::fromFloat(1e10f), 0x7c00);
  // Underflow: half the smallest subnormal rounds to (even) zero, a bit more to the subnormal.
  EXPECT_EQ(Half::fromFloat(0x1p-25f), 0x0000);
  EXPECT_EQ(Half::fromFloat(0x1p-25f * 1.0001f), 0x0001);
  EXPECT_EQ(Half::fromFloat(3 * 0x1p-25f), 0x0002);  // 1.5 subnormal steps: ties to even (2)
}

TEST(BFloat16, RoundTripsAndRounding) {
  for (uint32_t b = 0; b < 65536; ++b) {
    auto bits = static_cast<uint16_t>(b);
    float f = BFloat16::toFloat(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BFloat16::toFloat(BFloat16::fromFloat(f)))) << b;
      continue;
    }
    EXPECT_EQ(BFloat16::fromFloat(f), bits) << b;
  }
  EXPECT_EQ(BFloat16::fromFloat(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16::fromFloat(bitsToFloat(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(BFloat16::fromFloat(bitsToFloat(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(BFloat16::fromFloat(bitsToFloat(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(BFloat16::fromFloat(bitsToFloat(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  // A NaN whose payload sits in the low bits only must stay NaN (not become infinity).
  EXPECT_TRUE(std::isnan(BFloat16::toFloat(BFloat16::fromFloat(bitsToFloat(0x7f800001u)))));
  EXPECT_EQ(static_cast<float>(BFloat16(3.0f)), 3.0f);
}

}  // namespace
}  // namespace graft
