#pragma once
// Resource limits checked before anything is allocated or started: a thread count, a number of
// virtual devices or an allocation the machine cannot give is a user error naming the option,
// never a crash inside OpenMP or an out-of-memory kill.
#include <cstdint>
#include <string_view>

namespace graft::support {

/// The most threads one virtual device may run: 4 × the hardware threads (at least 16).
/// OpenMP runtimes crash rather than fail cleanly when thread creation fails.
int maxThreadsPerDevice();
/// The most virtual devices a device may have (a worker thread each): 16 × the hardware
/// threads, at least 64.
int maxVirtualDevices();
/// Throws graft::Error naming `option` when `threads` is negative or above maxThreadsPerDevice().
void checkThreadCount(std::string_view option, int64_t threads);
/// Throws graft::Error naming `option` when `count` is < 1 or above maxVirtualDevices(), or when
/// `count` × `threadsEach` threads exceed maxVirtualDevices() threads in all.
void checkVirtualDeviceCount(std::string_view option, int64_t count, int64_t threadsEach);

/// Bytes this process may still allocate: the smaller of the system's available memory
/// (MemAvailable) and what the address-space limit (RLIMIT_AS) leaves; INT64_MAX when unknown.
int64_t availableMemoryBytes();
/// Throws graft::Error "<what> needs N bytes, but only M are available" when `bytes` (INT64_MAX
/// for an overflowed size) exceeds availableMemoryBytes().
void checkAllocation(std::string_view what, int64_t bytes);
/// a × b, or INT64_MAX when it overflows (a, b >= 0).
int64_t saturatingMul(int64_t a, int64_t b);
/// a + b, or INT64_MAX when it overflows (a, b >= 0).
int64_t saturatingAdd(int64_t a, int64_t b);

}  // namespace graft::support
