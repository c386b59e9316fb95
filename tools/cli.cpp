#include "cli.hpp"
#include "inspect_memory.hpp"

#include <graft/error.hpp>

#include <CLI/CLI.hpp>

#include <iostream>
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

int cliMain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"graft: compile and run ONNX models on CPUs", "graft"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(versionString()));

  InspectOptions io;
  auto* inspect = app.add_subcommand("inspect", "Print a model's inputs, outputs, opsets, ops, parameters and the ops "
                                                "graft does not support");
  inspect->add_option("model", io.model, "ONNX model file")->required();
  inspect->add_flag("--graph", io.graph, "Also print the imported graph (graft IR)");
  inspect->add_flag("--stages", io.stages, "Also print the split over virtual devices: the model's annotations "
                                           "(__ipu_number, __pipeline_stage) or, without any, graft's Auto split");
  inspect->add_option("--virtual-devices", io.virtualDevices, "Virtual devices for --stages (default: as annotated, or 2)")
      ->check(CLI::PositiveNumber);
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
      ->check(CLI::PositiveNumber);
  run->add_option("--output-dir,-o", ro.outputDir, "Write every output to DIR/<name>.npy")->type_name("DIR");
  run->add_option("--device", ro.device, "cpu (fast kernels) or reference (golden model)")
      ->check(CLI::IsMember({"cpu", "reference"}));
  run->add_option("--threads", ro.threads, "Kernel threads (0: all cores)")->check(CLI::NonNegativeNumber);
  run->add_option("--steps", ro.steps, "Timed steps after one warm-up step (the median is reported)")
      ->check(CLI::PositiveNumber);
  run->add_option("--seed", ro.seed, "Seed of the random inputs");
  run->add_option("--show", ro.show, "Values printed per output")->check(CLI::NonNegativeNumber);

  app.add_subcommand("ops", "List the ops graft implements, by domain");

  std::vector<const char*> argv;
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
      if (mo.memory) {
        mo.dims = io.dims;
        printMemoryPlan(io.model, mo, out);
      }
    }
    else if (run->parsed()) runCommand(ro, out);
    else opsCommand(out);
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
