#pragma once
// `graft inspect --memory` / `--kernels`: compiles a model for the cpu device (inference, or a training step
// with --loss) and prints its static memory plan: the arena's peak, where every value lives
// (arena offset, view, in place or heap, with the reason) and its live range over the schedule.
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace graft::tools {

struct MemoryInspectOptions {
  bool memory = false;              ///< print the memory plan
  bool kernels = false;             ///< print the kernel of every compiled step
  std::string loss;                 ///< plan a training step (SGD) with this loss tensor
  std::vector<std::string> dims;    ///< "NAME=SIZE" for symbolic dimensions (default 1)
  bool perValue = true;             ///< one line per value
};

/// Adds --memory and --loss to the `inspect` subcommand (which has --dim already: the caller
/// copies its values into MemoryInspectOptions::dims).
void addMemoryOptions(CLI::App& inspect, MemoryInspectOptions& options);

/// Prints the memory plan of `model` (options.memory) and the kernel each compiled step runs
/// (options.kernels: node, op, kernel and oneDNN's implementation, as the backend chose them);
/// throws graft::Error for a bad model or option.
void printMemoryPlan(const std::string& model, const MemoryInspectOptions& options, std::ostream& out);

}  // namespace graft::tools
