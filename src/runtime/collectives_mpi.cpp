// MPI's world as a Communicator. Every collective is non-blocking (MPI_Iallreduce, MPI_Ibcast,
// MPI_Iallgather) and polled with MPI_Testall until a deadline: a blocking call would wait forever
// for a peer that died, and MPI has no timeout of its own.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/collectives.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

#ifdef GRAFT_HAVE_MPI
// The C API only (OpenMPI would otherwise pull in its deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace graft::collectives {

#ifdef GRAFT_HAVE_MPI
namespace {

// Set when a collective failed: MPI_Finalize would then wait for the dead peer, so it is skipped.
bool gBroken = false;

void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !gBroken) MPI_Finalize();
}

std::string mpiError(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

class MpiWorld : public Communicator {
 public:
  MpiWorld() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      // Calls come from one thread at a time: every call holds mu_.
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      GRAFT_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed: {}", mpiError(rc));
      std::atexit(finalizeAtExit);
    }
    // Errors come back as codes (turned into graft::Error) instead of aborting the process.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    comm_ = MPI_COMM_WORLD;
    // The processes that share this host (and its memory): replicas pin their threads to cores
    // disjoint from the other local processes' (replication.cpp). A failure only costs the pinning.
    // They may also share memory (shareWithLocalProcesses).
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_) == MPI_SUCCESS &&
        node_ != MPI_COMM_NULL) {
      MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN);
      MPI_Comm_rank(node_, &localRank_);
      MPI_Comm_size(node_, &localSize_);
    } else {
      node_ = MPI_COMM_NULL;
    }
  }

  /// A sub-communicator of the world's (acrossHosts): no host split of its own.
  MpiWorld(MPI_Comm comm, double timeout, std::shared_ptr<std::recursive_mutex> mutex)
      : timeout_(timeout), mutex_(std::move(mutex)), comm_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return localRank_; }
  int localSize() const override { return localSize_; }
  void setTimeout(double seconds) override { timeout_ = seconds; }

  std::shared_ptr<Communicator> acrossHosts(const std::string& what) override {
    if (node_ == MPI_COMM_NULL) return nullptr;
    checkUsable(what);
    // MPI_Comm_split blocks until every process calls it: a barrier polled against the timeout
    // first, so that a dead peer makes this fail instead of hang.
    await([&](MPI_Request* req) { return MPI_Ibarrier(comm_, req); }, what + " (splitting the processes by host)");
    std::lock_guard<std::recursive_mutex> lock(mu_);
    MPI_Comm across = MPI_COMM_NULL;
    int rc = MPI_Comm_split(comm_, localRank_, rank_, &across);
    failIf(rc, what + " (splitting the processes by host)");
    return std::make_shared<MpiWorld>(across, timeout_, mutex_);
  }

  // A POSIX shared-memory object (in /dev/shm) that local process 0 creates and reserves
  // (posix_fallocate: a full /dev/shm fails here, not with SIGBUS at a later write), the others
  // open once its name has reached them, and process 0 unlinks once every one has it mapped. Not
  // an MPI-3 window (MPI_Win_allocate_shared): MPI_Win_free is collective, and a process whose
  // peer died would wait in it for ever.
  std::unique_ptr<SharedSegments> shareWithLocalProcesses(size_t bytes, const std::string& what) override {
    if (localSize_ <= 1 || node_ == MPI_COMM_NULL) return nullptr;
    checkUsable(what);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t seg = std::max<size_t>(page, (bytes + page - 1) / page * page);
    const size_t total = seg * static_cast<size_t>(localSize_);
    struct Offer {
      char name[64];
      char error[192];
      int ok;
    } offer{};
    int fd = -1;
    bool created = false;
    auto failed = [&](const char* step) {
      std::snprintf(offer.error, sizeof offer.error, "%s: %s", step, std::strerror(errno));
      offer.ok = 0;
    };
    if (localRank_ == 0) {
      static std::atomic<int> counter{0};
      std::snprintf(offer.name, sizeof offer.name, "/graft-%d-%d", static_cast<int>(getpid()), counter++);
      offer.ok = 1;
      fd = shm_open(offer.name, O_CREAT | O_EXCL | O_RDWR, 0600);
      created = fd >= 0;
      if (fd < 0) {
        failed("shm_open");
      } else if (int e = posix_fallocate(fd, 0, static_cast<off_t>(total)); e != 0) {
        errno = e;
        failed("posix_fallocate");
      }
    }
    // The name goes once every process has mapped the object (or failed, or timed out).
    struct Unlink {
      const char* name;
      const bool& created;
      ~Unlink() {
        if (created) shm_unlink(name);
      }
    } unlink{offer.name, created};
    const std::string sharing = what + " (sharing memory between the processes of this host)";
    await([&](MPI_Request* req) { return MPI_Ibcast(&offer, sizeof offer, MPI_BYTE, 0, node_, req); }, sharing);
    if (localRank_ != 0 && offer.ok) {
      fd = shm_open(offer.name, O_RDWR, 0600);
      if (fd < 0) failed("shm_open");
    }
    void* base = MAP_FAILED;
    if (offer.ok) {
      base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) failed("mmap");
    }
    if (fd >= 0) close(fd);
    std::vector<int> oks(localSize_);
    try {
      await([&](MPI_Request* req) { return MPI_Iallgather(&offer.ok, 1, MPI_INT, oks.data(), 1, MPI_INT, node_, req); },
            sharing);
    } catch (...) {
      if (base != MAP_FAILED) munmap(base, total);
      throw;
    }
    const auto missing = std::find(oks.begin(), oks.end(), 0) - oks.begin();
    if (missing < localSize_) {
      if (base != MAP_FAILED) munmap(base, total);
      GRAFT_LOG_WARN(
          "{}: the {} processes on this host could not share {} MB of memory (local process {}{}{}); they "
          "exchange it through MPI instead",
          what, localSize_, total >> 20, missing, offer.ok ? "" : ": ", offer.ok ? "" : offer.error);
      return nullptr;
    }
    return std::make_unique<Segments>(static_cast<char*>(base), seg, localRank_, localSize_);
  }

  void startAllreduceSum(NDArray a, const std::string& what) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    checkUsable(what);
    GRAFT_CHECK(a.dtype() == DataType::Float || a.dtype() == DataType::Double,
                "all-reduce of '{}': only float and double tensors are reduced, got {}", what, dtypeName(a.dtype()));
    GRAFT_CHECK(a.numel() <= INT_MAX, "all-reduce of '{}': {} elements is more than MPI's int count", what, a.numel());
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, a.rawData(), static_cast<int>(a.numel()),
                            a.dtype() == DataType::Float ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM, comm_, &req);
    failIf(rc, "all-reduce of '" + what + "'");
    pending_.push_back({req, std::move(a), what});
    testPending();  // the earlier buckets move on while the backward pass goes on
  }

  void progress() override {
    std::unique_lock<std::recursive_mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || gBroken) return;
    testPending();
  }

  void waitAll() override {
    std::unique_lock<std::recursive_mutex> lock(mu_);
    std::vector<MPI_Request> reqs;
    for (auto& p : pending_) reqs.push_back(p.req);
    std::string what = pending_.empty()
                           ? ""
                           : "all-reduce of '" + pending_.front().what + "'" +
                                 (pending_.size() > 1 ? fmt::format(" (and {} more)", pending_.size() - 1) : "");
    pending_.clear();
    lock.unlock();
    poll(reqs, what);
  }

  void broadcast(NDArray a, int root, const std::string& what) override {
    checkUsable(what);
    GRAFT_CHECK(a.nbytes() <= static_cast<size_t>(INT_MAX), "broadcast of '{}': {} bytes is more than MPI's int count",
                what, a.nbytes());
    await(
        [&](MPI_Request* req) {
          return MPI_Ibcast(a.rawData(), static_cast<int>(a.nbytes()), MPI_BYTE, root, comm_, req);
        },
        "broadcast of '" + what + "'");
  }

  std::vector<uint64_t> allgather(uint64_t value, const std::string& what) override {
    checkUsable(what);
    std::vector<uint64_t> all(size_);
    await(
        [&](MPI_Request* req) {
          return MPI_Iallgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_, req);
        },
        what);
    return all;
  }

  std::vector<uint8_t> allgatherBytes(const void* data, size_t bytes, const std::string& what) override {
    checkUsable(what);
    GRAFT_CHECK(bytes <= static_cast<size_t>(INT_MAX), "{}: {} bytes is more than MPI's int count", what, bytes);
    MPI_Comm ops = opsComm(what);
    std::vector<uint8_t> all(bytes * size_);
    await(
        [&](MPI_Request* req) {
          return MPI_Iallgather(data, static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes), MPI_BYTE,
                                ops, req);
        },
        what);
    return all;
  }

 private:
  class Segments : public SharedSegments {
   public:
    Segments(char* base, size_t seg, int rank, int size) : base_(base), seg_(seg), rank_(rank), size_(size) {}
    ~Segments() override { munmap(base_, seg_ * static_cast<size_t>(size_)); }
    Segments(const Segments&) = delete;
    Segments& operator=(const Segments&) = delete;
    char* segment(int i) const override { return base_ + seg_ * static_cast<size_t>(i); }
    size_t bytes() const override { return seg_; }
    int localRank() const override { return rank_; }
    int localSize() const override { return size_; }

   private:
    char* base_;
    size_t seg_;
    int rank_, size_;
  };

  struct Pending {
    MPI_Request req;
    NDArray keep;
    std::string what;
  };

  // OpenMPI moves a non-blocking collective on only inside MPI calls (it has no progress thread
  // by default): testing the started all-reduces advances them. A completed request becomes
  // MPI_REQUEST_NULL, which waitAll's MPI_Testall counts as done. The caller holds mu_.
  void testPending() {
    for (auto& p : pending_) {
      if (p.req == MPI_REQUEST_NULL) continue;
      int done = 0;
      int rc = MPI_Test(&p.req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) failIf(rc, "all-reduce of '" + p.what + "'");
    }
  }

  // The communicator of the in-graph collective ops, created on first use (every process reaches
  // its first collective op in the same order). A second thread that comes while the first is
  // creating it waits for it (creating): it never starts a second MPI_Comm_idup, nor reads a
  // handle MPI has not finished writing (the idup writes opsCommMade_, published when complete).
  MPI_Comm opsComm(const std::string& what) {
    std::lock_guard<std::mutex> creating(opsCommCreation_);  // taken before mu_, never inside it
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      if (opsComm_ != MPI_COMM_NULL) return opsComm_;
    }
    await([&](MPI_Request* req) { return MPI_Comm_idup(comm_, &opsCommMade_, req); },
          what + " (creating the collective ops' communicator)");
    std::lock_guard<std::recursive_mutex> lock(mu_);
    MPI_Comm_set_errhandler(opsCommMade_, MPI_ERRORS_RETURN);
    opsComm_ = opsCommMade_;
    return opsComm_;
  }

  // One non-blocking operation to its end: `start` (an MPI_I... call that fills the request and
  // returns MPI's code) under the lock, then polled against the timeout without it.
  template <class Start>
  void await(Start start, const std::string& what) {
    MPI_Request req;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      failIf(start(&req), what);
    }
    poll({req}, what);
  }

  void checkUsable(const std::string& what) const {
    GRAFT_CHECK(!gBroken,
                "{}: an earlier collective between the processes failed (a peer died or timed out); "
                "this process cannot take part in collectives any more",
                what);
  }

  void failIf(int rc, const std::string& what) {
    if (rc == MPI_SUCCESS) return;
    gBroken = true;
    GRAFT_THROW("{} failed on rank {} of {}: {} (did a peer process die?)", what, rank_, size_, mpiError(rc));
  }

  void poll(std::vector<MPI_Request> reqs, const std::string& what) {
    if (reqs.empty()) return;
    const auto start = std::chrono::steady_clock::now();
    auto deadline = start + std::chrono::duration<double>(timeout_);
    for (;;) {
      int done = 0;
      {
        std::lock_guard<std::recursive_mutex> lock(mu_);
        int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
        failIf(rc, what);
      }
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        gBroken = true;
        GRAFT_THROW(
            "{} on rank {} of {} did not complete within {} s (SessionOptions.collectiveTimeoutSeconds): a "
            "peer process died, hangs, or runs a different number of steps",
            what, rank_, size_, timeout_);
      }
      // OpenMPI moves a collective on only inside MPI calls, a shared-memory transfer a fragment
      // per call: sleeping between the tests stretches a 3 MB all-reduce from about 1 ms to 10.
      // So test without sleeping for the first 50 ms (yielding the core to any other thread that
      // wants it), then back off to a test per millisecond so that a long wait leaves the cores
      // to the others.
      if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(50))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  int rank_ = 0, size_ = 1;
  int localRank_ = 0, localSize_ = 1;
  double timeout_ = 60;
  std::vector<Pending> pending_;
  /// Serialises the MPI calls of all threads (MPI_THREAD_SERIALIZED); never held while waiting.
  /// (Shared with the communicators made from this one, acrossHosts: MPI_THREAD_SERIALIZED
  /// serialises the calls of the whole process, whichever communicator they are on.)
  std::shared_ptr<std::recursive_mutex> mutex_ = std::make_shared<std::recursive_mutex>();
  std::recursive_mutex& mu_ = *mutex_;
  MPI_Comm opsComm_ = MPI_COMM_NULL;      ///< see opsComm(); read and written under mu_
  MPI_Comm opsCommMade_ = MPI_COMM_NULL;  ///< what MPI_Comm_idup writes, until it completes
  std::mutex opsCommCreation_;
  MPI_Comm node_ = MPI_COMM_NULL;  ///< the processes of this host
  MPI_Comm comm_ = MPI_COMM_NULL;  ///< all of them (the world), or those of acrossHosts()
};

}  // namespace

bool mpiAvailable() { return true; }

std::shared_ptr<Communicator> mpiWorld() {
  static std::mutex mu;
  static std::shared_ptr<Communicator> world;
  std::lock_guard<std::mutex> lock(mu);
  if (!world) world = std::make_shared<MpiWorld>();
  return world;
}

#else

bool mpiAvailable() { return false; }

std::shared_ptr<Communicator> mpiWorld() {
  GRAFT_THROW(
      "SessionOptions.enableDistributedReplicatedGraphs needs MPI, and this graft was built without it "
      "(install libopenmpi-dev, see scripts/setup.sh, and reconfigure)");
}

#endif

}  // namespace graft::collectives
