#include "support/limits.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

#include "support/check.hpp"
#include "support/thread_pool.hpp"

namespace graft::support {
namespace {
constexpr int64_t kUnknown = std::numeric_limits<int64_t>::max();

std::string bytesText(int64_t b) {
  if (b == kUnknown) return "more than 2^63";
  double v = static_cast<double>(b);
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} bytes", b) : fmt::format("{} bytes ({:.1f} {})", b, v, units[u]);
}

// Current virtual size of the process (VmSize), for what RLIMIT_AS still leaves.
int64_t virtualSizeBytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmSize:") {
      int64_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(f, rest);
  }
  return 0;
}
}  // namespace

int maxThreadsPerDevice() { return std::max(16, 4 * ThreadPool::hardwareThreads()); }
int maxVirtualDevices() { return std::max(64, 16 * ThreadPool::hardwareThreads()); }

void checkThreadCount(std::string_view option, int64_t threads) {
  GRAFT_CHECK(threads >= 0, "{} must be >= 0, got {}", option, threads);
  GRAFT_CHECK(threads <= maxThreadsPerDevice(),
              "{} = {} is more than the limit of {} threads (4 × the {} hardware threads of this machine, at least 16)",
              option, threads, maxThreadsPerDevice(), ThreadPool::hardwareThreads());
}

void checkVirtualDeviceCount(std::string_view option, int64_t count, int64_t threadsEach) {
  GRAFT_CHECK(count >= 1, "{} must be at least 1, got {}", option, count);
  int limit = maxVirtualDevices();
  GRAFT_CHECK(count <= limit,
              "{} = {} is more than the limit of {} virtual devices (each runs a thread; 16 × the {} hardware threads "
              "of this machine, at least 64)",
              option, count, limit, ThreadPool::hardwareThreads());
  GRAFT_CHECK(saturatingMul(count, std::max<int64_t>(1, threadsEach)) <= limit,
              "{} = {} virtual devices × {} threads each is more than the limit of {} threads in all", option, count,
              threadsEach, limit);
}

int64_t availableMemoryBytes() {
  int64_t avail = kUnknown;
  std::ifstream f("/proc/meminfo");
  std::string key;
  while (f >> key) {
    if (key == "MemAvailable:") {
      int64_t kb = 0;
      if (f >> kb) avail = kb * 1024;
      break;
    }
    std::string rest;
    std::getline(f, rest);
  }
  struct rlimit rl {};
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    int64_t cap = static_cast<int64_t>(std::min<rlim_t>(rl.rlim_cur, static_cast<rlim_t>(kUnknown)));
    avail = std::min(avail, std::max<int64_t>(0, cap - virtualSizeBytes()));
  }
  return avail;
}

void checkAllocation(std::string_view what, int64_t bytes) {
  if (bytes < 0) bytes = kUnknown;
  int64_t avail = availableMemoryBytes();
  GRAFT_CHECK(bytes <= avail || (avail == kUnknown && bytes != kUnknown), "{} needs {}, but only {} are available",
              what, bytesText(bytes), avail == kUnknown ? std::string("an unknown amount") : bytesText(avail));
}

int64_t saturatingMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return kUnknown;
  return r;
}

int64_t saturatingAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return kUnknown;
  return r;
}

}  // namespace graft::support
