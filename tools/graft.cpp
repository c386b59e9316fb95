// The `graft` command: see docs/cli.md.
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return graft::tools::cliMain(args, std::cout, std::cerr);
}
