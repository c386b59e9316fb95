// The all-reduce between the processes of one host through shared memory (runtime/local_reduce.cpp),
// with threads standing in for the processes and ordinary memory for the shared segments: the
// sums reach every segment, generation after generation, whatever order the buckets complete in;
// a process that never gets there makes the others fail within the timeout, naming the bucket.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "../unit_test_util.hpp"
#include "runtime/local_reduce.hpp"

using namespace graft;
using graft::testing::errorOf;

namespace {

// `size` segments of `bytes` each, in one zeroed allocation every "process" sees.
struct Memory {
  Memory(int size, size_t bytes) : size(size), bytes(bytes), data(new char[bytes * size]()) {}
  int size;
  size_t bytes;
  std::unique_ptr<char[]> data;
};

class Segments : public collectives::SharedSegments {
 public:
  Segments(std::shared_ptr<Memory> m, int rank) : m_(std::move(m)), rank_(rank) {}
  char* segment(int i) const override { return m_->data.get() + m_->bytes * i; }
  size_t bytes() const override { return m_->bytes; }
  int localRank() const override { return rank_; }
  int localSize() const override { return m_->size; }

 private:
  std::shared_ptr<Memory> m_;
  int rank_;
};

// Two float accumulators in bucket 0 (1000 and 37 elements: slices cut inside the first), a
// double one of 5 elements in bucket 1 (fewer elements than 16 per process: one process sums it).
struct Layout {
  size_t header = LocalReduce::headerBytes(4);
  size_t a = header, b = header + 4096, c = header + 8192;
  std::vector<LocalReduce::Bucket> buckets() const {
    return {{{a, 1000, DataType::Float}, {b, 37, DataType::Float}}, {{c, 5, DataType::Double}}};
  }
};

std::vector<std::unique_ptr<LocalReduce>> makeProcesses(int n, double timeout) {
  auto mem = std::make_shared<Memory>(n, 16384);
  std::vector<std::unique_ptr<LocalReduce>> out;
  Layout l;
  for (int r = 0; r < n; ++r) {
    out.push_back(std::make_unique<LocalReduce>(std::make_unique<Segments>(mem, r), 4, timeout));
    out.back()->setBuckets(l.buckets(), {"bucket 0 (w0, w1)", "bucket 1 (w2)"});
  }
  return out;
}

}  // namespace

TEST(LocalReduce, EveryProcessGetsTheSumOfEveryBucketInEveryGeneration) {
  const int n = 3;
  auto procs = makeProcesses(n, 30);
  Layout l;
  for (int gen = 1; gen <= 3; ++gen) {
    std::vector<std::thread> threads;
    std::vector<std::string> errors(n);
    threads.reserve(n);
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        LocalReduce& me = *procs[r];
        NDArray a = me.array(l.a, DataType::Float, {1000}), b = me.array(l.b, DataType::Float, {37});
        NDArray c = me.array(l.c, DataType::Double, {5});
        for (int i = 0; i < 1000; ++i) a.data<float>()[i] = static_cast<float>(r * 1000 + i + gen);
        for (int i = 0; i < 37; ++i) b.data<float>()[i] = static_cast<float>(-r - i * gen);
        for (int i = 0; i < 5; ++i) c.data<double>()[i] = 0.5 * r + i + gen;
        errors[r] = errorOf([&] {
          // The buckets complete in another order in each process, with progress in between.
          if (r % 2) {
            me.ready(1), me.progress(), me.ready(0);
          } else {
            me.ready(0), me.progress(), me.ready(1);
          }
          me.wait();
        });
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(errors[r], "") << "process " << r;
      LocalReduce& me = *procs[r];
      NDArray a = me.array(l.a, DataType::Float, {1000}), b = me.array(l.b, DataType::Float, {37});
      NDArray c = me.array(l.c, DataType::Double, {5});
      for (int i = 0; i < 1000; ++i)
        ASSERT_EQ(a.data<float>()[i], static_cast<float>((0 + 1000 + 2000) + 3 * (i + gen))) << r << " " << i;
      for (int i = 0; i < 37; ++i) ASSERT_EQ(b.data<float>()[i], static_cast<float>(-3 - 3 * i * gen)) << r << " " << i;
      for (int i = 0; i < 5; ++i) ASSERT_EQ(c.data<double>()[i], 1.5 + 3 * (i + gen)) << r << " " << i;
    }
  }
}

TEST(LocalReduce, AProcessThatNeverCompletesItsGradientsMakesTheOthersFailNamingIt) {
  auto procs = makeProcesses(2, 0.2);
  procs[1]->ready(1);  // process 1 never completes bucket 0
  procs[0]->ready(0);
  procs[0]->ready(1);
  std::string e = errorOf([&] { procs[0]->wait(); });
  EXPECT_NE(e.find("the all-reduce of bucket 0 (w0, w1) between the 2 processes of this host did not complete "
                   "within 0.2 s (SessionOptions.collectiveTimeoutSeconds): local process 1 did not complete its "
                   "gradients"),
            std::string::npos)
      << e;
  // The reduction is unusable afterwards, saying why.
  EXPECT_NE(errorOf([&] { procs[0]->wait(); }).find("failed earlier"), std::string::npos);
}

TEST(LocalReduce, AFailedStepIsDiscardedAndTheNextOneSumsAgain) {
  auto procs = makeProcesses(2, 30);
  Layout l;
  // Nothing made ready: discarding changes nothing.
  for (auto& p : procs) p->discard();
  // Both processes failed after bucket 1: each waits for the other's slice of it, then both go on.
  std::vector<std::thread> threads;
  threads.reserve(2);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      procs[r]->ready(1);
      procs[r]->discard();
    });
  for (auto& t : threads) t.join();
  threads.clear();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      NDArray c = procs[r]->array(l.c, DataType::Double, {5});
      for (int i = 0; i < 5; ++i) c.data<double>()[i] = r + 1;
      procs[r]->ready(0);
      procs[r]->ready(1);
      procs[r]->wait();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    NDArray c = procs[r]->array(l.c, DataType::Double, {5});
    for (int i = 0; i < 5; ++i) EXPECT_EQ(c.data<double>()[i], 3.0);
  }
}

TEST(LocalReduce, OffsetsOutsideThisProcessSegmentAreNotShared) {
  auto procs = makeProcesses(2, 1);
  Layout l;
  NDArray a = procs[1]->array(l.a, DataType::Float, {1000});
  EXPECT_EQ(procs[1]->offsetOf(a.rawData(), a.nbytes()), static_cast<int64_t>(l.a));
  EXPECT_EQ(procs[0]->offsetOf(a.rawData(), a.nbytes()), -1);  // process 1's segment
  NDArray own(DataType::Float, {4});
  EXPECT_EQ(procs[0]->offsetOf(own.rawData(), own.nbytes()), -1);
}
