#pragma once
// The `graft` command line: subcommands inspect, run and ops. The entry point takes its
// arguments and output streams as parameters so that tests can run it in-process.
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace graft::tools {

/// Options of `graft inspect`.
struct InspectOptions {
  std::string model;
  bool graph = false;  ///< also print the IR (ir::printGraph)
  /// Also print the split over virtual devices (ops, parameters, FLOPs, memory per stage): the
  /// model's own annotations (Manual mode) or, without any, graft's Auto split.
  bool stages = false;
  int virtualDevices = 0;          ///< 0: the annotations' count, or 2 for Auto
  std::vector<std::string> dims;   ///< "symbol=value" for symbolic input dimensions (default 1)
};

/// Options of `graft run`.
struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;  ///< "name=file.npy"
  std::vector<std::string> dims;    ///< "symbol=value" for symbolic dimensions of random inputs
  int batchesPerStep = 1;
  std::string outputDir;  ///< empty: no files written
  std::string device = "cpu";
  int threads = 0;  ///< 0: the device's default
  int steps = 10;   ///< timed steps after one warm-up step
  uint64_t seed = 0;
  int show = 6;  ///< values printed per output
};

/// Parses --dim NAME=SIZE arguments; throws graft::Error on a malformed or repeated one.
std::map<std::string, int64_t> parseDims(const std::vector<std::string>& args);
/// Prints the model summary; throws graft::Error when the model cannot be loaded.
void inspectCommand(const InspectOptions& options, std::ostream& out);
/// Runs the model and prints per-output summaries and timings; throws graft::Error on bad input.
void runCommand(const RunOptions& options, std::ostream& out);
/// Lists the registered ops by domain.
void opsCommand(std::ostream& out);

/// The whole command line: args[0] is the program name. Returns the exit code: 0 on success, 1
/// for a graft::Error (its message goes to `err`), 2 for a usage error, 3 for an internal error.
int cliMain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace graft::tools
