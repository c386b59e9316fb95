#pragma once
// Running the `graft` command line in-process from the tools' tests.
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"

namespace graft::testing {

/// What one command line returned and printed.
struct Result {
  int code;
  std::string out, err;
};

/// Runs `graft ARGS...` through cliMain and captures its streams.
inline Result cli(std::vector<std::string> args) {
  args.insert(args.begin(), "graft");
  std::ostringstream out, err;
  int code = tools::cliMain(args, out, err);
  return {code, out.str(), err.str()};
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace graft::testing
