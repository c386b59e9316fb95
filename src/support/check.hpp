#pragma once
// Error helpers used by every module: user errors throw graft::Error, broken invariants throw
// graft::InternalError. Both stay on in every build type.
#include <graft/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#define GRAFT_THROW(...) throw ::graft::Error(::fmt::format(__VA_ARGS__))

#define GRAFT_CHECK(cond, ...)                                  \
  do {                                                          \
    if (!(cond)) throw ::graft::Error(::fmt::format(__VA_ARGS__)); \
  } while (0)

#define GRAFT_ASSERT(cond, ...)                                                             \
  do {                                                                                      \
    if (!(cond))                                                                            \
      throw ::graft::InternalError(::fmt::format("{}:{}: assertion '{}' failed. ", __FILE__, \
                                                 __LINE__, #cond) +                         \
                                   ::graft::support::assertDetail(__VA_ARGS__));            \
  } while (0)

namespace graft::support {
inline std::string assertDetail() { return {}; }
template <class... A>
std::string assertDetail(fmt::format_string<A...> f, A&&... a) {
  return fmt::format(f, std::forward<A>(a)...);
}
}  // namespace graft::support
