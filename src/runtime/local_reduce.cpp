// The all-reduce of gradient buckets between the processes of one host (local_reduce.hpp).
#include "runtime/local_reduce.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "ops/dtype_dispatch.hpp"
#include "support/check.hpp"

namespace graft {
namespace {

// One flag per cache line: a process polls the others' flags while they write their own.
constexpr size_t kLine = 64;
constexpr int kReady = 0, kDone = 1;

// A slice boundary of a bucket of `total` elements split among `parts` processes, at a multiple
// of 16 elements (64 bytes of floats) so that two processes do not write one cache line.
int64_t boundary(int64_t total, int part, int parts) {
  if (part >= parts) return total;
  int64_t at = total * part / parts;
  return std::min(total, at / 16 * 16);
}

// sum = p[0] + p[1] + ... (in this order, in ComputeType), written to p[r] for every r in `to`.
template <class T>
void sumInto(const std::vector<T*>& p, const std::vector<int>& to, int64_t n) {
  using C = ops::ComputeType<T>;
  constexpr int64_t kChunk = 1024;
  C buf[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    const T* first = p[0] + i0;
    for (int64_t i = 0; i < m; ++i) buf[i] = static_cast<C>(first[i]);
    for (size_t r = 1; r < p.size(); ++r) {
      const T* q = p[r] + i0;
      for (int64_t i = 0; i < m; ++i) buf[i] += static_cast<C>(q[i]);
    }
    for (int r : to) {
      T* q = p[r] + i0;
      for (int64_t i = 0; i < m; ++i) q[i] = static_cast<T>(buf[i]);
    }
  }
}

}  // namespace

LocalReduce::LocalReduce(std::unique_ptr<collectives::SharedSegments> memory, size_t maxBuckets, double timeoutSeconds,
                         std::shared_ptr<collectives::Communicator> across)
    : memory_(std::move(memory)), across_(std::move(across)), maxBuckets_(maxBuckets), timeout_(timeoutSeconds) {
  GRAFT_ASSERT(memory_ && memory_->bytes() >= headerBytes(maxBuckets_),
               "shared memory of {} bytes for the flags of {} buckets", memory_ ? memory_->bytes() : 0, maxBuckets_);
}

size_t LocalReduce::headerBytes(size_t maxBuckets) { return 2 * kLine * maxBuckets; }

NDArray LocalReduce::array(size_t offset, DataType dtype, const Shape& shape) const {
  char* at = memory_->segment(localRank()) + offset;
  NDArray a = NDArray::wrap(at, dtype, shape, memory_);
  GRAFT_ASSERT(offset >= headerBytes(maxBuckets_) && offset + a.nbytes() <= memory_->bytes(),
               "an array of {} bytes at offset {} of a {}-byte shared segment", a.nbytes(), offset, memory_->bytes());
  return a;
}

int64_t LocalReduce::offsetOf(const void* p, size_t bytes) const {
  const char* base = memory_->segment(localRank());
  const char* c = static_cast<const char*>(p);
  if (c < base + headerBytes(maxBuckets_) || c + bytes > base + memory_->bytes()) return -1;
  return c - base;
}

void LocalReduce::setBuckets(std::vector<Bucket> buckets, std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(mu_);
  GRAFT_ASSERT(buckets.size() <= maxBuckets_ && names.size() == buckets.size(),
               "{} buckets ({} names) for shared flags of {}", buckets.size(), names.size(), maxBuckets_);
  GRAFT_ASSERT(std::none_of(mine_.begin(), mine_.end(), [](bool b) { return b; }),
               "the buckets of a reduction changed while it ran");
  buckets_ = std::move(buckets);
  names_ = std::move(names);
  mine_.assign(buckets_.size(), false);
  summed_.assign(buckets_.size(), false);
}

int64_t& LocalReduce::flag(int process, size_t b, int which) const {
  return *reinterpret_cast<int64_t*>(memory_->segment(process) + (2 * b + which) * kLine);
}

void LocalReduce::checkUsable() const {
  GRAFT_CHECK(!broken_,
              "the gradient all-reduce between the processes of this host failed earlier (a peer died or timed "
              "out); this process cannot take part in it any more");
}

bool LocalReduce::reached(int process, size_t b, int which) const {
  return std::atomic_ref<int64_t>(flag(process, b, which)).load(std::memory_order_acquire) >= generation_;
}

void LocalReduce::raise(size_t b, int which) {
  std::atomic_ref<int64_t>(flag(localRank(), b, which)).store(generation_, std::memory_order_release);
}

int LocalReduce::firstBehind(size_t b, int which) const {
  for (int r = 0; r < localSize(); ++r)
    if (!reached(r, b, which)) return r;
  return -1;
}

void LocalReduce::ready(size_t b) {
  std::lock_guard<std::mutex> lock(mu_);
  checkUsable();
  GRAFT_ASSERT(b < buckets_.size() && !mine_[b], "bucket {} made ready twice or out of range", b);
  mine_[b] = true;
  raise(b, kReady);  // what this process wrote into the bucket's accumulators goes with it
  progressLocked();
}

void LocalReduce::sumSlice(size_t b) {
  const Bucket& bucket = buckets_[b];
  int64_t total = 0;
  for (const Span& s : bucket) total += s.numel;
  const int64_t lo = boundary(total, localRank(), localSize()), hi = boundary(total, localRank() + 1, localSize());
  // Across hosts the host's sum stays in this process's segment until the hosts have summed it.
  std::vector<int> to;
  for (int r = 0; r < localSize(); ++r)
    if (!across_ || r == localRank()) to.push_back(r);
  int64_t base = 0;  // the bucket's element index where span s starts
  for (const Span& s : bucket) {
    const int64_t a = std::max(lo, base), e = std::min(hi, base + s.numel);
    if (a < e) {
      ops::dispatch<ops::kFloats>(s.dtype, "the all-reduce of " + names_[b], [&](auto tag) {
        using T = typename decltype(tag)::type;
        std::vector<T*> p(localSize());
        for (int r = 0; r < localSize(); ++r) p[r] = reinterpret_cast<T*>(memory_->segment(r) + s.offset) + (a - base);
        sumInto(p, to, e - a);
      });
      if (across_) {
        const size_t es = dtypeSize(s.dtype), offset = s.offset + static_cast<size_t>(a - base) * es;
        across_->startAllreduceSum(NDArray::wrap(memory_->segment(localRank()) + offset, s.dtype, {e - a}, memory_),
                                   names_[b]);
        crossed_.push_back({offset, static_cast<size_t>(e - a) * es});
      }
    }
    base += s.numel;
  }
}

void LocalReduce::progressLocked() {
  if (broken_) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (summed_[b] || !mine_[b] || firstBehind(b, kReady) >= 0) continue;
    sumSlice(b);
    summed_[b] = true;
    // (Across hosts the slice is done once the other hosts' sums are in: finishAcross.)
    if (!across_) raise(b, kDone);
  }
  if (across_) across_->progress();
}

void LocalReduce::progress() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) progressLocked();
}

void LocalReduce::finishAcross() {
  if (!across_) return;
  try {
    across_->waitAll();  // with its own timeout and error
  } catch (...) {
    broken_ = true;
    throw;
  }
  for (const Region& r : crossed_)
    for (int p = 0; p < localSize(); ++p)
      if (p != localRank())
        std::memcpy(memory_->segment(p) + r.offset, memory_->segment(localRank()) + r.offset, r.bytes);
  crossed_.clear();
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (summed_[b]) raise(b, kDone);
}

void LocalReduce::timedOut(size_t b) {
  broken_ = true;
  // The first process that has not completed its gradients, else the first that has not summed
  // its slice.
  const int notReady = firstBehind(b, kReady);
  const bool lateReady = notReady < 0;
  const int late = lateReady ? std::max(firstBehind(b, kDone), 0) : notReady;
  GRAFT_THROW(
      "the all-reduce of {} between the {} processes of this host did not complete within {} s "
      "(SessionOptions.collectiveTimeoutSeconds): local process {} {} (a peer process died, hangs, or runs "
      "a different number of steps)",
      names_[b], localSize(), timeout_, late, lateReady ? "did not sum its slice" : "did not complete its gradients");
}

void LocalReduce::waitFor(const std::vector<size_t>& buckets, int which) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_);
  for (size_t b : buckets) {
    for (;;) {
      progressLocked();
      if (firstBehind(b, which) < 0) break;
      if (std::chrono::steady_clock::now() > deadline) timedOut(b);
      // The same schedule as the MPI waits (collectives_mpi.cpp): a core's worth of polling for
      // the first 50 ms (yielding to any other thread), then a test per millisecond.
      if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(50))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  progressLocked();  // every bucket ready everywhere: this process's slices are summed now
}

void LocalReduce::wait() {
  std::lock_guard<std::mutex> lock(mu_);
  checkUsable();
  GRAFT_ASSERT(std::all_of(mine_.begin(), mine_.end(), [](bool b) { return b; }),
               "waiting for a reduction whose buckets are not all ready");
  std::vector<size_t> all(buckets_.size());
  for (size_t b = 0; b < all.size(); ++b) all[b] = b;
  complete(all);
}

void LocalReduce::complete(const std::vector<size_t>& buckets) {
  waitFor(buckets, kReady);
  finishAcross();
  waitFor(buckets, kDone);
  ++generation_;
  mine_.assign(buckets_.size(), false);
  summed_.assign(buckets_.size(), false);
}

void LocalReduce::discard() {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return;
  std::vector<size_t> made;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (mine_[b]) made.push_back(b);
  if (made.empty()) return;  // nobody reads this process's accumulators: the generation stays
  complete(made);
}

}  // namespace graft
