// graft bench: times one model's inference steps (prepare, warm-up, median step) and, with
// --profile, where the time goes per op type and which ops run reference kernels.
#include <graft/graft.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <ostream>
#include <random>
#include <set>

#include "backends/cpu/reorder_stats.hpp"
#include "cli.hpp"
#include "format_util.hpp"
#include "npy.hpp"
#include "ops/registry.hpp"
#include "run_util.hpp"
#include "runtime/session_impl.hpp"
#include "support/check.hpp"
#include "support/cpu_features.hpp"
#include "support/limits.hpp"

namespace graft::tools {
namespace {

// The same prepared batch for every read; outputs are allocated once per anchor and reused, so
// that the timed loop measures the session, not the allocator.
class FixedStepIO : public IStepIO {
 public:
  std::map<TensorId, NDArray> inputs;

  NDArray in(const TensorId& id, const TensorInfo&, bool) override {
    auto it = inputs.find(id);
    GRAFT_CHECK(it != inputs.end(), "no data for model input '{}'", id);
    return it->second;
  }
  NDArray out(const TensorId& id, DataType dtype, const Shape& shape) override {
    auto it = outputs_.find(id);
    if (it == outputs_.end() || it->second.dtype() != dtype || it->second.shape() != shape)
      it = outputs_.insert_or_assign(id, NDArray(dtype, shape)).first;
    return it->second;
  }

 private:
  std::map<TensorId, NDArray> outputs_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void benchCommand(const BenchOptions& o, std::ostream& out) {
  GRAFT_CHECK(!o.model.empty(), "no model file given");
  GRAFT_CHECK(o.batchesPerStep >= 1, "--batches-per-step must be at least 1, got {}", o.batchesPerStep);
  GRAFT_CHECK(o.steps >= 1, "--steps must be at least 1, got {}", o.steps);
  GRAFT_CHECK(o.warmup >= 0, "--warmup must be >= 0, got {}", o.warmup);
  support::checkThreadCount("--threads", o.threads);
  GRAFT_CHECK(o.minSeconds >= 0, "--min-time must be >= 0, got {}", o.minSeconds);
  auto device = deviceNamed(o.device);
  std::map<std::string, int64_t> dims = parseDims(o.dims);
  std::map<TensorId, std::string> files = inputFiles(o.inputs);

  std::vector<TensorId> outputs = graphOutputs(o.model);
  SessionOptions opts;
  opts.numThreads = o.threads;
  opts.autoThreads = !o.exactThreads;
  opts.enableProfiling = o.profile;
  opts.enableBf16 = o.dtype == "bf16";
  int bps = o.batchesPerStep;
  auto session =
      InferenceSession::createFromOnnxModel(o.model, DataFlow(bps, outputs, AnchorReturnType("All")), device, {}, opts);

  FixedStepIO io;
  std::vector<std::string> lines;
  std::mt19937_64 rng(o.seed);
  std::set<std::string> usedDims;
  for (const auto& id : session->inputIds()) {
    auto f = files.find(id);
    if (f != files.end()) {
      io.inputs[id] = readNpy(f->second);
      lines.push_back(fmt::format("{}  {}  from {}", id, summarizeArray(io.inputs[id], 0), f->second));
      continue;
    }
    TensorInfo info = session->inputInfo(id);
    GRAFT_CHECK(info.hasShape(), "input '{}' has no declared shape ({}); give it with --input {}=FILE.npy", id,
                info.str(), id);
    Shape shape;
    for (const Dim& d : info.dims()) {
      if (!d.known()) usedDims.insert(d.param);
      auto g = d.known() ? dims.end() : dims.find(d.param);
      shape.push_back(d.known() ? d.value : g != dims.end() ? g->second : 1);
    }
    int64_t bytes = info.dataType() == DataType::String ? 32 : static_cast<int64_t>(dtypeSize(info.dataType()));
    for (int64_t d : shape) bytes = support::saturatingMul(bytes, d);
    support::checkAllocation(
        fmt::format("the random input '{}' ({} {})", id, dtypeName(info.dataType()), shapeToString(shape)), bytes);
    io.inputs[id] = randomArray(info.dataType(), shape, rng, id);
    lines.push_back(fmt::format("{}  {} {}  random", id, dtypeName(info.dataType()), shapeToString(shape)));
  }
  for (const auto& [name, v] : dims)
    GRAFT_CHECK(usedDims.count(name), "--dim {}: no random input of the model has a dimension named '{}'", name, name);
  for (const auto& [name, path] : files)
    GRAFT_CHECK(io.inputs.count(name), "--input {}: the model has no input '{}'", name, name);

  out << "model     " << o.model << "\n";
  out << "device    " << device->str() << (o.threads ? fmt::format(" (--threads {})", o.threads) : "") << "\n";
  if (device->type() != DeviceType::Reference) {
    // The ISA the cpu kernels use: oneDNN's and graft's loop variants (support::vecLoopIsa()).
    const support::CpuFeatures& f = support::cpuFeatures();
    out << "isa       " << f.isaName() << (f.avx512bf16 ? " with avx512_bf16" : "")
        << (support::cpuIsaLimit() == support::CpuIsa::Native ? "" : " (limited by GRAFT_CPU_ISA)") << "\n";
  }
  for (const auto& l : lines) out << "input     " << l << "\n";
  out.flush();

  auto t0 = std::chrono::steady_clock::now();
  session->prepareDevice();
  double prepare = seconds(t0);
  // One array per anchor, reused by every batch (FixedStepIO), and the session's own result.
  checkAnchorMemory(
      *session, 2,
      fmt::format("the anchors (one array each, reused by the {} batch{} of a step, and the model's result)", bps,
                  bps == 1 ? "" : "es"));
  // Symbolic input shapes compile at the first run: the first warm-up step includes it.
  std::vector<double> warm;
  for (int i = 0; i < o.warmup; ++i) {
    t0 = std::chrono::steady_clock::now();
    session->run(io);
    warm.push_back(seconds(t0));
  }
  std::vector<double> times;
  backends::cpu::resetReorderStats();
  auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(times.size()) < o.steps || seconds(start) < o.minSeconds) {
    t0 = std::chrono::steady_clock::now();
    session->run(io);
    times.push_back(seconds(t0));
  }
  backends::cpu::ReorderStats reorders = backends::cpu::reorderStats();
  double med = median(times);
  out << "prepare   " << humanSeconds(prepare) << " (prepareDevice: import passes, compile, weight packing)\n";
  if (!warm.empty())
    out << "warm-up   " << warm.size() << " step" << (warm.size() == 1 ? "" : "s") << ", first "
        << humanSeconds(warm.front()) << "\n";
  out << "step      median " << humanSeconds(med)
      << fmt::format(" of {} steps (min {}, max {})", times.size(),
                     humanSeconds(*std::min_element(times.begin(), times.end())),
                     humanSeconds(*std::max_element(times.begin(), times.end())))
      << "\n";
  // SessionOptions.autoThreads kept a one-thread plan (the reference device's kernels are
  // single-threaded anyway).
  const int asked = o.threads > 0 ? o.threads : session->device().threadsPerVirtualDevice();
  if (session->device().type() != DeviceType::Reference && session->kernelThreads() < asked)
    out << fmt::format(
        "threads   {} of {}{} (SessionOptions.autoThreads: one thread was faster for this model; --exact-threads "
        "keeps {})\n",
        session->kernelThreads(), o.threads > 0 ? "--threads " : "", asked, asked);
  if (bps > 1) out << "batch     " << humanSeconds(med / bps) << fmt::format(" ({} batches per step)", bps) << "\n";
  out << fmt::format("rate      {:.2f} batches/s\n", bps / med);

  if (!o.profile) return;
  auto prof = session->profile();
  double total = 0;
  for (const auto& e : prof) total += e.seconds;
  int runs = o.warmup + static_cast<int>(times.size());
  out << fmt::format(
      "profile   per step, over {} steps (warm-up included); kernels: the ones the compiled steps ran, "
      "with oneDNN's implementation in parentheses ('reference': the op's reference kernel)\n",
      runs);
  out << fmt::format("  {:<24} {:>6} {:>11} {:>6}  {}\n", "op", "calls", "ms/step", "%", "kernels");
  for (const auto& e : prof) {
    std::string k = fmt::format("{}", fmt::join(e.kernels, ", "));
    out << fmt::format("  {:<24} {:>6} {:>11.3f} {:>5.1f}%  {}\n", e.opType, e.calls / std::max(1, runs),
                       e.seconds / runs * 1e3, total > 0 ? 100 * e.seconds / total : 0.0, k);
  }
  out << fmt::format("  {:<24} {:>6} {:>11.3f}  (kernels; the rest of a step is the session's own work)\n", "total", "",
                     total / runs * 1e3);
  // Layout conversions (oneDNN reorders) of the timed steps: graph-edge ToBlocked/FromBlocked
  // nodes, activations converted inside kernels, weights re-packed per step.
  double steps = static_cast<double>(times.size());
  double sum = 0;
  for (double t : times) sum += t;
  out << fmt::format("reorders  {:.1f} per step, {:.2f} MB, {:.3f} ms ({:.1f}% of the mean step)\n",
                     reorders.count / steps, reorders.bytes / steps / 1e6, reorders.seconds / steps * 1e3,
                     sum > 0 ? 100 * reorders.seconds / sum : 0.0);
}

}  // namespace graft::tools
