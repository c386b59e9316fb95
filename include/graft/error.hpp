#pragma once
/// @file error.hpp  The one exception type users catch.
#include <stdexcept>
#include <string>

namespace graft {

/// Thrown for anything a user can get wrong: a model file, a shape, a dtype, a tensor name, an
/// option, an unsupported op. The message names the node or tensor and says expected vs got.
/// Python sees it as graft.Error.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// Thrown when one of graft's own invariants is broken (a bug in graft, not in the caller's input).
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& what) : Error("internal error: " + what) {}
};

}  // namespace graft
