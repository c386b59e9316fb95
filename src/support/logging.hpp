#pragma once
// Minimal levelled logging to stderr. The level comes from GRAFT_LOG_LEVEL
// (trace, debug, info, warn, error, off); the default is warn.
#include <fmt/format.h>

#include <string_view>

namespace graft::support {

enum class LogLevel { Trace = 0, Debug, Info, Warn, Error, Off };

LogLevel logLevel();
void setLogLevel(LogLevel level);
void logMessage(LogLevel level, std::string_view msg);

template <class... A>
void log(LogLevel level, fmt::format_string<A...> f, A&&... a) {
  if (level >= logLevel()) logMessage(level, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace graft::support

#define GRAFT_LOG_DEBUG(...) ::graft::support::log(::graft::support::LogLevel::Debug, __VA_ARGS__)
#define GRAFT_LOG_INFO(...) ::graft::support::log(::graft::support::LogLevel::Info, __VA_ARGS__)
#define GRAFT_LOG_WARN(...) ::graft::support::log(::graft::support::LogLevel::Warn, __VA_ARGS__)
