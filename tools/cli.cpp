#include "cli.hpp"
#include "inspect_memory.hpp"

#include <fmt/format.h>
#include <graft/error.hpp>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <new>

#include "ops/registry.hpp"

namespace graft {
const char* versionString();  // support/version.cpp
}

namespace graft::tools {

void opsCommand(std::ostream& out) {
  std::map<std::string, std::vector<std::string>> byDomain;
  for (const ops::OpDef* d : ops::Registry::instance().all()) byDomain[d->domain].push_back(d->type);
  for (const auto& [domain, types] : byDomain) {
    out << (domain.empty() ? "ai.onnx" : domain) << " (" << types.size() << " op" << (types.size() == 1 ? "" : "s")
        << ")\n";
    size_t column = 1;
    out << ' ';
    for (const auto& t : types) {
      if (column + 1 + t.size() > 100) {
        out << "\n ";
        column = 1;
      }
      out << ' ' << t;
      column += 1 + t.size();
    }
    out << "\n";
  }
}

namespace {

// CLI11's PositiveNumber and NonNegativeNumber print their range as two 300-digit numbers; these
// say what the option needs in words, and refuse what is not a number at all.
CLI::Validator integerAtLeast(int64_t lo) {
  return CLI::Validator(
      [lo](std::string& text) -> std::string {
        int64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc::result_out_of_range ||
            (ec == std::errc() && end == text.data() + text.size() && v > std::numeric_limits<int>::max()))
          return fmt::format("'{}' is too large (at most {})", text, std::numeric_limits<int>::max());
        if (ec != std::errc() || end != text.data() + text.size())
          return fmt::format("expected an integer >= {}, got '{}'", lo, text);
        if (v < lo) return fmt::format("must be at least {}, got {}", lo, v);
        return {};
      },
      lo == 0 ? "INT >= 0" : fmt::format("INT >= {}", lo));
}

CLI::Validator nonNegativeReal() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
          return fmt::format("expected a number >= 0, got '{}'", text);
        if (v < 0) return fmt::format("must be >= 0, got {}", text);
        return {};
      },
      "NUMBER >= 0");
}

}  // namespace

int cliMain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"graft: compile, run and train ONNX models on CPUs", "graft"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(versionString()));

  InspectOptions io;
  auto* inspect = app.add_subcommand("inspect", "Print a model's inputs, outputs, opsets, ops, parameters and the ops "
                                                "graft does not support");
  inspect->add_option("model", io.model, "ONNX model file")->required();
  inspect->add_flag("--graph", io.graph, "Also print the imported graph (graft IR)");
  inspect->add_flag("--stages", io.stages, "Also print the split over virtual devices: the model's annotations "
                                           "(__ipu_number, __pipeline_stage) or, without any, graft's Auto split");
  inspect
      ->add_option("--virtual-devices", io.virtualDevices, "Virtual devices for --stages (default: as annotated, or 2)")
      ->check(integerAtLeast(1));
  inspect->add_option("--dim", io.dims, "Size of a symbolic input dimension for --stages and --memory (repeatable; default 1)")
      ->type_name("NAME=SIZE");
  MemoryInspectOptions mo;
  addMemoryOptions(*inspect, mo);

  RunOptions ro;
  auto* run = app.add_subcommand("run", "Run a model on given or random inputs; print the outputs and the time per step");
  run->add_option("model", ro.model, "ONNX model file")->required();
  run->add_option("--input,-i", ro.inputs, "Input from a .npy file (repeatable); other inputs are random")
      ->type_name("NAME=FILE.npy");
  run->add_option("--dim", ro.dims, "Size of a symbolic dimension for random inputs (repeatable; default 1)")
      ->type_name("NAME=SIZE");
  run->add_option("--batches-per-step", ro.batchesPerStep, "Batches per step (DataFlow batchesPerStep)")
      ->check(integerAtLeast(1));
  run->add_option("--output-dir,-o", ro.outputDir, "Write every output to DIR/<name>.npy")->type_name("DIR");
  run->add_option("--device", ro.device, "cpu (fast kernels) or reference (golden model)")
      ->check(CLI::IsMember({"cpu", "reference"}));
  run->add_option("--threads", ro.threads, "Kernel threads (0: all cores)")->check(integerAtLeast(0));
  run->add_option("--steps", ro.steps, "Timed steps after one warm-up step (the median is reported)")
      ->check(integerAtLeast(1));
  run->add_option("--seed", ro.seed, "Seed of the random inputs");
  run->add_option("--show", ro.show, "Values printed per output")->check(integerAtLeast(0));

  TrainOptions to;
  std::string progressMode = "auto";
  auto* train = app.add_subcommand("train",
                                   "Train a model on data in .npy (or IDX) files; report the loss and test "
                                   "accuracy; write the trained model");
  train->add_option("model", to.model, "ONNX model file")->required();
  train
      ->add_option("--input,-i", to.inputs,
                   "Training data of a model input (repeatable); the first axis counts samples")
      ->type_name("NAME=FILE");
  train->add_option("--label,-l", to.labels, "The target the loss compares the prediction with (a new input)")
      ->type_name("NAME=FILE");
  train
      ->add_option("--loss", to.loss,
                   "nll, softmax-ce, mse or l1 (KIND:TENSOR names the prediction; default: the "
                   "model's only output), or a scalar loss tensor of the model")
      ->required()
      ->type_name("KIND[:TENSOR]|TENSOR");
  train
      ->add_option("--optimizer", to.optimizer,
                   "sgd, adam, adamw, adamax, lamb, rmsprop, centered-rmsprop, adagrad or "
                   "adadelta with parameters (lr is required)")
      ->type_name("KIND:lr=X,...")
      ->capture_default_str();
  train
      ->add_option("--batch-size,-b", to.batchSize,
                   "Samples per batch (default: the model's fixed batch size, else 32)")
      ->check(integerAtLeast(1));
  train->add_option("--epochs,-e", to.epochs, "Passes over the training data")
      ->check(integerAtLeast(1))
      ->capture_default_str();
  train->add_option("--batches-per-step", to.batchesPerStep, "Batches per session run (DataFlow batchesPerStep)")
      ->check(integerAtLeast(1));
  train
      ->add_option("--eval", to.eval,
                   "Test data, named like the training data (repeatable): loss and accuracy after "
                   "each epoch")
      ->type_name("NAME=FILE");
  train->add_option("--eval-batch-size", to.evalBatchSize, "Samples per evaluation batch (default 256)")
      ->check(integerAtLeast(1));
  train->add_option("--output,-o", to.output, "Write the trained model (the input model with trained weights)")
      ->type_name("FILE.onnx");
  train->add_option("--device", to.device, "cpu (fast kernels) or reference (golden model)")
      ->check(CLI::IsMember({"cpu", "reference"}));
  train->add_option("--threads", to.threads, "Kernel threads (0: all cores)")->check(integerAtLeast(0));
  train->add_option("--seed", to.seed, "Seed of the shuffling");
  train->add_flag("!--no-shuffle", to.shuffle, "Keep the samples in file order");
  train->add_flag("--profile", to.profile, "Print the time spent per op type");
  train
      ->add_option("--progress", progressMode,
                   "auto (a bar on a terminal, else a line per tenth of an epoch), bar, "
                   "lines or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  BenchOptions bo;
  auto* bench = app.add_subcommand("bench", "Time a model's inference steps: prepare, warm-up, median step; "
                                            "--profile: time per op type and the kernels used");
  bench->add_option("model", bo.model, "ONNX model file")->required();
  bench->add_option("--input,-i", bo.inputs, "Input from a .npy file (repeatable); other inputs are random")
      ->type_name("NAME=FILE.npy");
  bench->add_option("--dim", bo.dims, "Size of a symbolic dimension for random inputs (repeatable; default 1)")
      ->type_name("NAME=SIZE");
  bench->add_option("--batches-per-step", bo.batchesPerStep, "Batches per step (DataFlow batchesPerStep)")
      ->check(integerAtLeast(1));
  bench->add_option("--device", bo.device, "cpu (fast kernels) or reference (golden model)")
      ->check(CLI::IsMember({"cpu", "reference"}));
  bench->add_option("--threads", bo.threads, "Kernel threads (0: all cores)")->check(integerAtLeast(0));
  bench->add_flag("--exact-threads", bo.exactThreads,
                  "Run on --threads threads even where one thread is faster (SessionOptions.autoThreads off)");
  bench->add_option("--warmup", bo.warmup, "Untimed steps before timing")->check(integerAtLeast(0));
  bench->add_option("--steps", bo.steps, "Timed steps (at least; the median is reported)")->check(integerAtLeast(1));
  bench->add_option("--min-time", bo.minSeconds, "Keep timing steps for at least this many seconds")
      ->check(nonNegativeReal());
  bench->add_option("--seed", bo.seed, "Seed of the random inputs");
  bench->add_flag("--profile", bo.profile, "Print time per op type and which kernels ran (fast or reference)");
  bench
      ->add_option("--dtype", bo.dtype,
                   "float32, or bf16: matmuls and convolutions in bfloat16 (SessionOptions.enableBf16; refused where "
                   "the CPU has no avx512_bf16)")
      ->check(CLI::IsMember({"float32", "bf16"}));

  app.add_subcommand("ops", "List the ops graft implements, by domain");

  LaunchOptions lo;
  auto* launch = app.add_subcommand("launch", "Run a training script as N instances over MPI (PopRun's role): "
                                              "graft launch --num-instances 2 --num-replicas 4 -- python train.py");
  launch->add_option("--num-instances", lo.numInstances, "Processes to start")->required();
  launch->add_option("--num-replicas", lo.numReplicas, "Replicas in all (a multiple of --num-instances; default: one "
                                                       "per instance)");
  launch->add_option("--host", lo.hosts, "Hosts to run on, comma-separated (default: this machine)")->delimiter(',');
  launch->add_option("--mpirun", lo.mpirun, "The mpirun program")->capture_default_str();
  launch->add_option("--mpi-args", lo.mpiArgs, "Extra mpirun arguments (quoted, repeatable)");
  launch->add_option("--timeout", lo.collectiveTimeout, "Seconds a collective waits for a peer before failing")
      ->capture_default_str();
  launch->add_flag("--print", lo.printOnly, "Print the mpirun command line instead of running it");
  launch->add_option("command", lo.command, "The command each instance runs (after --)")->required();

  std::vector<const char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args) argv.push_back(a.c_str());
  if (argv.empty()) argv.push_back("graft");
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e, out, err);
    return code == 0 ? 0 : 2;
  }
  try {
    if (inspect->parsed()) {
      inspectCommand(io, out);
      if (mo.memory || mo.kernels) {
        mo.dims = io.dims;
        printMemoryPlan(io.model, mo, out);
      }
    }
    else if (run->parsed()) runCommand(ro, out);
    else if (bench->parsed()) benchCommand(bo, out);
    else if (launch->parsed()) return launchCommand(lo, out);
    else if (train->parsed()) {
      bool terminal = &err == &std::cerr && isatty(STDERR_FILENO);
      to.progress = progressMode == "bar"     ? ProgressMode::Bar
                    : progressMode == "lines" ? ProgressMode::Lines
                    : progressMode == "none"  ? ProgressMode::None
                    : terminal                ? ProgressMode::Bar
                                              : ProgressMode::Lines;
      trainCommand(to, out, err);
    } else
      opsCommand(out);
  } catch (const InternalError& e) {
    out.flush();
    err << "graft: " << e.what() << "\n(this is a bug in graft; please report it)\n";
    return 3;
  } catch (const Error& e) {
    out.flush();
    err << "graft: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    out.flush();
    err << "graft: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    out.flush();
    err << "graft: internal error: " << e.what() << "\n(this is a bug in graft; please report it)\n";
    return 3;
  }
  return 0;
}

}  // namespace graft::tools
