// Bindings of the value types: TensorInfo, DataFlow, AnchorReturnType, InputShapeInfo, devices,
// session options, patterns and logging.
#include <pybind11/stl.h>
#include <graft/graft.hpp>

#include "bindings.hpp"
#include "numpy_util.hpp"
#include "ops/random_seed.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft::py {

int64_t checkedInt(pyb::handle value, const char* what, int64_t lo, int64_t hi) {
  PyObject* index = PyNumber_Index(value.ptr());
  if (!index) {
    PyErr_Clear();
    GRAFT_THROW("{} must be of type int, got {}", what,
                std::string(pyb::str(pyb::type::handle_of(value).attr("__name__"))));
  }
  pyb::object owned = pyb::reinterpret_steal<pyb::object>(index);
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
  GRAFT_CHECK(!overflow && v >= lo && v <= hi, "{} must be an integer from {} to {}, got {}", what, lo, hi,
              std::string(pyb::str(owned)));
  return v;
}

namespace {

// TensorInfo dimensions from Python: ints, strings (named symbolic dims) or None (unknown).
std::vector<Dim> dimsFrom(pyb::handle shape) {
  std::vector<Dim> dims;
  for (pyb::handle d : shape) {
    if (d.is_none())
      dims.emplace_back();
    else if (pyb::isinstance<pyb::str>(d))
      dims.emplace_back(d.cast<std::string>());
    else {
      int64_t v = pyb::int_(pyb::reinterpret_borrow<pyb::object>(d)).cast<int64_t>();
      GRAFT_CHECK(v >= 0, "TensorInfo: dimension {} is negative; use None or a name for an unknown dimension", v);
      dims.emplace_back(v);
    }
  }
  return dims;
}

pyb::list dimsTo(const TensorInfo& info) {
  pyb::list out;
  for (const Dim& d : info.dims()) {
    if (d.known())
      out.append(d.value);
    else if (!d.param.empty())
      out.append(d.param);
    else
      out.append(pyb::none());
  }
  return out;
}

std::map<std::string, std::string> stringMap(const pyb::dict& d) {
  std::map<std::string, std::string> out;
  for (auto [k, v] : d) out[pyb::str(k).cast<std::string>()] = pyb::str(v).cast<std::string>();
  return out;
}

void bindTensorInfo(pyb::module_& m) {
  pyb::enum_<DataType>(m, "DataType")
      .value("UNDEFINED", DataType::Undefined)
      .value("FLOAT", DataType::Float)
      .value("UINT8", DataType::UInt8)
      .value("INT8", DataType::Int8)
      .value("UINT16", DataType::UInt16)
      .value("INT16", DataType::Int16)
      .value("INT32", DataType::Int32)
      .value("INT64", DataType::Int64)
      .value("STRING", DataType::String)
      .value("BOOL", DataType::Bool)
      .value("FLOAT16", DataType::Float16)
      .value("DOUBLE", DataType::Double)
      .value("UINT32", DataType::UInt32)
      .value("UINT64", DataType::UInt64)
      .value("BFLOAT16", DataType::BFloat16);

  pyb::class_<TensorInfo>(m, "_TensorInfoCore")
      .def(pyb::init([](pyb::object dtype, pyb::object shape) {
             return TensorInfo(dtypeFromObject(dtype, "TensorInfo"), dimsFrom(shape));
           }),
           pyb::arg("dataType"), pyb::arg("shape"))
      .def("data_type", [](const TensorInfo& t) { return std::string(dtypeName(t.dataType())); })
      .def("data_type_lcase", [](const TensorInfo& t) { return std::string(dtypeNumpyName(t.dataType())); })
      .def("dataType", &TensorInfo::dataType)
      .def("shape",
           [](const TensorInfo& t) -> pyb::object {
             if (t.isStatic()) return pyb::cast(t.shape());
             GRAFT_CHECK(t.hasShape(), "TensorInfo {}: the rank is not known", t.str());
             return dimsTo(t);
           })
      .def("dims", &dimsTo)
      .def("hasShape", &TensorInfo::hasShape)
      .def("isStatic", &TensorInfo::isStatic)
      .def("rank", &TensorInfo::rank)
      .def("dim",
           [](const TensorInfo& t, int64_t i) {
             GRAFT_CHECK(i >= -t.rank() && i < t.rank(), "TensorInfo {}: dimension {} is out of range", t.str(), i);
             const Dim& d = t.dims()[static_cast<size_t>(i < 0 ? i + t.rank() : i)];
             GRAFT_CHECK(d.known(), "TensorInfo {}: dimension {} is not known", t.str(), i);
             return d.value;
           })
      .def("nelms", &TensorInfo::nelms)
      .def("nbytes", &TensorInfo::nbytes)
      .def("numpyDtype", [](const TensorInfo& t) { return numpyDtype(t.dataType()); })
      .def("__eq__", [](const TensorInfo& a, const TensorInfo& b) { return a == b; })
      .def("__str__", &TensorInfo::str)
      .def("__repr__", [](const TensorInfo& t) { return "TensorInfo(" + t.str() + ")"; });

  pyb::class_<InputShapeInfo>(m, "InputShapeInfo")
      .def(pyb::init<>())
      .def("add", &InputShapeInfo::add, pyb::arg("tensorId"), pyb::arg("info"))
      .def("get",
           [](const InputShapeInfo& s, const TensorId& id) {
             GRAFT_CHECK(s.has(id), "InputShapeInfo has no entry for '{}'", id);
             return s.get(id);
           })
      .def("has", &InputShapeInfo::has)
      .def("getAllTensorInfo", &InputShapeInfo::getAllTensorInfo);
}

void bindDataFlow(pyb::module_& m) {
  pyb::enum_<AnchorReturnTypeId>(m, "AnchorReturnTypeId")
      .value("Final", AnchorReturnTypeId::Final)
      .value("EveryN", AnchorReturnTypeId::EveryN)
      .value("All", AnchorReturnTypeId::All)
      .value("Sum", AnchorReturnTypeId::Sum);

  // PopART's tileSet and exchangeStrategy arguments select IPU tiles; they are accepted and
  // ignored.
  pyb::class_<AnchorReturnType>(m, "AnchorReturnType")
      .def(pyb::init([](const std::string& name, pyb::object period, pyb::args, pyb::kwargs) {
             // PopART's (name, tileSet, exchangeStrategy) overload: a second argument that is no
             // integer is a tile set.
             if (!PyIndex_Check(period.ptr())) return AnchorReturnType(name);
             return AnchorReturnType(name, static_cast<int>(checkedInt(period, "AnchorReturnType: returnPeriod")));
           }),
           pyb::arg("anchorReturnTypeString"), pyb::arg("returnPeriod"))
      .def(pyb::init([](const std::string& name, pyb::args, pyb::kwargs) { return AnchorReturnType(name); }),
           pyb::arg("anchorReturnTypeString"))
      .def("id", &AnchorReturnType::id)
      .def("rp", &AnchorReturnType::rp)
      .def("str", &AnchorReturnType::str)
      .def("__repr__", [](const AnchorReturnType& a) {
        return a.id() == AnchorReturnTypeId::EveryN ? fmt::format("AnchorReturnType(\"EveryN\", {})", a.rp())
                                                    : fmt::format("AnchorReturnType(\"{}\")", a.str());
      });

  pyb::class_<DataFlow>(m, "DataFlow")
      .def(pyb::init<>())
      .def(pyb::init([](pyb::object bps, const AnchorReturnTypeMap& anchors) {
             return DataFlow(static_cast<int>(checkedInt(bps, "DataFlow: batchesPerStep")), anchors);
           }),
           pyb::arg("batchesPerStep"), pyb::arg("anchorTensors"))
      .def(pyb::init([](pyb::object bps, const std::vector<TensorId>& ids, const AnchorReturnType& art) {
             return DataFlow(static_cast<int>(checkedInt(bps, "DataFlow: batchesPerStep")), ids, art);
           }),
           pyb::arg("batchesPerStep"), pyb::arg("anchorIds"), pyb::arg("anchorReturnType") = AnchorReturnType("All"))
      .def("isAnchored", &DataFlow::isAnchored)
      .def("nAnchors", [](const DataFlow& d) { return d.anchors().size(); })
      .def("batchesPerStep", &DataFlow::batchesPerStep)
      .def("anchors", &DataFlow::anchors)
      .def("art", &DataFlow::art)
      .def("__repr__", [](const DataFlow& d) {
        return fmt::format("DataFlow(batchesPerStep={}, anchors=[{}])", d.batchesPerStep(),
                           fmt::join(d.anchors(), ", "));
      });
}

void bindDevices(pyb::module_& m) {
  pyb::enum_<DeviceType>(m, "DeviceType").value("Cpu", DeviceType::Cpu).value("Reference", DeviceType::Reference);

  pyb::class_<DeviceInfo, std::shared_ptr<DeviceInfo>>(m, "DeviceInfo")
      .def_property_readonly("type", &DeviceInfo::type)
      .def_property_readonly("id", &DeviceInfo::id)
      .def_property_readonly("numIpus", &DeviceInfo::getNumIpus)
      .def_property_readonly("numVirtualDevices", &DeviceInfo::numVirtualDevices)
      .def_property_readonly("threadsPerVirtualDevice", &DeviceInfo::threadsPerVirtualDevice)
      .def_property_readonly("isAttached", [](const DeviceInfo&) { return true; })
      // graft's devices are always available: attaching succeeds and detaching does nothing.
      .def("attach", [](DeviceInfo&) { return true; })
      .def("tryAttachUntilTimeout", [](DeviceInfo&) { return true; })
      .def("detach", [](DeviceInfo&) {})
      .def("__enter__", [](pyb::object self) { return self; })
      .def("__exit__", [](DeviceInfo&, pyb::args) { return false; })
      .def("__repr__", &DeviceInfo::str);

  auto dictOpts = [](const pyb::object& d) {
    return d.is_none() ? std::map<std::string, std::string>{} : stringMap(d.cast<pyb::dict>());
  };
  pyb::class_<DeviceManager, std::unique_ptr<DeviceManager, pyb::nodelete>>(m, "DeviceManager")
      .def(pyb::init(
          [] { return std::unique_ptr<DeviceManager, pyb::nodelete>(&DeviceManager::createDeviceManager()); }))
      .def(
          "createCpuDevice",
          [](DeviceManager& dm, pyb::object n, pyb::object cores) {
            return dm.createCpuDevice(static_cast<int>(checkedInt(n, "createCpuDevice: numVirtualDevices")),
                                      static_cast<int>(checkedInt(cores, "createCpuDevice: coresPerVirtualDevice")));
          },
          pyb::arg("numVirtualDevices") = 1, pyb::arg("coresPerVirtualDevice") = 0)
      .def(
          "createReferenceDevice",
          [](DeviceManager& dm, pyb::object n) {
            return dm.createReferenceDevice(
                static_cast<int>(checkedInt(n, "createReferenceDevice: numVirtualDevices")));
          },
          pyb::arg("numVirtualDevices") = 1)
      .def(
          "createIpuModelDevice",
          [dictOpts](DeviceManager& dm, pyb::object opts) { return dm.createIpuModelDevice(dictOpts(opts)); },
          pyb::arg("opts") = pyb::none())
      .def(
          "createOfflineIpuDevice",
          [dictOpts](DeviceManager& dm, pyb::object opts) { return dm.createOfflineIpuDevice(dictOpts(opts)); },
          pyb::arg("opts") = pyb::none())
      .def(
          "createOfflineIPUDevice",
          [dictOpts](DeviceManager& dm, pyb::object opts) { return dm.createOfflineIpuDevice(dictOpts(opts)); },
          pyb::arg("opts") = pyb::none())
      // PopART's tilesPerIpu, pattern, connectionType and selectionCriterion do not apply.
      .def(
          "acquireAvailableDevice",
          [](DeviceManager& dm, int numIpus, pyb::args, pyb::kwargs) { return dm.acquireAvailableDevice(numIpus); },
          pyb::arg("numIpus") = 1)
      .def(
          "tryAcquireAvailableDevice",
          [](DeviceManager& dm, int numIpus, pyb::args, pyb::kwargs) { return dm.acquireAvailableDevice(numIpus); },
          pyb::arg("numIpus") = 1)
      // graft drives no IPU hardware: PopART's list of attached IPUs is empty here.
      .def(
          "enumerateDevices", [](DeviceManager&, pyb::args, pyb::kwargs) { return pyb::list(); },
          "The IPU devices present: none (graft runs on CPUs; use createCpuDevice).")
      .def(
          "setOnDemandAttachTimeout", [](DeviceManager&, pyb::args) {},
          "PopART's wait for an IPU to become free: there are no IPUs to wait for, so it has no effect.");
}

void bindOptions(pyb::module_& m) {
  pyb::enum_<VirtualGraphMode>(m, "VirtualGraphMode")
      .value("Off", VirtualGraphMode::Off)
      .value("Manual", VirtualGraphMode::Manual)
      .value("Auto", VirtualGraphMode::Auto);
  pyb::enum_<ReductionType>(m, "ReductionType")
      .value("Sum", ReductionType::Sum)
      .value("Mean", ReductionType::Mean)
      .value("NoReduction", ReductionType::NoReduction);
  pyb::enum_<MeanReductionStrategy>(m, "MeanReductionStrategy")
      .value("Running", MeanReductionStrategy::Running)
      .value("Post", MeanReductionStrategy::Post)
      .value("PostAndLoss", MeanReductionStrategy::PostAndLoss);
  pyb::enum_<RecomputationType>(m, "RecomputationType")
      .value("NoRecompute", RecomputationType::None)
      .value("Standard", RecomputationType::Standard)
      .value("NormOnly", RecomputationType::NormOnly)
      .value("Pipeline", RecomputationType::Pipeline)
      .value("RecomputeAll", RecomputationType::RecomputeAll);

  // Every field of graft::SessionOptions; the Python class SessionOptions (graft/options.py)
  // adds PopART's option names on top.
  pyb::class_<SessionOptions>(m, "_SessionOptionsCore")
      .def(pyb::init<>())
      .def_readwrite("enableGradientAccumulation", &SessionOptions::enableGradientAccumulation)
      .def_property(
          "accumulationFactor", [](const SessionOptions& o) { return o.accumulationFactor; },
          [](SessionOptions& o, pyb::object v) {
            o.accumulationFactor = static_cast<int>(checkedInt(v, "SessionOptions.accumulationFactor"));
          })
      .def_readwrite("accumulationAndReplicationReductionType",
                     &SessionOptions::accumulationAndReplicationReductionType)
      .def_readwrite("virtualGraphMode", &SessionOptions::virtualGraphMode)
      .def_readwrite("enablePipelining", &SessionOptions::enablePipelining)
      .def_readwrite("autoRecomputation", &SessionOptions::autoRecomputation)
      .def_readwrite("enableReplicatedGraphs", &SessionOptions::enableReplicatedGraphs)
      .def_property(
          "replicatedGraphCount", [](const SessionOptions& o) { return o.replicatedGraphCount; },
          [](SessionOptions& o, pyb::object v) {
            o.replicatedGraphCount = static_cast<int>(checkedInt(v, "SessionOptions.replicatedGraphCount"));
          })
      .def_readwrite("meanAccumulationAndReplicationReductionStrategy",
                     &SessionOptions::meanAccumulationAndReplicationReductionStrategy)
      .def_readwrite("enableDistributedReplicatedGraphs", &SessionOptions::enableDistributedReplicatedGraphs)
      .def_readwrite("globalReplicationFactor", &SessionOptions::globalReplicationFactor)
      .def_readwrite("globalReplicaOffset", &SessionOptions::globalReplicaOffset)
      .def_readwrite("collectiveTimeoutSeconds", &SessionOptions::collectiveTimeoutSeconds)
      .def_readwrite("gradientBucketBytes", &SessionOptions::gradientBucketBytes)
      .def_readwrite("shardOptimizerState", &SessionOptions::shardOptimizerState)
      .def_readwrite("constantWeights", &SessionOptions::constantWeights)
      .def_property(
          "numThreads", [](const SessionOptions& o) { return o.numThreads; },
          [](SessionOptions& o, pyb::object v) {
            o.numThreads = static_cast<int>(checkedInt(v, "SessionOptions.numThreads"));
          })
      .def_readwrite("enableProfiling", &SessionOptions::enableProfiling)
      .def_readwrite("profileByNode", &SessionOptions::profileByNode)
      .def_readwrite("enableBf16", &SessionOptions::enableBf16)
      .def_readwrite("autoThreads", &SessionOptions::autoThreads)
      .def_readwrite("verifyPasses", &SessionOptions::verifyPasses)
      .def_readwrite("dumpGraphAfterPass", &SessionOptions::dumpGraphAfterPass)
      .def_readwrite("logDir", &SessionOptions::logDir)
      .def_readwrite("timelinePath", &SessionOptions::timelinePath)
      .def_readwrite("detectNonFinite", &SessionOptions::detectNonFinite)
      .def_property(
          "pipelineDepth", [](const SessionOptions& o) { return o.pipelineDepth; },
          [](SessionOptions& o, pyb::object v) {
            o.pipelineDepth = static_cast<int>(checkedInt(v, "SessionOptions.pipelineDepth"));
          });

  pyb::enum_<PatternsLevel>(m, "PatternsLevel")
      .value("NoPatterns", PatternsLevel::NoPatterns)
      .value("Minimal", PatternsLevel::Minimal)
      .value("Default", PatternsLevel::Default)
      .value("All", PatternsLevel::All);
  pyb::class_<Patterns>(m, "_PatternsCore")
      .def(pyb::init<PatternsLevel>(), pyb::arg("level") = PatternsLevel::Default)
      .def(pyb::init<std::vector<std::string>>(), pyb::arg("patterns"))
      .def("level", &Patterns::level)
      .def("names", &Patterns::names);
}

void bindLogging(pyb::module_& m) {
  m.def(
      "_dtypeCode", [](pyb::object dt) { return static_cast<int>(dtypeFromObject(dt, "data type")); },
      "The ONNX TensorProto.DataType number of a type name, numpy dtype or numpy type.");
  m.def(
      "_setRandomSeed", [](uint64_t seed) { ops::setRandomSeed(seed); }, pyb::arg("seed"),
      "Seeds every random op without a seed attribute (process-wide; see ops/random_seed.hpp).");
  m.def("_randomSeed", [] { return ops::randomSeed(); });
  m.def(
      "_registeredOps",
      [] {
        std::vector<std::pair<std::string, std::string>> ops;
        for (const ops::OpDef* def : ops::Registry::instance().all()) ops.emplace_back(def->domain, def->type);
        return ops;
      },
      "(domain, type) of every op in graft's registry, gradient and internal ops included.");
  m.def("_setLogLevel", [](const std::string& level) {
    using L = support::LogLevel;
    std::string l;
    for (char c : level) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    static const std::map<std::string, L> levels = {{"trace", L::Trace}, {"debug", L::Debug},    {"info", L::Info},
                                                    {"warn", L::Warn},   {"warning", L::Warn},   {"err", L::Error},
                                                    {"error", L::Error}, {"critical", L::Error}, {"off", L::Off}};
    auto it = levels.find(l);
    GRAFT_CHECK(it != levels.end(), "unknown log level '{}' (expected TRACE, DEBUG, INFO, WARN, ERR, CRITICAL or OFF)",
                level);
    support::setLogLevel(it->second);
  });
}

}  // namespace

void bindCore(pyb::module_& m) {
  bindTensorInfo(m);
  bindDataFlow(m);
  bindDevices(m);
  bindOptions(m);
  bindLogging(m);
}

}  // namespace graft::py
