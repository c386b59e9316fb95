#include "runtime/replica_exchange.hpp"

#include <chrono>
#include <cstring>

#include "support/check.hpp"

namespace graft {
namespace {

class Context : public ops::ReplicaContext {
 public:
  Context(ReplicaExchange& ex, int localIndex, int global, int replicas)
      : ex_(ex), local_(localIndex), global_(global), replicas_(replicas) {}
  int replicas() const override { return replicas_; }
  int replica() const override { return global_; }
  std::vector<NDArray> exchange(const std::string& key, const NDArray& mine) override {
    return ex_.exchange(local_, key, mine);
  }

 private:
  ReplicaExchange& ex_;
  int local_, global_, replicas_;
};

}  // namespace

ReplicaExchange::ReplicaExchange(int local, int offset, int global, std::shared_ptr<collectives::Communicator> comm,
                                 double timeoutSeconds)
    : local_(local), offset_(offset), global_(global), comm_(std::move(comm)), timeout_(timeoutSeconds) {
  for (int i = 0; i < local; ++i) contexts_.push_back(std::make_unique<Context>(*this, i, offset + i, global));
}

std::vector<NDArray> ReplicaExchange::exchange(int i, const std::string& key, const NDArray& mine) {
  GRAFT_CHECK(mine.dtype() != DataType::String, "collective op '{}': STRING tensors are not exchanged", key);
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t call = calls_[{i, key}]++;
  const std::string id = fmt::format("{}#{}", key, call);
  Slot& s = slots_[id];
  if (s.parts.empty()) s.parts.resize(local_);
  s.parts[i] = mine.clone();  // the caller may reuse its buffer once it has the result
  if (++s.arrived == local_) {
    // The last local replica: the others' parts are here; over MPI, every process's too.
    if (!comm_) {
      s.result = s.parts;
    } else {
      const size_t bytes = mine.nbytes();
      std::vector<uint8_t> packed(bytes * local_);
      for (int r = 0; r < local_; ++r) {
        GRAFT_CHECK(s.parts[r].nbytes() == bytes, "collective op '{}': local replica {} gave {} bytes, replica {} {}",
                    key, r, s.parts[r].nbytes(), i, bytes);
        if (bytes) std::memcpy(packed.data() + r * bytes, s.parts[r].rawData(), bytes);
      }
      std::vector<uint8_t> all;
      try {
        all = comm_->allgatherBytes(packed.data(), packed.size(), "collective op '" + key + "'");
      } catch (...) {
        aborted_ = true;
        cv_.notify_all();
        throw;
      }
      GRAFT_ASSERT(all.size() == bytes * static_cast<size_t>(global_), "collective op '{}': gathered {} bytes", key,
                   all.size());
      for (int g = 0; g < global_; ++g) {
        NDArray a(mine.dtype(), mine.shape());
        if (bytes) std::memcpy(a.rawData(), all.data() + g * bytes, bytes);
        s.result.push_back(std::move(a));
      }
    }
    s.done = true;
    cv_.notify_all();
  } else {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
    bool ok = cv_.wait_until(lock, deadline, [&] { return s.done || aborted_; });
    GRAFT_CHECK(!aborted_ || s.done, "collective op '{}' on replica {}: another replica failed during the step", key,
                offset_ + i);
    GRAFT_CHECK(ok,
                "collective op '{}' on replica {}: the other replicas did not reach it within {} s "
                "(SessionOptions.collectiveTimeoutSeconds)",
                key, offset_ + i, timeout_);
  }
  std::vector<NDArray> out = s.result;
  if (++s.taken == local_) slots_.erase(id);
  return out;
}

void ReplicaExchange::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void ReplicaExchange::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.clear();
  calls_.clear();
  aborted_ = false;
}

}  // namespace graft
