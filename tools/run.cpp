// graft run: one model through an InferenceSession with every graph output anchored.
#include <onnx/onnx_pb.h>

#include <graft/graft.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <sstream>

#include "cli.hpp"
#include "format_util.hpp"
#include "npy.hpp"
#include "ops/dtype_dispatch.hpp"
#include "run_util.hpp"
#include "runtime/session_impl.hpp"
#include "support/check.hpp"
#include "support/file_util.hpp"
#include "support/limits.hpp"

namespace graft::tools {
namespace fs = std::filesystem;
namespace {

NDArray stack(const std::vector<NDArray>& parts) {
  const NDArray& first = parts.front();
  Shape s = first.shape();
  s.insert(s.begin(), static_cast<int64_t>(parts.size()));
  NDArray out(first.dtype(), s);
  for (size_t i = 0; i < parts.size(); ++i) {
    GRAFT_ASSERT(parts[i].shape() == first.shape(), "batches returned different shapes");
    if (first.dtype() == DataType::String) {
      for (int64_t k = 0; k < first.numel(); ++k)
        out.data<std::string>()[i * first.numel() + k] = parts[i].data<std::string>()[k];
    } else if (first.nbytes()) {
      std::memcpy(static_cast<char*>(out.rawData()) + i * first.nbytes(), parts[i].rawData(), first.nbytes());
    }
  }
  return out;
}

std::string fileNameFor(const std::string& id, std::set<std::string>& used) {
  std::string base;
  for (char c : id) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  if (base.empty() || base[0] == '.') base = "_" + base;
  std::string name = base;
  for (int i = 1; used.count(name); ++i) name = base + "_" + std::to_string(i);
  used.insert(name);
  return name + ".npy";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

// Output names from the ModelProto; when it does not parse, the full import reports why.
std::vector<TensorId> graphOutputs(const std::string& path) {
  support::checkRegularFile("model file", path);
  std::ifstream f(path, std::ios::binary);
  ::onnx::ModelProto m;
  if (!f || !m.ParseFromIstream(&f)) {
    (void)loadModelArgument(path);
    GRAFT_THROW("model '{}' cannot be read as ONNX", path);
  }
  std::vector<TensorId> ids;
  for (const auto& o : m.graph().output()) ids.push_back(o.name());
  GRAFT_CHECK(!ids.empty(), "model '{}' has no graph outputs: there is nothing to run", path);
  return ids;
}

std::pair<std::string, std::string> splitAssignment(const std::string& arg, const char* option, const char* form) {
  auto eq = arg.find('=');
  GRAFT_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < arg.size(), "{} '{}': expected {}", option, arg, form);
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

std::map<TensorId, std::string> inputFiles(const std::vector<std::string>& args) {
  std::map<TensorId, std::string> files;
  for (const auto& a : args) {
    auto [name, path] = splitAssignment(a, "--input", "NAME=FILE.npy");
    GRAFT_CHECK(!files.count(name), "--input {} is given twice", name);
    files[name] = path;
  }
  return files;
}

std::shared_ptr<DeviceInfo> deviceNamed(const std::string& name) {
  GRAFT_CHECK(name == "cpu" || name == "reference", "--device must be cpu or reference, got '{}'", name);
  auto& dm = DeviceManager::createDeviceManager();
  return name == "reference" ? dm.createReferenceDevice() : dm.createCpuDevice();
}

std::map<std::string, int64_t> parseDims(const std::vector<std::string>& args) {
  std::map<std::string, int64_t> dims;
  for (const auto& a : args) {
    auto [name, text] = splitAssignment(a, "--dim", "NAME=SIZE, for example --dim batch=8");
    int64_t v = -1;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    GRAFT_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= 0,
                "--dim {}: the size must be a non-negative integer, got '{}'", name, text);
    GRAFT_CHECK(!dims.count(name), "--dim {} is given twice", name);
    dims[name] = v;
  }
  return dims;
}

void checkAnchorMemory(const Session& session, int64_t copies, const std::string& what) {
  int64_t total = 0, largestBytes = -1;
  std::string largest;
  for (const auto& id : session.dataFlow().anchors()) {
    // Anchors whose shape the run decides (symbolic inputs, data-dependent outputs) are sized
    // when they are produced.
    if (!session.anchorIsFixed(id)) continue;
    TensorInfo info = session.getInfo(id);
    if (!info.isStatic()) continue;
    int64_t bytes = info.dataType() == DataType::String ? 32 : static_cast<int64_t>(dtypeSize(info.dataType()));
    for (int64_t d : info.shape()) bytes = support::saturatingMul(bytes, d);
    total = support::saturatingAdd(total, support::saturatingMul(bytes, copies));
    if (bytes > largestBytes) largestBytes = bytes, largest = fmt::format("'{}', {}", id, info.str());
  }
  if (largestBytes >= 0) support::checkAllocation(fmt::format("{} (the largest: {})", what, largest), total);
}

NDArray randomArray(DataType dt, const Shape& shape, std::mt19937_64& rng, const std::string& id) {
  GRAFT_CHECK(
      dt != DataType::String && dt != DataType::Complex64 && dt != DataType::Complex128 && dt != DataType::Undefined,
      "input '{}' is {}: graft run cannot make random values of that type; give the input with --input {}=FILE.npy", id,
      dtypeName(dt), id);
  NDArray a = NDArray::uninitialized(dt, shape);
  ops::dispatch<ops::kNumericBool>(dt, "random input '" + id + "'", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = a.data<T>();
    if constexpr (std::is_same_v<T, bool>) {
      for (int64_t i = 0; i < a.numel(); ++i) p[i] = (rng() & 1u) != 0;
    } else if constexpr (ops::kIsFloat<T>) {
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (int64_t i = 0; i < a.numel(); ++i) p[i] = static_cast<T>(d(rng));
    } else {
      // Small non-negative integers: valid as indices and counts for most models.
      for (int64_t i = 0; i < a.numel(); ++i) p[i] = static_cast<T>(rng() % 10);
    }
  });
  return a;
}

void runCommand(const RunOptions& o, std::ostream& out) {
  GRAFT_CHECK(!o.model.empty(), "no model file given");
  GRAFT_CHECK(o.batchesPerStep >= 1, "--batches-per-step must be at least 1, got {}", o.batchesPerStep);
  GRAFT_CHECK(o.steps >= 1, "--steps must be at least 1, got {}", o.steps);
  support::checkThreadCount("--threads", o.threads);
  auto device = deviceNamed(o.device);
  std::map<std::string, int64_t> dims = parseDims(o.dims);
  std::map<TensorId, std::string> files = inputFiles(o.inputs);

  std::vector<TensorId> outputs = graphOutputs(o.model);
  SessionOptions opts;
  opts.numThreads = o.threads;
  int bps = o.batchesPerStep;
  auto session =
      InferenceSession::createFromOnnxModel(o.model, DataFlow(bps, outputs, AnchorReturnType("All")), device, {}, opts);
  const std::vector<TensorId> inputIds = session->inputIds();
  for (const ir::Tensor* t : session->impl().model.graph->inputs())
    GRAFT_CHECK(t->type().isTensor(), "input '{}' is a {}; graft run feeds tensors only (use the C++ or Python API)",
                t->id(), t->type().str());
  for (const auto& [name, path] : files)
    GRAFT_CHECK(std::find(inputIds.begin(), inputIds.end(), name) != inputIds.end(),
                "--input {}: the model has no input '{}' (its inputs: {})", name, name,
                inputIds.empty() ? std::string("none") : fmt::format("{}", fmt::join(inputIds, ", ")));

  ArrayStepIO io;
  std::vector<std::string> inputLines;
  // Inputs from files first: their shapes also fix symbolic dimensions that random inputs share.
  std::map<std::string, std::pair<int64_t, TensorId>> bound;
  for (const auto& id : inputIds) {
    auto f = files.find(id);
    if (f == files.end()) continue;
    TensorInfo info = session->inputInfo(id);
    NDArray a = readNpy(f->second);
    std::vector<NDArray> batches;
    bool stepArray = bps > 1 && info.hasShape() && a.rank() == info.rank() + 1;
    if (stepArray) {
      GRAFT_CHECK(a.dim(0) == bps,
                  "--input {}: '{}' has shape {}; with --batches-per-step {} a step array needs a "
                  "leading dimension of {} (or give one batch of rank {})",
                  id, f->second, shapeToString(a.shape()), bps, bps, info.rank());
      Shape s(a.shape().begin() + 1, a.shape().end());
      for (int64_t b = 0; b < bps; ++b) {
        NDArray chunk(a.dtype(), s);
        if (chunk.nbytes())
          std::memcpy(chunk.rawData(), static_cast<const char*>(a.rawData()) + b * chunk.nbytes(), chunk.nbytes());
        batches.push_back(chunk);
      }
    } else {
      batches.assign(static_cast<size_t>(bps), a);
    }
    const Shape& one = batches.front().shape();
    if (info.hasShape() && static_cast<int64_t>(one.size()) == info.rank())
      for (size_t d = 0; d < one.size(); ++d) {
        const Dim& dim = info.dims()[d];
        if (dim.known() || dim.param.empty()) continue;
        auto [it, fresh] = bound.emplace(dim.param, std::make_pair(one[d], id));
        GRAFT_CHECK(fresh || it->second.first == one[d], "--input {}: dimension '{}' is {} here but {} in input '{}'",
                    id, dim.param, one[d], it->second.first, it->second.second);
        auto given = dims.find(dim.param);
        GRAFT_CHECK(given == dims.end() || given->second == one[d],
                    "--dim {}={} contradicts --input {}, where '{}' is {}", dim.param,
                    given == dims.end() ? 0 : given->second, id, dim.param, one[d]);
      }
    inputLines.push_back(
        fmt::format("{}  {}  from {}{}", id, summarizeArray(batches.front(), 0), f->second,
                    bps > 1 ? (stepArray ? " (one batch per row)" : " (the same for every batch)") : ""));
    io.inputs[id] = std::move(batches);
  }
  std::set<std::string> usedDims;
  std::mt19937_64 rng(o.seed);
  int64_t randomBytes = 0;
  for (const auto& id : inputIds) {
    if (files.count(id)) continue;
    TensorInfo info = session->inputInfo(id);
    GRAFT_CHECK(info.hasShape(), "input '{}' has no declared shape ({}); give it with --input {}=FILE.npy", id,
                info.str(), id);
    Shape shape;
    std::vector<std::string> notes;
    for (size_t d = 0; d < info.dims().size(); ++d) {
      const Dim& dim = info.dims()[d];
      if (dim.known()) {
        shape.push_back(dim.value);
      } else if (!dim.param.empty()) {
        usedDims.insert(dim.param);
        auto g = dims.find(dim.param);
        auto b = bound.find(dim.param);
        shape.push_back(g != dims.end() ? g->second : b != bound.end() ? b->second.first : 1);
        if (g == dims.end() && b == bound.end()) notes.push_back(fmt::format("{}=1", dim.param));
      } else {
        shape.push_back(1);
        notes.push_back(fmt::format("dimension {} is unnamed: 1", d));
      }
    }
    // Every batch of a step gets its own random array: the total is checked before any is made.
    int64_t numel = 1;
    for (int64_t d : shape) numel = support::saturatingMul(numel, d);
    int64_t perBatch = support::saturatingAdd(
        support::saturatingMul(
            numel, info.dataType() == DataType::String ? 32 : static_cast<int64_t>(dtypeSize(info.dataType()))),
        static_cast<int64_t>(sizeof(NDArray)));
    randomBytes = support::saturatingAdd(randomBytes, support::saturatingMul(perBatch, bps));
    support::checkAllocation(fmt::format("--batches-per-step {} × the random inputs (up to '{}', {} {})", bps, id,
                                         dtypeName(info.dataType()), shapeToString(shape)),
                             randomBytes);
    std::vector<NDArray> batches;
    for (int b = 0; b < bps; ++b) batches.push_back(randomArray(info.dataType(), shape, rng, id));
    inputLines.push_back(
        fmt::format("{}  {} {}  random{}", id, dtypeName(info.dataType()), shapeToString(shape),
                    notes.empty() ? "" : fmt::format(" ({}; set with --dim)", fmt::join(notes, ", "))));
    io.inputs[id] = std::move(batches);
  }
  for (const auto& [name, v] : dims)
    GRAFT_CHECK(usedDims.count(name) || bound.count(name),
                "--dim {}: no random input of the model has a dimension named '{}'", name, name);

  out << "model     " << o.model << "\n";
  out << "device    " << device->str();
  if (o.threads && o.device == "reference")
    out << " (the reference device runs on one thread)";
  else if (o.threads)
    out << fmt::format(" (--threads {})", o.threads);
  out << "\n";
  out << (inputLines.empty() ? "inputs    none\n" : "inputs\n");
  for (const auto& l : inputLines) out << "  " << l << "\n";
  out.flush();

  session->prepareDevice();
  // The StepIO keeps every batch's anchors.
  checkAnchorMemory(*session, bps, fmt::format("--batches-per-step {} × the anchors", bps));
  io.reset();
  session->run(io);  // warm-up (compiles here when input shapes were symbolic)
  double compileSeconds = session->lastCompileSeconds();
  std::vector<double> times;
  for (int s = 0; s < o.steps; ++s) {
    io.reset();
    auto t0 = std::chrono::steady_clock::now();
    session->run(io);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double med = median(times);
  out << "compile   " << humanSeconds(compileSeconds) << "\n";
  out << "step      " << humanSeconds(med) << fmt::format("  (median of {} step{}", o.steps, o.steps == 1 ? "" : "s");
  if (o.steps > 1)
    out << fmt::format(", min {}, max {}", humanSeconds(*std::min_element(times.begin(), times.end())),
                       humanSeconds(*std::max_element(times.begin(), times.end())));
  if (bps > 1) out << fmt::format("; {} batches per step: {} per batch", bps, humanSeconds(med / bps));
  out << ")\n";

  std::map<TensorId, NDArray> results;
  out << "outputs\n";
  for (const auto& id : session->dataFlow().anchors()) {
    auto it = io.outputs.find(id);
    GRAFT_ASSERT(it != io.outputs.end() && static_cast<int>(it->second.size()) == bps,
                 "anchor '{}' was not returned once per batch", id);
    NDArray a = bps > 1 ? stack(it->second) : it->second.front();
    out << "  " << id << "  " << summarizeArray(a, o.show) << "\n";
    results[id] = a;
  }
  if (!o.outputDir.empty()) {
    std::error_code ec;
    fs::create_directories(o.outputDir, ec);
    GRAFT_CHECK(!ec, "--output-dir: cannot create '{}': {}", o.outputDir, ec.message());
    std::set<std::string> used;
    for (const auto& id : session->dataFlow().anchors()) {
      NDArray a = results.at(id);
      std::string note;
      if (a.dtype() == DataType::String) {
        out << "skipped   " << id << ": string tensors cannot be written as .npy\n";
        continue;
      }
      if (a.dtype() == DataType::BFloat16) {  // numpy has no bfloat16
        NDArray f(DataType::Float, a.shape());
        for (int64_t i = 0; i < a.numel(); ++i) f.data<float>()[i] = static_cast<float>(a.data<BFloat16>()[i]);
        a = f;
        note = " (BFLOAT16 written as float32)";
      }
      fs::path p = fs::path(o.outputDir) / fileNameFor(id, used);
      writeNpy(p.string(), a);
      out << "wrote     " << p.string() << note << "\n";
    }
  }
}

}  // namespace graft::tools
