#include "support/logging.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>

namespace graft::support {
namespace {
LogLevel initialLevel() {
  const char* env = std::getenv("GRAFT_LOG_LEVEL");
  if (!env) return LogLevel::Warn;
  const std::string_view names[] = {"trace", "debug", "info", "warn", "error", "off"};
  for (int i = 0; i < 6; ++i)
    if (names[i] == env) return static_cast<LogLevel>(i);
  return LogLevel::Warn;
}
std::atomic<LogLevel>& level() {
  static std::atomic<LogLevel> l{initialLevel()};
  return l;
}
}  // namespace

LogLevel logLevel() { return level().load(std::memory_order_relaxed); }
void setLogLevel(LogLevel l) { level().store(l); }

void logMessage(LogLevel l, std::string_view msg) {
  static std::mutex mu;
  static const char* tags[] = {"trace", "debug", "info", "warning", "error", ""};
  std::lock_guard<std::mutex> lock(mu);
  std::cerr << "graft " << tags[static_cast<int>(l)] << ": " << msg << "\n";
}

}  // namespace graft::support
