// Sessions with virtual graphs: a plan's graph is split into programs (passes/pipeline_stages),
// each compiled for its virtual device's backend and thread pool, and steps run through the
// pipeline executor (runtime/pipeline). Training with gradient accumulation flushes the pipeline
// before each weight update, as PopART does, so it computes what unpipelined training computes.
#include <algorithm>
#include <chrono>
#include <fstream>

#include "runtime/session_impl.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft {

passes::StageConfig Session::Impl::stageConfig() const {
  passes::StageConfig c;
  c.mode = options.virtualGraphMode;
  c.pipelining = options.enablePipelining;
  c.numVirtualDevices = virtualDevicesPerReplica();
  c.training = isTraining();
  c.accumulationFactor = accumulationFactor();
  c.recompute = options.autoRecomputation != RecomputationType::None;
  return c;
}

void Session::Impl::checkStages() const {
  GRAFT_CHECK(options.pipelineDepth >= 0, "SessionOptions.pipelineDepth must be >= 0, got {}", options.pipelineDepth);
  passes::checkStageAnnotations(*model.graph, stageConfig());
}

Session::Impl::Plan::Staged::~Staged() {
  executor.reset();
  for (size_t i = 0; i < exes.size(); ++i) {
    if (!devices || !exes[i]) continue;
    try {
      devices->runOn(assignment.programs[i].device, [&] { exes[i].reset(); });
    } catch (...) {
      // Destructors do not throw; the kernel is then freed here.
    }
  }
}

void Session::Impl::compileStaged(Plan& p) {
  if (!virtualDevices) {
    const int threads = threadsPerDevice();
    int count = device->numVirtualDevices();
    virtualDevices = std::make_unique<pipeline::VirtualDevices>(
        device->type(), count, threads, pipeline::VirtualDevices::cpuBlocks(count, threads), options.enableBf16);
  }
  p.staged = compileStagedGraph(*p.graph, *virtualDevices);
}

std::unique_ptr<Session::Impl::Plan::Staged> Session::Impl::compileStagedGraph(ir::Graph& g,
                                                                                pipeline::VirtualDevices& devs) {
  pipeline::VirtualDevices* virtualDevices = &devs;
  passes::PassContext ctx;
  ctx.weightsAreConstant = weightsAreConstant();
  ctx.verifyEachPass = options.verifyPasses;
  ctx.dumpAfter = options.dumpGraphAfterPass;
  // The whole graph first: the tensors that cross programs get their final shapes, and folding
  // and dead code elimination happen across program boundaries.
  passes::runPipeline(g, passes::commonPrefix(), ctx);
  auto st = std::make_unique<Plan::Staged>();
  st->assignment = passes::assignPrograms(g, stageConfig(), lossGradientSeed(g));
  st->graphs = passes::splitPrograms(g, st->assignment);
  st->devices = virtualDevices;
  std::vector<pipeline::ProgramRun> runs;
  for (size_t i = 0; i < st->graphs.size(); ++i) {
    const passes::Program& prog = st->assignment.programs[i];
    GRAFT_CHECK(prog.device < virtualDevices->size(), "{} is placed on virtual device {}, but the device has {}",
                prog.name, prog.device, virtualDevices->size());
    ir::Graph& sg = *st->graphs[i].graph;
    virtualDevices->runOn(prog.device, [&] {
      passes::runPipeline(sg, pipeline(), ctx);
      st->exes.push_back(plan::compile(sg, virtualDevices->backend(prog.device), virtualDevices->pool(prog.device)));
    });
    st->exes.back()->setProfiling(options.enableProfiling, options.profileByNode);
    pipeline::ProgramRun run;
    run.name = prog.name;
    run.device = prog.device;
    run.exe = st->exes.back().get();
    runs.push_back(std::move(run));
  }
  // Wire every program input to the model input or the earlier program's output of that id.
  auto sourceOf = [&](const std::string& id, int before) -> std::optional<pipeline::Source> {
    auto in = std::find(inputIds.begin(), inputIds.end(), id);
    if (in != inputIds.end()) return pipeline::Source{-1, static_cast<int>(in - inputIds.begin())};
    for (int q = 0; q < before; ++q) {
      const auto& outs = st->exes[q]->outputIds();
      auto it = std::find(outs.begin(), outs.end(), id);
      if (it != outs.end()) return pipeline::Source{q, static_cast<int>(it - outs.begin())};
    }
    return std::nullopt;
  };
  for (size_t i = 0; i < runs.size(); ++i)
    for (const std::string& id : st->exes[i]->inputIds()) {
      auto s = sourceOf(id, static_cast<int>(i));
      GRAFT_ASSERT(s, "{} reads '{}', which no earlier program computes", runs[i].name, id);
      runs[i].inputs.push_back(*s);
    }
  std::vector<pipeline::Source> anchors;
  for (const auto& id : dataFlow.anchors()) {
    auto s = sourceOf(id, static_cast<int>(runs.size()));
    GRAFT_ASSERT(s, "anchor '{}' is computed by no program", id);
    anchors.push_back(*s);
  }
  int depth = options.enablePipelining
                  ? (options.pipelineDepth > 0 ? options.pipelineDepth : 2 * static_cast<int>(runs.size()))
                  : 1;  // sharding alone: one micro-batch at a time
  st->executor =
      std::make_unique<pipeline::PipelineExecutor>(*virtualDevices, std::move(runs), std::move(anchors), depth);
  std::string pinning;
  for (int d = 0; d < virtualDevices->size(); ++d)
    pinning += fmt::format("{}{}", d ? ", " : "", virtualDevices->pinned(d) ? "pinned" : "not pinned");
  st->summary = fmt::format(
      "{} program{} on {} virtual device{} ({} thread{} each; {}), {} micro-batch{} in flight\n{}", st->exes.size(),
      st->exes.size() == 1 ? "" : "s", virtualDevices->size(), virtualDevices->size() == 1 ? "" : "s",
      virtualDevices->pool(0).numThreads(), virtualDevices->pool(0).numThreads() == 1 ? "" : "s", pinning, depth,
      depth == 1 ? "" : "es", passes::describePrograms(g, st->assignment));
  return st;
}

void Session::Impl::runStaged(IStepIO& io) {
  auto t0 = std::chrono::steady_clock::now();
  beginStep(io);
  const int runs = dataFlow.batchesPerStep() * accumulationFactor();
  // The first micro-batch's shapes choose the plan; the others of the step must have them too.
  std::vector<ops::Value> first = readInputs(io);
  std::vector<Shape> shapes;
  shapes.reserve(first.size());
  for (const auto& v : first) shapes.push_back(v.isTensor() ? v.tensor.shape() : Shape{-1});
  Plan& p = planFor(shapes);
  lastPlan = &p;
  GRAFT_ASSERT(p.staged, "a session with virtual graphs compiled an unsplit plan");
  std::vector<std::string> names{"host"};
  for (int d = 0; d < virtualDevices->size(); ++d) names.push_back(fmt::format("virtual device {}", d));
  lastTimeline = std::make_unique<pipeline::Timeline>(std::move(names));
  // Callback StepIOs may reuse an input's memory once told it is consumed; micro-batches in
  // flight keep their own copies then.
  const bool copyInputs = dynamic_cast<StepIO*>(&io) == nullptr;
  AnchorSums sums;
  // With gradient accumulation the pipeline drains before each weight update (as in PopART).
  const int group = p.applyExe ? accumulationFactor() : runs;
  for (int start = 0; start < runs; start += group) {
    pipeline::HostIO host;
    host.read = [&](int m) {
      std::vector<ops::Value> v = start + m == 0 ? std::move(first) : readInputs(io);
      for (size_t i = 0; i < v.size(); ++i) {
        Shape s = v[i].isTensor() ? v[i].tensor.shape() : Shape{-1};
        GRAFT_CHECK(s == shapes[i],
                    "input '{}' of micro-batch {} has shape {}, but the step's first micro-batch had {}: "
                    "with virtual graphs every micro-batch of a step has the same shapes",
                    inputIds[i], start + m, shapeToString(s), shapeToString(shapes[i]));
        if (copyInputs && v[i].isTensor()) v[i].tensor = v[i].tensor.clone();
      }
      for (const auto& id : inputIds) io.inComplete(id);
      return v;
    };
    host.deliver = [&](int m, std::vector<ops::Value>& outs) { deliverAnchors(io, outs, start + m, sums); };
    p.staged->executor->run(std::min(group, runs - start), host, lastTimeline.get());
    if (p.applyExe) {
      double a0 = lastTimeline->now();
      p.applyExe->run({});
      lastTimeline->add({0, "optimizer step", a0, lastTimeline->now() - a0, -1});
    }
  }
  ++steps;
  writeTimeline();
  lastRunSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Session::Impl::writeTimeline() const {
  if (options.timelinePath.empty() || !lastTimeline) return;
  std::string path = options.timelinePath;
  auto at = path.find("{step}");
  if (at != std::string::npos) path.replace(at, 6, std::to_string(steps - 1));
  std::ofstream f(path);
  GRAFT_CHECK(f.good(), "SessionOptions.timelinePath: cannot write '{}'", path);
  f << lastTimeline->chromeTraceJson();
  GRAFT_CHECK(f.good(), "SessionOptions.timelinePath: writing '{}' failed", path);
}

}  // namespace graft
