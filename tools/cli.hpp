#pragma once
// The `graft` command line: subcommands inspect, run, train, bench and ops. The entry point takes its
// arguments and output streams as parameters so that tests can run it in-process.
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "progress.hpp"

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

/// Options of `graft train` (docs/cli.md).
struct TrainOptions {
  std::string model;
  std::vector<std::string> inputs;  ///< "name=file": training data of model inputs (.npy or IDX)
  std::vector<std::string> labels;  ///< "name=file": the target the loss compares the prediction with
  /// KIND[:TENSOR] (nll, softmax-ce, mse, l1; TENSOR: the prediction, default the model's only
  /// output), or the name of a scalar tensor of the model that is the loss.
  std::string loss;
  std::string optimizer = "sgd:lr=0.01,momentum=0.9";
  int64_t batchSize = 0;  ///< 0: the model's batch dimension when it is fixed, else 32
  int epochs = 1;
  int batchesPerStep = 1;
  std::vector<std::string> eval;  ///< "name=file": test data (inputs and label), evaluated after each epoch
  int64_t evalBatchSize = 0;      ///< 0: 256 (or the model's fixed batch dimension)
  std::string output;             ///< the trained model (the input model with trained weights)
  std::string device = "cpu";
  int threads = 0;
  uint64_t seed = 0;  ///< of the shuffling
  bool shuffle = true;
  bool profile = false;  ///< print the time per op type after training
  ProgressMode progress = ProgressMode::Lines;
};

/// Options of `graft bench`.
struct BenchOptions {
  std::string model;
  std::vector<std::string> inputs;  ///< "name=file.npy"; other inputs are random
  std::vector<std::string> dims;    ///< "symbol=value" for symbolic dimensions of random inputs
  int batchesPerStep = 1;
  std::string device = "cpu";
  int threads = 0;         ///< 0: the device's default
  bool exactThreads = false;  ///< SessionOptions.autoThreads off
  int warmup = 2;          ///< untimed steps after prepareDevice
  int steps = 20;          ///< timed steps (at least)
  double minSeconds = 0;   ///< keep timing steps until this much time has passed
  uint64_t seed = 0;
  bool profile = false;    ///< per-op-type times and the kernels used
  std::string dtype = "float32";  ///< "float32", or "bf16" (SessionOptions.enableBf16)
};

/// Prints the model summary; throws graft::Error when the model cannot be loaded.
void inspectCommand(const InspectOptions& options, std::ostream& out);
/// Runs the model and prints per-output summaries and timings; throws graft::Error on bad input.
void runCommand(const RunOptions& options, std::ostream& out);
/// Trains the model; the report goes to `out` and the progress bar to `progress`. Throws
/// graft::Error on bad options, data or models.
void trainCommand(const TrainOptions& options, std::ostream& out, std::ostream& progress);
/// Times inference steps of the model on random (or given) inputs; prints prepare, warm-up and
/// median step times and, with `profile`, per-op-type times and kernels.
void benchCommand(const BenchOptions& options, std::ostream& out);
/// Lists the registered ops by domain.
void opsCommand(std::ostream& out);

struct LaunchOptions {
  int numInstances = 1;
  int numReplicas = 0;  ///< all replicas, over all instances; 0: one per instance
  std::vector<std::string> hosts;
  std::string mpirun = "mpirun";
  std::vector<std::string> mpiArgs;
  double collectiveTimeout = 60;
  bool printOnly = false;
  std::vector<std::string> command;
};
/// The mpirun command line `graft launch` runs.
std::vector<std::string> launchArguments(const LaunchOptions& options);
/// Replaces this process with mpirun (printOnly: prints the command line instead).
int launchCommand(const LaunchOptions& options, std::ostream& out);

/// The whole command line: args[0] is the program name. Returns the exit code: 0 on success, 1
/// for a graft::Error (its message goes to `err`), 2 for a usage error, 3 for an internal error.
int cliMain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace graft::tools
