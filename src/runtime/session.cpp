#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "ops/cast_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "runtime/session_impl.hpp"
#include "support/check.hpp"
#include "support/cpu_features.hpp"
#include "support/file_util.hpp"
#include "support/limits.hpp"
#include "support/logging.hpp"

namespace graft {
namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string listIds(const std::vector<TensorId>& ids) {
  if (ids.empty()) return "none";
  return fmt::format("{}", fmt::join(ids, ", "));
}

void addInto(NDArray& acc, const NDArray& v) {
  ops::dispatch<ops::kNumeric>(acc.dtype(), "Sum anchor", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ops::ComputeType<T>;
    T* a = acc.data<T>();
    const T* b = v.data<T>();
    for (int64_t i = 0; i < acc.numel(); ++i) a[i] = static_cast<T>(static_cast<C>(a[i]) + static_cast<C>(b[i]));
  });
}

// "" when every element is finite (or the array is not floating point), else where the first
// non-finite element is: "NaN at flat index 3 of 8".
std::string firstNonFinite(const NDArray& a) {
  if (!isFloatingPoint(a.dtype()) || a.dtype() == DataType::Complex64 || a.dtype() == DataType::Complex128) return {};
  std::string where;
  ops::dispatch<ops::kFloats>(a.dtype(), "detectNonFinite", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = a.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) {
      double v = static_cast<double>(static_cast<ops::ComputeType<T>>(p[i]));
      if (!std::isfinite(v)) {
        where = fmt::format("{} at flat index {} of {}", std::isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf", i, a.numel());
        return;
      }
    }
  });
  return where;
}

}  // namespace

onnxio::Model loadModelArgument(const std::string& model) {
  onnxio::ImportOptions opts;
  // ONNX function ops graft has no kernel of its own for are expanded into their bodies.
  opts.expandFunction = [](const std::string& domain, const std::string& type) {
    return ops::Registry::instance().find(domain, type) == nullptr;
  };
  bool printable = model.size() < 4096 && std::all_of(model.begin(), model.end(), [](char c) {
                     return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
                   });
  // Serialized ModelProtos are binary; a short printable string was meant as a path. Anything but
  // a regular file (a directory, a FIFO, a device) is refused by name before it is opened.
  if (printable && !model.empty()) {
    support::checkRegularFile("model file", model);
    return onnxio::loadModelFile(model, opts);
  }
  return onnxio::loadModelBytes(model, opts);
}

void Session::Impl::init(const std::string& modelArg, const DataFlow& df, std::shared_ptr<DeviceInfo> dev,
                         const InputShapeInfo& shapes, const SessionOptions& opts) {
  GRAFT_CHECK(dev, "no device given: create one with DeviceManager.createCpuDevice()");
  model = loadModelArgument(modelArg);
  dataFlow = df;
  device = std::move(dev);
  options = opts;
  support::checkThreadCount("SessionOptions.numThreads", options.numThreads);
  if (options.numThreads > 0)
    support::checkVirtualDeviceCount("SessionOptions.numThreads on the device's virtual devices",
                                     device->numVirtualDevices(), options.numThreads);
  if (options.enableBf16) {
    const support::CpuFeatures& cpu = support::cpuFeatures();
    GRAFT_CHECK(cpu.avx512bf16,
                "SessionOptions.enableBf16: this CPU has no avx512_bf16 (its kernels use {}{}), so bf16 matmuls and "
                "convolutions cannot run here; leave enableBf16 off",
                cpu.isaName(), support::cpuIsaLimit() == support::CpuIsa::Native ? "" : ", limited by GRAFT_CPU_ISA");
    GRAFT_CHECK(device->type() != DeviceType::Reference,
                "SessionOptions.enableBf16: the reference device computes in float32 only (it is the golden model); "
                "bf16 matmuls and convolutions run on DeviceManager().createCpuDevice()");
  }
  int threads = threadsPerDevice();
  // In a replicated session this backend runs only the optimizer step, while every replica's
  // threads wait for it: it takes the cores of all the local replicas' virtual devices.
  if (replicated())
    threads =
        std::max(threads, std::min(threads * device->numVirtualDevices(), support::ThreadPool::hardwareThreads()));
  backend = device->type() == DeviceType::Reference ? backends::makeReferenceBackend()
                                                    : backends::makeCpuBackend(threads, options.enableBf16);
  pool = std::make_unique<support::ThreadPool>(backend->numThreads());

  const ir::Graph& g = *model.graph;
  for (const ir::Tensor* t : g.inputs()) {
    inputIds.push_back(t->id());
    inputInfos[t->id()] = t->info();
  }
  for (const auto& [id, info] : shapes.getAllTensorInfo()) {
    GRAFT_CHECK(inputInfos.count(id), "InputShapeInfo names '{}', which is not an input of the model (inputs: {})", id,
                listIds(inputIds));
    const TensorInfo& m = inputInfos[id];
    GRAFT_CHECK(m.dataType() == DataType::Undefined || m.dataType() == info.dataType(),
                "InputShapeInfo gives '{}' type {}, but the model declares {}", id, dtypeName(info.dataType()),
                dtypeName(m.dataType()));
    inputInfos[id] = info;
  }
  GRAFT_CHECK(!dataFlow.anchors().empty(),
              "the DataFlow has no anchors: name at least one tensor to return (outputs of the "
              "model: {})",
              [&] {
                std::vector<TensorId> outs;
                for (const ir::Tensor* t : g.outputs()) outs.push_back(t->id());
                return listIds(outs);
              }());
  for (const auto& id : dataFlow.anchors()) checkAnchor(id);
  auto unsupported = plan::unsupportedNodes(g, *backend);
  GRAFT_CHECK(unsupported.empty(), "{}", plan::unsupportedOpsMessage(unsupported));
  checkReplication();
  bindCollectives();
  checkStages();
}

std::optional<std::vector<Shape>> Session::Impl::staticInputShapes() const {
  std::vector<Shape> shapes;
  for (const auto& id : inputIds) {
    const TensorInfo& info = inputInfos.at(id);
    if (!model.graph->tensor(id).type().isTensor()) {
      shapes.push_back(Shape{-1});  // a sequence or optional: the plan does not depend on it (as in execute)
      continue;
    }
    if (!info.isStatic()) return std::nullopt;
    shapes.push_back(info.shape());
  }
  return shapes;
}

void Session::Impl::checkAnchor(const TensorId& id) const {
  const ir::Graph& g = *model.graph;
  if (g.findTensor(id)) return;
  std::vector<TensorId> outs;
  for (const ir::Tensor* t : g.outputs()) outs.push_back(t->id());
  GRAFT_THROW("anchor '{}' is not a tensor of the model (its outputs are: {})", id, listIds(outs));
}

Shape Session::Impl::leadingDims() const {
  Shape s;
  if (dataFlow.batchesPerStep() > 1) s.push_back(dataFlow.batchesPerStep());
  if (accumulationFactor() > 1) s.push_back(accumulationFactor());
  if (localReplicas() > 1) s.push_back(localReplicas());
  return s;
}

std::vector<TensorId> Session::Impl::persistentIds() const {
  std::vector<TensorId> ids;
  for (const ir::Tensor* t : model.graph->initializers())
    if (t->kind() == ir::TensorKind::Variable) ids.push_back(t->id());
  return ids;
}

Session::Impl::Plan& Session::Impl::planFor(const std::vector<Shape>& shapes) {
  auto it = plans.find(shapes);
  if (it != plans.end()) return *it->second;
  auto t0 = std::chrono::steady_clock::now();
  auto p = std::make_unique<Plan>();
  p->graph = ir::cloneGraph(sourceGraph());
  ir::Graph& g = *p->graph;
  for (size_t i = 0; i < inputIds.size(); ++i) {
    ir::Tensor& t = g.tensor(inputIds[i]);
    if (t.type().isTensor())
      t.setType(ir::ValueType::tensor(TensorInfo(inputInfos.at(inputIds[i]).dataType(), shapes[i])));
  }
  if (options.virtualGraphMode == VirtualGraphMode::Auto) {
    // Auto mode balances the forward graph; autodiff then places each gradient with its op.
    passes::PassContext actx;
    passes::runPipeline(g, {"infer-shapes"}, actx);
    std::string split = passes::autoAssignStages(g, virtualDevicesPerReplica());
    fmt::print(stderr, "graft: {}", split);
  }
  {
    // The anchors that exist before transform are graph outputs while it runs, so that its passes
    // (a training session's fuse-gelu) keep what the user reads; the outputs are set below.
    std::vector<ir::Tensor*> outs = g.outputs();
    for (const auto& id : dataFlow.anchors())
      if (ir::Tensor* t = g.findTensor(id); t && std::find(outs.begin(), outs.end(), t) == outs.end())
        outs.push_back(t);
    g.setOutputs(outs);
  }
  transform(g, *p);
  std::vector<ir::Tensor*> outs;
  for (const auto& id : dataFlow.anchors()) {
    ir::Tensor* t = g.findTensor(id);
    GRAFT_CHECK(t, "anchor '{}' is not a tensor of the compiled model", id);
    outs.push_back(t);
  }
  g.setOutputs(outs);
  passes::PassContext ctx;
  ctx.weightsAreConstant = weightsAreConstant();
  ctx.verifyEachPass = options.verifyPasses;
  ctx.dumpAfter = options.dumpGraphAfterPass;
  if (replicated()) {
    compileReplicated(*p);
  } else if (usesStages()) {
    compileStaged(*p);
  } else {
    passes::runPipeline(g, pipeline(), ctx);
    p->exe = plan::compile(g, *backend, *pool);
    p->exe->setProfiling(options.enableProfiling, options.profileByNode);
  }
  if (p->applyGraph) {
    passes::runPipeline(*p->applyGraph, pipeline(), ctx);
    p->applyExe = plan::compile(*p->applyGraph, *backend, *pool);
  }
  lastCompileSeconds = secondsSince(t0);
  GRAFT_LOG_INFO("compiled '{}' for input shapes {} in {:.3f} s ({} kernels)", g.name(),
                 fmt::join(
                     [&] {
                       std::vector<std::string> s;
                       s.reserve(shapes.size());
                       for (const auto& sh : shapes) s.push_back(shapeToString(sh));
                       return s;
                     }(),
                     " "),
                 lastCompileSeconds, p->exe ? p->exe->numSteps() : g.numNodes());
  Plan& ref = *p;
  plans.emplace(shapes, std::move(p));
  return ref;
}

Session::Impl::Plan& Session::Impl::anyPlan() const {
  if (!lastPlan) {
    // Compile on demand when the input shapes are known (the caller skipped prepareDevice).
    auto* self = const_cast<Session::Impl*>(this);
    if (auto shapes = self->staticInputShapes()) {
      self->lastPlan = &self->planFor(*shapes);
      self->prepared = true;
    }
  }
  GRAFT_CHECK(lastPlan,
              "the session has not been compiled yet: call prepareDevice() (and, for inputs with symbolic "
              "dimensions, run once or give InputShapeInfo)");
  return *lastPlan;
}

void Session::Impl::beginStep(IStepIO& io) {
  if (auto* s = dynamic_cast<StepIO*>(&io)) {
    for (const auto& [id, a] : s->inputs())
      GRAFT_CHECK(inputInfos.count(id),
                  "the StepIO has an input array for '{}', which is not an input of the model "
                  "(inputs: {})",
                  id, listIds(inputIds));
    for (const auto& [id, a] : s->outputs())
      GRAFT_CHECK(dataFlow.isAnchored(id),
                  "the StepIO has an anchor array for '{}', which is not an anchor of the "
                  "DataFlow (anchors: {})",
                  id, listIds(dataFlow.anchors()));
    s->beginStep(leadingDims(), localReplicas() > 1 ? "batchesPerStep, accumulationFactor, replicatedGraphCount"
                                                    : "batchesPerStep, accumulationFactor");
    // Each anchor array must hold exactly the results one step returns (anchorArrayShape).
    int runs = dataFlow.batchesPerStep() * accumulationFactor();
    for (const auto& id : dataFlow.anchors()) {
      const AnchorReturnType& art = dataFlow.art(id);
      int64_t count = art.id() == AnchorReturnTypeId::All ? runs
                      : art.id() == AnchorReturnTypeId::EveryN
                          ? dataFlow.batchesPerStep() / art.rp() * accumulationFactor()
                          : 1;
      count *= localReplicas();
      s->expectResults(id, count);
    }
  }
}

namespace {
// A StepIO's value of a sequence or optional input, checked against the model's type.
ops::Value valueFromStep(StepValue sv, const ir::ValueType& vt, const TensorId& id) {
  using K = StepValue::Kind;
  bool optional = vt.kind == ir::ValueKind::Optional;
  bool sequence = vt.kind == ir::ValueKind::Sequence || (optional && vt.optionalOf == ir::ValueKind::Sequence);
  if (sv.kind == K::None) {
    GRAFT_CHECK(optional, "input '{}' is {}, but the StepIO gave None (only optional inputs can be absent)", id,
                vt.str());
    return ops::Value::none();
  }
  GRAFT_CHECK(sequence == (sv.kind == K::Sequence), "input '{}' is {}, but the StepIO gave {}", id, vt.str(),
              sv.kind == K::Sequence ? "a sequence (list)" : "a tensor");
  auto check = [&](const NDArray& a, const std::string& what) {
    GRAFT_CHECK(vt.info.dataType() == DataType::Undefined || a.dtype() == vt.info.dataType(),
                "input '{}'{}: the model expects {} elements, got {}", id, what, dtypeName(vt.info.dataType()),
                dtypeName(a.dtype()));
    if (vt.info.hasShape()) {
      bool ok = a.rank() == vt.info.rank();
      for (int64_t d = 0; ok && d < a.rank(); ++d)
        if (vt.info.dims()[d].known()) ok = vt.info.dims()[d].value == a.dim(d);
      GRAFT_CHECK(ok, "input '{}'{} has shape {}, but the model expects {}", id, what, shapeToString(a.shape()),
                  vt.info.str());
    }
  };
  if (!sequence) {
    check(sv.tensor, "");
    return ops::Value::fromTensor(std::move(sv.tensor));
  }
  for (size_t i = 0; i < sv.items.size(); ++i) check(sv.items[i], fmt::format(" (sequence element {})", i));
  return ops::Value::fromSequence(std::move(sv.items));
}

StepValue stepValueOf(const ops::Value& v) {
  StepValue sv;
  if (v.isSequence()) {
    sv.kind = StepValue::Kind::Sequence;
    for (const NDArray& a : *v.sequence) sv.items.push_back(a.clone());
  } else if (v.isTensor()) {
    sv.tensor = v.tensor.clone();
  } else {
    sv.kind = StepValue::Kind::None;
  }
  return sv;
}
}  // namespace

std::vector<ops::Value> Session::Impl::readInputs(IStepIO& io) {
  Shape leading = leadingDims();
  std::vector<ops::Value> values;
  std::map<std::string, int64_t> symbols;
  for (const auto& id : inputIds) {
    const TensorInfo& info = inputInfos.at(id);
    const ir::ValueType& vt = model.graph->tensor(id).type();
    if (!vt.isTensor()) {
      values.push_back(valueFromStep(io.inValue(id, false), vt, id));
      continue;
    }
    NDArray a = io.in(id, info, false);
    GRAFT_CHECK(a.valid(), "input '{}': the StepIO returned no array", id);
    // As PopART does: INT64 host data for an INT32 input is converted (numpy's default integer
    // type is int64), with one warning per input.
    if (a.dtype() == DataType::Int64 && info.dataType() == DataType::Int32) {
      if (int64InputsWarned_.insert(id).second)
        GRAFT_LOG_WARN(
            "input '{}' is INT32, but the StepIO gives INT64 data: it is converted (values outside INT32's "
            "range wrap)",
            id);
      a = ops::castArray(a, DataType::Int32);
    }
    GRAFT_CHECK(a.dtype() == info.dataType(), "input '{}' is {} ({}), but the model expects {}", id,
                dtypeName(a.dtype()), dtypeNumpyName(a.dtype()), info.str());
    if (info.hasShape()) {
      bool ok = a.rank() == info.rank();
      for (int64_t d = 0; ok && d < a.rank(); ++d) {
        const Dim& dim = info.dims()[d];
        if (dim.known())
          ok = dim.value == a.dim(d);
        else if (!dim.param.empty()) {
          auto [it, fresh] = symbols.emplace(dim.param, a.dim(d));
          GRAFT_CHECK(fresh || it->second == a.dim(d),
                      "input '{}' has {} = {} in dimension {}, but another input set "
                      "'{}' to {}",
                      id, dim.param, a.dim(d), d, dim.param, it->second);
        }
      }
      GRAFT_CHECK(ok, "input '{}' has shape {}, but the model expects {}{}", id, shapeToString(a.shape()), info.str(),
                  leading.empty() ? ""
                                  : fmt::format(" (per model run; StepIO arrays carry the leading dimensions {})",
                                                shapeToString(leading)));
    }
    values.push_back(ops::Value::fromTensor(std::move(a)));
  }
  return values;
}

void Session::Impl::deliverAnchors(IStepIO& io, const std::vector<ops::Value>& outs, int r, AnchorSums& sums) {
  const int runs = dataFlow.batchesPerStep() * accumulationFactor();
  const int b = r / accumulationFactor();  // the batch this micro-batch belongs to
  const auto& anchors = dataFlow.anchors();
  for (size_t i = 0; i < anchors.size(); ++i) {
    const TensorId& id = anchors[i];
    const ops::Value& v = outs[i];
    bool whole = !v.isTensor() || io.takesValues(id);
    GRAFT_CHECK(!whole || dataFlow.art(id).id() != AnchorReturnTypeId::Sum,
                "anchor '{}' has AnchorReturnType Sum, but its value is {}, which cannot be summed over the runs "
                "of a step",
                id, v.isTensor() ? "returned whole (its shape is decided by the run)" : "not a tensor");
    if (options.detectNonFinite && v.isTensor()) {
      std::string bad = firstNonFinite(v.tensor);
      GRAFT_CHECK(bad.empty(),
                  "step {} (model run {} of {}): anchor '{}' is not finite ({}); stopped (SessionOptions."
                  "detectNonFinite)",
                  steps + 1, r + 1, runs, id, bad);
    }
    const AnchorReturnType& art = dataFlow.art(id);
    bool deliver = false;
    const NDArray* value = &v.tensor;
    switch (art.id()) {
      case AnchorReturnTypeId::All:
        deliver = true;
        break;
      case AnchorReturnTypeId::EveryN:
        deliver = (b + 1) % art.rp() == 0;
        break;
      case AnchorReturnTypeId::Final:
        deliver = r == runs - 1;
        break;
      case AnchorReturnTypeId::Sum: {
        auto it = sums.find(id);
        if (it == sums.end())
          it = sums.emplace(id, v.tensor.clone()).first;
        else
          addInto(it->second, v.tensor);
        deliver = r == runs - 1;
        value = &it->second;
        break;
      }
    }
    if (!deliver) continue;
    if (whole) {
      io.outValue(id, stepValueOf(v));
      io.outComplete(id);
      continue;
    }
    NDArray dst = io.out(id, value->dtype(), value->shape());
    dst.copyFrom(*value);
    io.outComplete(id);
  }
}

void Session::Impl::run(IStepIO& io) {
  if (replicated()) {
    runReplicated(io);
    return;
  }
  if (usesStages()) {
    runStaged(io);
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  int runs = dataFlow.batchesPerStep() * accumulationFactor();
  int accum = accumulationFactor();
  bool trace = !options.timelinePath.empty();
  lastTimeline = trace ? std::make_unique<pipeline::Timeline>(std::vector<std::string>{"host"}) : nullptr;
  beginStep(io);
  AnchorSums sums;
  for (int r = 0; r < runs; ++r) {
    double s0 = trace ? lastTimeline->now() : 0;
    std::vector<ops::Value> outs = execute(readInputs(io));
    if (trace) lastTimeline->add({0, "model", s0, lastTimeline->now() - s0, r});
    for (const auto& id : inputIds) io.inComplete(id);
    deliverAnchors(io, outs, r, sums);
    if (lastPlan->applyExe && (r + 1) % accum == 0) {
      double a0 = trace ? lastTimeline->now() : 0;
      lastPlan->applyExe->run({});
      if (trace) lastTimeline->add({0, "optimizer step", a0, lastTimeline->now() - a0, r});
    }
  }
  ++steps;
  writeTimeline();
  lastRunSeconds = secondsSince(t0);
}

std::vector<ops::Value> Session::Impl::execute(std::vector<ops::Value> inputs) {
  std::vector<Shape> shapes;
  shapes.reserve(inputs.size());
  for (const auto& v : inputs) shapes.push_back(v.isTensor() ? v.tensor.shape() : Shape{-1});
  Plan& p = planFor(shapes);
  lastPlan = &p;
  if (p.threads == 0) return tryFewerThreads(p, std::move(inputs));
  return p.exe->run(std::move(inputs));
}

std::vector<ops::Value> Session::Impl::tryFewerThreads(Plan& p, std::vector<ops::Value> inputs) {
  p.threads = backend->numThreads();
  const char* env = std::getenv("GRAFT_AUTO_THREADS");
  const std::string mode = env ? env : "";
  GRAFT_CHECK(mode.empty() || mode == "0" || mode == "1" || mode == "steps",
              "GRAFT_AUTO_THREADS is '{}': 0 (off), 1 (keep the one-thread plan), steps (keep the mixed plan, every "
              "step that can on one thread) or unset",
              mode);
  // Only where running a step a few more times changes nothing: inference graphs whose every
  // node is repeatable (no random or collective ops, no state written, no subgraphs).
  const std::vector<ir::Node*> nodes = p.graph->nodes();
  const bool pure = !isTraining() && device->type() != DeviceType::Reference &&
                    std::all_of(nodes.begin(), nodes.end(), [](const ir::Node* n) { return ops::repeatable(*n); });
  if (!options.autoThreads || mode == "0" || !pure || p.threads <= 1) return p.exe->run(std::move(inputs));
  auto copy = [&] {
    std::vector<ops::Value> c = inputs;
    for (auto& v : c)
      if (v.isTensor()) v.tensor = v.tensor.clone();  // a step may write into its inputs' buffers
    return c;
  };
  auto seconds = [&](plan::Executable& e) {
    auto in = copy();
    auto t0 = std::chrono::steady_clock::now();
    e.run(std::move(in));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Steps of at most this long get the trial (it runs about 17 steps and two compilations).
  constexpr double kAutoThreadsMaxStep = 0.020;
  p.exe->setProfiling(false);  // the trial is not part of the profile
  seconds(*p.exe);             // warm: first-touch of the buffers, oneDNN's first calls
  double many = seconds(*p.exe);
  if (many < kAutoThreadsMaxStep || mode == "1") {
    if (!backend1) {
      backend1 = backends::makeCpuBackend(1, options.enableBf16);
      pool1 = std::make_unique<support::ThreadPool>(1);
    }
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<plan::Executable> one = plan::compile(*p.graph, *backend1, *pool1);
    double compile = secondsSince(t0);
    seconds(*one);
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    // Alternated, median of three each (the machine's speed drifts within a second), with the
    // time of every step: under passive waits each parallel region wakes a sleeping thread, which
    // small kernels do not repay, while large ones do.
    const size_t n = p.exe->numSteps();
    std::vector<std::vector<double>> stepMany(n), stepOne(n);
    std::vector<double> tm, t1;
    p.exe->setStepTiming(true);
    one->setStepTiming(true);
    for (int i = 0; i < 3; ++i) {
      tm.push_back(seconds(*p.exe));
      t1.push_back(seconds(*one));
      for (size_t s = 0; s < n && s < one->numSteps(); ++s) {
        stepMany[s].push_back(p.exe->stepSeconds()[s]);
        stepOne[s].push_back(one->stepSeconds()[s]);
      }
    }
    p.exe->setStepTiming(false);
    one->setStepTiming(false);
    const double mMany = median(tm), mOne = median(t1);
    // One thread must win clearly: the many-thread plan is what numThreads asked for.
    bool keepOne = mode == "1" || mOne < 0.9 * mMany;
    // The mixed plan: the many-thread plan with each step that ran faster on one thread running
    // the one-thread plan's kernel (where both chose the same kernel). Kept when it beats both.
    std::unique_ptr<plan::Executable> mixed;
    int adopted = 0;
    double mMixed = 0;
    if (mode != "1") {
      mixed = plan::compile(*p.graph, *backend, *pool);
      for (size_t s = 0; s < n; ++s)
        if (!stepOne[s].empty() && (mode == "steps" || median(stepOne[s]) < median(stepMany[s])) &&
            mixed->adoptStep(s, *one, " on 1 thread"))
          ++adopted;
      if (adopted > 0) {
        seconds(*mixed);
        std::vector<double> tx;
        for (int i = 0; i < 3; ++i) tx.push_back(seconds(*mixed)), tm.push_back(seconds(*p.exe));
        mMixed = median(tx);
      }
    }
    const double mMany2 = median(tm);
    const bool keepMixed = adopted > 0 && (mode == "steps" || (mMixed < 0.95 * mMany2 && (!keepOne || mMixed < mOne)));
    if (keepMixed) keepOne = false;
    GRAFT_LOG_INFO(
        "'{}': a step takes {:.2f} ms on {} threads, {:.2f} ms on one{} (medians of 3, alternated; compiled for one "
        "thread in {:.3f} s): {} (SessionOptions.autoThreads{})",
        p.graph->name(), mMany2 * 1e3, p.threads, mOne * 1e3,
        adopted > 0 ? fmt::format(", {:.2f} ms with {} of {} steps on one", mMixed * 1e3, adopted, n) : "", compile,
        keepOne     ? "runs on one thread"
        : keepMixed ? fmt::format("{} steps run on one thread", adopted)
                    : fmt::format("stays on {}", p.threads),
        mode.empty() ? "" : ", GRAFT_AUTO_THREADS=" + mode);
    if (keepOne) {
      p.exe = std::move(one);
      p.threads = 1;
    } else if (keepMixed) {
      one->releaseArena();
      p.exe = std::move(mixed);
      p.oneThread = std::move(one);
    }
  }
  p.exe->setProfiling(options.enableProfiling, options.profileByNode);
  return p.exe->run(std::move(inputs));
}

// ---- Session -----------------------------------------------------------------------------------

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

void Session::prepareDevice() {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  if (impl_->comm && !impl_->prepared) impl_->checkPeersAgree();
  if (auto shapes = impl_->staticInputShapes()) impl_->lastPlan = &impl_->planFor(*shapes);
  impl_->prepared = true;
}

void Session::run(IStepIO& stepIO, const std::string&) {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  if (!impl_->prepared) prepareDevice();
  impl_->run(stepIO);
  if (impl_->options.detectNonFinite && impl_->isTraining())
    for (const TensorId& id : impl_->persistentIds()) {
      const ir::Tensor* t = impl_->model.graph->findTensor(id);
      std::string bad = t && t->data() ? firstNonFinite(*t->data()) : "";
      GRAFT_CHECK(bad.empty(),
                  "step {}: '{}' is not finite after the update ({}): a gradient or optimizer update was "
                  "not finite; stopped (SessionOptions.detectNonFinite)",
                  impl_->steps, id, bad);
    }
}

void Session::weightsFromHost() {
  if (impl_->comm) impl_->broadcastWeights();
}
void Session::weightsToHost() {}

std::vector<TensorId> Session::inputIds() const { return impl_->inputIds; }

TensorInfo Session::inputInfo(const TensorId& id) const {
  auto it = impl_->inputInfos.find(id);
  GRAFT_CHECK(it != impl_->inputInfos.end(), "'{}' is not an input of the model (inputs: {})", id,
              listIds(impl_->inputIds));
  return it->second;
}

TensorInfo Session::getInfo(const TensorId& id) const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  const ir::Graph& g = *impl_->anyPlan().graph;
  const ir::Tensor* t = g.findTensor(id);
  if (!t) t = impl_->model.graph->findTensor(id);
  GRAFT_CHECK(t, "'{}' is not a tensor of the model", id);
  return t->info();
}

Shape Session::inputArrayShape(const TensorId& id) const {
  TensorInfo info = inputInfo(id);
  Shape s = info.shape();
  Shape lead = impl_->leadingDims();
  s.insert(s.begin(), lead.begin(), lead.end());
  return s;
}

Shape Session::anchorArrayShape(const TensorId& id) const {
  const AnchorReturnType& art = impl_->dataFlow.art(id);
  GRAFT_CHECK(anchorIsFixed(id),
              "the shape of anchor '{}' is not known before running ({}); the run returns it whole "
              "(initAnchorArrays leaves it to the run), or give InputShapeInfo",
              id,
              impl_->lastPlan || impl_->staticInputShapes() ? getInfo(id).str()
                                                            : "the model's inputs have symbolic dimensions");
  TensorInfo info = getInfo(id);
  Shape s = info.shape();
  int bps = impl_->dataFlow.batchesPerStep();
  int accum = impl_->accumulationFactor();
  Shape lead;
  if (art.id() == AnchorReturnTypeId::All || art.id() == AnchorReturnTypeId::EveryN) {
    int64_t batches = art.id() == AnchorReturnTypeId::All ? bps : bps / art.rp();
    if (batches > 1) lead.push_back(batches);
    if (accum > 1) lead.push_back(accum);
  }
  // Every anchor comes back per replica (PopART's layout: the replica dimension last of the leading
  // ones, for every return type).
  if (impl_->localReplicas() > 1) lead.push_back(impl_->localReplicas());
  s.insert(s.begin(), lead.begin(), lead.end());
  return s;
}

DataType Session::anchorDataType(const TensorId& id) const { return getInfo(id).dataType(); }

bool Session::anchorIsFixed(const TensorId& id) const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  impl_->dataFlow.art(id);  // graft::Error for an id that is no anchor
  const ir::Tensor* t = impl_->model.graph->findTensor(id);
  if (t && !t->type().isTensor()) return false;
  if (!impl_->staticInputShapes()) return false;  // symbolic inputs: each run's shapes decide
  const ir::Tensor* c = impl_->anyPlan().graph->findTensor(id);
  if (c) t = c;
  return t && t->type().isTensor() && t->info().isStatic();
}

void Session::checkAnchorArraysFit() const {
  int64_t total = 0;
  std::string largest;
  int64_t largestBytes = -1;
  for (const auto& id : impl_->dataFlow.anchors()) {
    if (!anchorIsFixed(id)) continue;
    DataType dt = anchorDataType(id);
    int64_t bytes = dt == DataType::String ? 32 : static_cast<int64_t>(dtypeSize(dt));
    Shape s = anchorArrayShape(id);
    for (int64_t d : s) bytes = support::saturatingMul(bytes, d);
    total = support::saturatingAdd(total, bytes);
    if (bytes > largestBytes)
      largestBytes = bytes, largest = fmt::format("'{}', {} {}", id, dtypeName(dt), shapeToString(s));
  }
  support::checkAllocation(fmt::format("initAnchorArrays (the largest anchor array: {})", largest), total);
}

std::map<TensorId, NDArray> Session::initAnchorArrays() const {
  checkAnchorArraysFit();
  std::map<TensorId, NDArray> out;
  for (const auto& id : impl_->dataFlow.anchors())
    if (anchorIsFixed(id)) out.emplace(id, NDArray(anchorDataType(id), anchorArrayShape(id)));
  return out;
}

const DataFlow& Session::dataFlow() const { return impl_->dataFlow; }
const DeviceInfo& Session::device() const { return *impl_->device; }
double Session::lastRunSeconds() const { return impl_->lastRunSeconds; }
double Session::lastCompileSeconds() const { return impl_->lastCompileSeconds; }
int Session::kernelThreads() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  if (impl_->lastPlan && impl_->lastPlan->threads > 0) return impl_->lastPlan->threads;
  if (impl_->replicated() || impl_->usesStages()) return impl_->threadsPerDevice();
  return impl_->backend->numThreads();
}

std::vector<OpProfile> Session::profile() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  std::vector<OpProfile> out;
  if (!impl_->lastPlan) return out;
  std::vector<plan::ProfileEntry> entries;
  if (impl_->lastPlan->exe) entries = impl_->lastPlan->exe->profile();
  if (impl_->lastPlan->staged) {
    std::map<std::string, plan::ProfileEntry> merged;
    for (const auto& exe : impl_->lastPlan->staged->exes)
      for (const auto& e : exe->profile()) {
        auto& m = merged[e.opType + '\n' + e.node];
        m.opType = e.opType;
        m.node = e.node;
        m.calls += e.calls;
        m.seconds += e.seconds;
        m.kernels.insert(e.kernels.begin(), e.kernels.end());
      }
    for (const auto& [k, e] : merged) entries.push_back(e);
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  }
  for (const auto& e : entries)
    out.push_back({e.opType, e.calls, e.seconds, std::vector<std::string>(e.kernels.begin(), e.kernels.end()), e.node});
  return out;
}

std::string Session::graphText() const {
  const Impl::Plan& p = impl_->anyPlan();
  if (!p.staged) return ir::printGraph(*p.graph);
  std::string out;
  for (size_t i = 0; i < p.staged->graphs.size(); ++i)
    out += fmt::format("# program {}: {} on virtual device {}\n{}\n", i, p.staged->assignment.programs[i].name,
                       p.staged->assignment.programs[i].device, ir::printGraph(*p.staged->graphs[i].graph));
  return out;
}

std::string Session::stagesText() const {
  const Impl::Plan& p = impl_->anyPlan();
  // Replicated: every replica has the same split; the first's stands for them.
  if (!p.replicas.empty() && p.replicas[0]->staged)
    return fmt::format("each of {} replicas: {}", p.replicas.size(), p.replicas[0]->staged->summary);
  if (!p.staged) return "";
  return p.staged->summary;
}

std::vector<int64_t> Session::replicaOptimizerStateBytes() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  return impl_->replicaOptimizerStateBytes();
}

std::string Session::timelineJson() const { return impl_->lastTimeline ? impl_->lastTimeline->chromeTraceJson() : ""; }

MemoryPlanSummary Session::memoryPlan(bool perValue) const {
  const Impl::Plan& p = impl_->anyPlan();
  MemoryPlanSummary s;
  std::set<std::string> counted;
  auto add = [&](const plan::Executable& exe, const ir::Graph& g, const char* title) {
    const plan::MemoryPlan& m = exe.memoryPlan();
    s.arenaBytes += static_cast<int64_t>(m.arenaBytes);
    s.unsharedBytes += static_cast<int64_t>(m.unsharedBytes);
    for (const plan::MemoryEntry& e : m.entries) {
      switch (e.placement) {
        case plan::Placement::Arena:
          ++s.arenaValues;
          break;
        case plan::Placement::View:
          ++s.viewValues;
          break;
        case plan::Placement::InPlace:
          ++s.inplaceValues;
          break;
        case plan::Placement::Heap:
          ++s.heapValues;
          break;
      }
    }
    for (const ir::Tensor* t : g.initializers())
      if (t->data() && t->data()->dtype() != DataType::String && counted.insert(t->id()).second)
        s.persistentBytes += static_cast<int64_t>(t->data()->nbytes());
    s.text += fmt::format("{} ({} steps)\n{}", title, exe.numSteps(), m.summary(perValue));
  };
  // Sessions split over virtual devices compile one executable per program (not summarised here).
  if (p.exe)
    add(*p.exe, *p.graph, p.applyExe ? "step (forward, backward, accumulation)" : "step");
  else
    s.text += "step split over virtual devices: one plan per program (not summarised)\n";
  if (p.applyExe) add(*p.applyExe, *p.applyGraph, "optimizer step (every accumulationFactor micro-batches)");
  s.text += fmt::format("persistent  {} bytes of weights, optimizer state and constants\n", s.persistentBytes);
  return s;
}

std::string Session::modelBytes() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  impl_->materializeShardedState();
  return onnxio::saveModelBytes(*impl_->model.graph, impl_->model.info);
}

void Session::modelToHost(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  impl_->materializeShardedState();  // over MPI a collective: every process calls modelToHost
  // Distributed: the processes hold the same weights; one of them writes the checkpoint.
  if (impl_->comm && impl_->comm->rank() != 0) return;
  onnxio::saveModelFile(*impl_->model.graph, path, impl_->model.info);
}

std::unique_ptr<InferenceSession> InferenceSession::createFromOnnxModel(
    const std::string& model, const DataFlow& dataFlow, std::shared_ptr<DeviceInfo> deviceInfo,
    const InputShapeInfo& inputShapeInfo, const SessionOptions& userOptions, const Patterns&) {
  auto impl = std::make_unique<Session::Impl>();
  impl->init(model, dataFlow, std::move(deviceInfo), inputShapeInfo, userOptions);
  return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
}

}  // namespace graft

// ---- weights -----------------------------------------------------------------------------------

namespace graft {

const NDArray& WeightsIO::weight(const TensorId& id) const {
  auto it = arrays_.find(id);
  GRAFT_CHECK(it != arrays_.end(), "WeightsIO has no array for '{}'", id);
  return it->second;
}

namespace {
ir::Tensor& persistentTensor(Session::Impl& impl, const TensorId& id) {
  ir::Tensor* t = impl.model.graph->findTensor(id);
  auto ids = impl.persistentIds();
  GRAFT_CHECK(t && t->data() && std::find(ids.begin(), ids.end(), id) != ids.end(),
              "'{}' is not a weight or optimizer state of the session (weights: {})", id,
              ids.size() > 20
                  ? fmt::format("{}, ... ({} in all)", fmt::join(ids.begin(), ids.begin() + 20, ", "), ids.size())
                  : fmt::format("{}", fmt::join(ids, ", ")));
  return *t;
}

void checkSameType(const NDArray& a, const NDArray& b, const TensorId& id) {
  GRAFT_CHECK(a.dtype() == b.dtype() && a.shape() == b.shape(),
              "WeightsIO array for '{}' is {} {}, the weight is {} {}", id, dtypeName(a.dtype()),
              shapeToString(a.shape()), dtypeName(b.dtype()), shapeToString(b.shape()));
}
}  // namespace

void Session::readWeights(WeightsIO& io) const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  impl_->materializeShardedState();
  for (const auto& [id, arr] : io.arrays()) {
    const ir::Tensor& t = persistentTensor(*impl_, id);
    checkSameType(arr, *t.data(), id);
    NDArray dst = arr;
    dst.copyFrom(*t.data());
  }
}

void Session::writeWeights(const WeightsIO& io) {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  impl_->materializeShardedState();
  for (const auto& [id, arr] : io.arrays()) {
    ir::Tensor& t = persistentTensor(*impl_, id);
    checkSameType(arr, *t.data(), id);
    t.mutableData()->copyFrom(arr);  // in place: compiled plans share the buffer
    impl_->writeReplicaCopies(id, *t.data());
  }
  if (impl_->weightsAreConstant()) {
    // Weights may have been folded into constants: compile again on the next run.
    impl_->plans.clear();
    impl_->lastPlan = nullptr;
    impl_->prepared = false;
  }
}

std::vector<TensorId> Session::weightIds() const {
  std::vector<TensorId> ids;
  for (const ir::Tensor* t : impl_->model.graph->initializers())
    if (t->kind() == ir::TensorKind::Variable) ids.push_back(t->id());
  return ids;
}

void Session::resetHostWeights(const std::string& model, bool ignoreExtra) {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  onnxio::Model other = loadModelArgument(model);
  WeightsIO io;
  auto ids = impl_->persistentIds();
  for (const ir::Tensor* t : other.graph->initializers()) {
    if (t->kind() != ir::TensorKind::Variable) continue;
    if (std::find(ids.begin(), ids.end(), t->id()) == ids.end()) {
      GRAFT_CHECK(ignoreExtra,
                  "resetHostWeights: the model has a weight '{}' that the session does not (pass "
                  "ignoreWeightsInModelWithoutCorrespondingHostWeight=true to skip it)",
                  t->id());
      continue;
    }
    io.insert(t->id(), *t->data());
  }
  writeWeights(io);
}

}  // namespace graft
