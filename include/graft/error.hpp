#pragma once
/// @file error.hpp  The exceptions graft throws: Error (the caller's mistake) and InternalError (graft's).
#include <stdexcept>
#include <string>

namespace graft {

/// The common base of the two: catch it only where both kinds are handled alike (a top-level
/// handler that reports and exits). Anything that expects a user error catches Error, so that an
/// internal bug never passes for one.
class Exception : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown for anything a user can get wrong: a model file, a shape, a dtype, a tensor name, an
/// option, an unsupported op. The message names the node or tensor and says expected vs got.
/// Python sees it as graft.Error.
class Error : public Exception {
 public:
  explicit Error(const std::string& what) : Exception(what) {}
};

/// Thrown when one of graft's own invariants is broken (a bug in graft, not in the caller's input).
/// It is not an Error: `catch (const Error&)` and `EXPECT_THROW(..., Error)` do not take it.
/// Python sees it as graft.InternalError.
class InternalError : public Exception {
 public:
  explicit InternalError(const std::string& what) : Exception("internal error: " + what) {}
};

}  // namespace graft
