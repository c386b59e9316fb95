// Bindings of sessions and step IO. The session classes are bound as _SessionCore (what every
// session kind shares) and _InferenceSessionCore; graft/session.py adds PopART's Python methods.
// A training session binds the same way, deriving from _SessionCore.
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <graft/graft.hpp>

#include "bindings.hpp"
#include "numpy_util.hpp"
#include "support/check.hpp"

namespace graft::py {
namespace {

// Holds the arrays a PyStepIO uses; a base class so that it exists before StepIO is built.
struct KeepAlive {
  std::vector<pyb::object> keep_;
};

/// PopART's PyStepIO: numpy arrays used in place. The arrays are referenced here, so they stay
/// alive as long as this object. Beyond PopART it carries every ONNX value type:
/// - inputs: string (str/object) arrays are copied; a sequence input is a list of arrays (with
///   several model runs per step, a list of such lists, one per run); an absent optional is None.
/// - anchors: a numeric array is written in place (PopART's fixed anchors); None (what
///   initAnchorArrays gives for anchors whose shape only the run decides, sequences and optionals)
///   is replaced after the run by the result: an array, a list of arrays for a sequence, None for
///   an absent optional; several results per step are stacked (equal shapes) or listed. A string
///   anchor array is filled after the run.
class PyStepIO : private KeepAlive, public StepIO {
 public:
  PyStepIO(const pyb::dict& inputs, const pyb::dict& outputs)
      : KeepAlive(), StepIO(inputArrays(inputs, keep_), anchorArrays(outputs, keep_)), outputs_(outputs) {
    for (auto [k, v] : inputs) {
      std::string id = dictKeyOf(k, "PyStepIO: input names (tensor ids)");
      if (pyb::isinstance<pyb::list>(v) || pyb::isinstance<pyb::tuple>(v) || v.is_none())
        values_[id] = stepValues(v, fmt::format("PyStepIO: input '{}'", id));
    }
    for (auto [k, v] : outputs) {
      std::string id = dictKeyOf(k, "PyStepIO: anchor names (tensor ids)");
      if (v.is_none() || isStringArray(v)) collected_[id];
    }
  }

  StepValue inValue(const TensorId& id, bool prefetch) override {
    auto it = values_.find(id);
    if (it == values_.end() && inputs().count(id)) {  // an array for an optional input: present
      StepValue sv;
      sv.tensor = StepIO::in(id, TensorInfo{}, prefetch);
      return sv;
    }
    GRAFT_CHECK(it != values_.end(),
                "PyStepIO: model input '{}' is a sequence or an optional: give a list of arrays "
                "(or None for an absent optional)",
                id);
    int64_t i = valueIndex_[id]++;
    const auto& runs = it->second;
    if (runs.size() == 1) return runs[0];  // one value for every run of the step
    GRAFT_CHECK(i < static_cast<int64_t>(runs.size()),
                "PyStepIO: input '{}' holds values for {} model runs, but the "
                "step makes more",
                id, runs.size());
    return runs[static_cast<size_t>(i)];
  }
  bool takesValues(const TensorId& id) const override { return collected_.count(id) != 0; }
  void outValue(const TensorId& id, const StepValue& v) override {
    auto it = collected_.find(id);
    if (it == collected_.end()) StepIO::outValue(id, v);  // graft::Error naming the anchor
    it->second.push_back(v);
  }

  /// Before a run (GIL held).
  void beginRun() {
    valueIndex_.clear();
    for (auto& [id, r] : collected_) r.clear();
  }
  /// After a run (GIL held): the collected anchors into the dict the PyStepIO was made with.
  void deliver() {
    for (auto& [id, results] : collected_) {
      if (results.empty()) continue;
      pyb::object value = pythonValue(results);
      pyb::str key(id);
      pyb::object given = outputs_.contains(key) ? pyb::object(outputs_[key]) : pyb::object(pyb::none());
      if (pyb::isinstance<pyb::array>(given) && pyb::isinstance<pyb::array>(value) &&
          pyb::tuple(given.attr("shape")).equal(pyb::tuple(value.attr("shape")))) {
        given[pyb::ellipsis()] = value;  // a string anchor array of PopART's layout: filled in place
      } else {
        outputs_[key] = value;
      }
      results.clear();
    }
  }

 private:
  static std::map<TensorId, NDArray> inputArrays(const pyb::dict& d, std::vector<pyb::object>& keep) {
    std::map<TensorId, NDArray> out;
    for (auto [k, v] : d) {
      std::string id = dictKeyOf(k, "PyStepIO: input names (tensor ids)");
      std::string what = fmt::format("PyStepIO: input '{}'", id);
      if (pyb::isinstance<pyb::list>(v) || pyb::isinstance<pyb::tuple>(v) || v.is_none()) continue;  // inValue
      out[id] = isStringArray(v) ? stringsOf(v, what) : viewOf(v, what, false);
      keep.push_back(pyb::reinterpret_borrow<pyb::object>(v));
    }
    return out;
  }
  static std::map<TensorId, NDArray> anchorArrays(const pyb::dict& d, std::vector<pyb::object>& keep) {
    std::map<TensorId, NDArray> out;
    for (auto [k, v] : d) {
      std::string id = dictKeyOf(k, "PyStepIO: anchor names (tensor ids)");
      if (v.is_none() || isStringArray(v)) continue;  // returned whole (outValue)
      out[id] = viewOf(v, fmt::format("PyStepIO: anchor '{}'", id), true);
      keep.push_back(pyb::reinterpret_borrow<pyb::object>(v));
    }
    return out;
  }
  static StepValue oneValue(pyb::handle v, const std::string& what) {
    StepValue sv;
    if (v.is_none()) {
      sv.kind = StepValue::Kind::None;
    } else if (pyb::isinstance<pyb::list>(v) || pyb::isinstance<pyb::tuple>(v)) {
      sv.kind = StepValue::Kind::Sequence;
      size_t i = 0;
      for (pyb::handle e : v) sv.items.push_back(copyOf(e, fmt::format("{}, sequence element {}", what, i++)));
    } else {
      sv.tensor = copyOf(v, what);
    }
    return sv;
  }
  // A list of lists (or of None) holds one value per model run; anything else is one value.
  static std::vector<StepValue> stepValues(pyb::handle v, const std::string& what) {
    bool perRun = false;
    if (pyb::isinstance<pyb::list>(v) && pyb::len(v) > 0) {
      perRun = true;
      for (pyb::handle e : v) perRun &= pyb::isinstance<pyb::list>(e) || pyb::isinstance<pyb::tuple>(e) || e.is_none();
    }
    std::vector<StepValue> out;
    if (!perRun) {
      out.push_back(oneValue(v, what));
      return out;
    }
    size_t r = 0;
    for (pyb::handle e : v) out.push_back(oneValue(e, fmt::format("{} (model run {})", what, r++)));
    return out;
  }
  static pyb::object pythonOf(const StepValue& v) {
    if (v.kind == StepValue::Kind::None) return pyb::none();
    if (v.kind == StepValue::Kind::Tensor) return toNumpy(v.tensor);
    pyb::list l;
    for (const NDArray& a : v.items) l.append(toNumpy(a));
    return l;
  }
  // One result: itself. Several: stacked along a new first dimension when they are tensors of one
  // dtype and shape, a list otherwise.
  static pyb::object pythonValue(const std::vector<StepValue>& results) {
    if (results.size() == 1) return pythonOf(results[0]);
    bool stack = true;
    for (const auto& r : results)
      stack &= r.kind == StepValue::Kind::Tensor && r.tensor.dtype() == results[0].tensor.dtype() &&
               r.tensor.shape() == results[0].tensor.shape();
    pyb::list l;
    for (const auto& r : results) l.append(pythonOf(r));
    if (!stack) return l;
    return pyb::module_::import("numpy").attr("stack")(l);
  }

  pyb::dict outputs_;
  std::map<TensorId, std::vector<StepValue>> values_;
  std::map<TensorId, int64_t> valueIndex_;
  std::map<TensorId, std::vector<StepValue>> collected_;
};

/// PopART's PyWeightsIO: numpy arrays by weight id, used in place by readWeights (which writes
/// them) and writeWeights (which reads them).
class PyWeightsIO : public WeightsIO {
 public:
  explicit PyWeightsIO(const pyb::dict& weights) {
    for (auto [k, v] : weights) {
      std::string id = dictKeyOf(k, "PyWeightsIO: weight names (tensor ids)");
      NDArray a = viewOf(v, fmt::format("PyWeightsIO: weight '{}'", id), false);
      if (!pyb::reinterpret_borrow<pyb::array>(v).writeable()) readOnly_.push_back(id);
      insert(id, std::move(a));
      keep_.push_back(pyb::reinterpret_borrow<pyb::object>(v));
    }
  }
  /// Throws graft::Error naming a read-only array (readWeights writes into them).
  void checkWritable() const {
    GRAFT_CHECK(readOnly_.empty(), "PyWeightsIO: weight '{}': the array is read-only, but readWeights writes into it",
                readOnly_.front());
  }

 private:
  std::vector<pyb::object> keep_;
  std::vector<TensorId> readOnly_;
};

/// The four Python callables of a PyStepIOCallback. Calls come from the session's run, which
/// released the GIL, so each call takes it.
struct PyCallbacks {
  pyb::function in, inComplete, out, outComplete;
};

std::unique_ptr<StepIOCallback> makeCallbackIO(pyb::function in, const pyb::object& inComplete, pyb::function out,
                                               const pyb::object& outComplete) {
  auto cb = std::make_shared<PyCallbacks>();
  cb->in = std::move(in);
  cb->out = std::move(out);
  if (!inComplete.is_none()) cb->inComplete = inComplete.cast<pyb::function>();
  if (!outComplete.is_none()) cb->outComplete = outComplete.cast<pyb::function>();
  auto inFn = [cb](const TensorId& id, bool prefetch) {
    pyb::gil_scoped_acquire gil;
    pyb::object a = cb->in(id, prefetch);
    return ownedViewOf(a, fmt::format("PyStepIOCallback: input callback for '{}'", id), false);
  };
  auto outFn = [cb](const TensorId& id) {
    pyb::gil_scoped_acquire gil;
    pyb::object a = cb->out(id);
    return ownedViewOf(a, fmt::format("PyStepIOCallback: output callback for '{}'", id), true);
  };
  auto inDone = [cb](const TensorId& id) {
    pyb::gil_scoped_acquire gil;
    if (cb->inComplete) cb->inComplete(id);
  };
  auto outDone = [cb](const TensorId& id) {
    pyb::gil_scoped_acquire gil;
    if (cb->outComplete) cb->outComplete(id);
  };
  // The callables die with the StepIOCallback, which Python frees with the GIL held.
  return std::make_unique<StepIOCallback>(std::move(inFn), std::move(inDone), std::move(outFn), std::move(outDone));
}

}  // namespace

void bindSession(pyb::module_& m) {
  pyb::class_<IStepIO> stepIo(m, "IStepIO");
  pyb::class_<PyStepIO, IStepIO>(m, "PyStepIO")
      .def(pyb::init<const pyb::dict&, const pyb::dict&>(), pyb::arg("inputs"), pyb::arg("outputs"))
      // PopART checks array sizes at run time when asked; graft always does.
      .def(
          "enableRuntimeAsserts", [](PyStepIO&, bool) {}, pyb::arg("b"));
  pyb::class_<StepIOCallback, IStepIO>(m, "PyStepIOCallback")
      .def(pyb::init(&makeCallbackIO), pyb::arg("input_callback"), pyb::arg("input_complete_callback"),
           pyb::arg("output_callback"), pyb::arg("output_complete_callback"));

  pyb::class_<WeightsIO> weightsIo(m, "IWeightsIO");
  pyb::class_<PyWeightsIO, WeightsIO>(m, "PyWeightsIO").def(pyb::init<const pyb::dict&>(), pyb::arg("weights"));

  pyb::class_<OpProfile>(m, "OpProfile")
      .def_readonly("opType", &OpProfile::opType)
      .def_readonly("calls", &OpProfile::calls)
      .def_readonly("seconds", &OpProfile::seconds)
      .def_readonly("kernels", &OpProfile::kernels)
      .def_readonly("node", &OpProfile::node)
      .def("__repr__", [](const OpProfile& p) {
        return fmt::format("OpProfile({}, calls={}, seconds={:.6f})", p.opType, p.calls, p.seconds);
      });

  pyb::class_<GradientBucket>(m, "GradientBucket")
      .def_readonly("accumulators", &GradientBucket::accumulators)
      .def_readonly("bytes", &GradientBucket::bytes)
      .def_readonly("program", &GradientBucket::program)
      .def_readonly("step", &GradientBucket::step)
      .def_readonly("node", &GradientBucket::node)
      .def("__repr__", [](const GradientBucket& b) {
        return fmt::format("GradientBucket([{}], bytes={}, starts after step {} of program {}: {})",
                           fmt::join(b.accumulators, ", "), b.bytes, b.step, b.program, b.node);
      });

  pyb::class_<Session>(m, "_SessionCore")
      .def("prepareDevice", &Session::prepareDevice, pyb::call_guard<pyb::gil_scoped_release>())
      .def(
          "run",
          [](Session& s, IStepIO& io, const std::string& debugName) {
            auto* py = dynamic_cast<PyStepIO*>(&io);
            if (py) py->beginRun();
            {
              pyb::gil_scoped_release release;
              s.run(io, debugName);
            }
            if (py) py->deliver();
          },
          pyb::arg("stepio"), pyb::arg("debugName") = "")
      .def("weightsFromHost", &Session::weightsFromHost)
      .def("weightsToHost", &Session::weightsToHost)
      .def("inputIds", &Session::inputIds)
      .def("inputInfo", &Session::inputInfo, pyb::arg("id"))
      .def("getInfo", &Session::getInfo, pyb::arg("id"))
      .def("inputArrayShape", &Session::inputArrayShape, pyb::arg("id"))
      .def("anchorArrayShape", &Session::anchorArrayShape, pyb::arg("id"))
      .def("checkAnchorArraysFit", &Session::checkAnchorArraysFit)
      .def("anchorIsFixed", &Session::anchorIsFixed, pyb::arg("id"))
      .def(
          "anchorDtype", [](const Session& s, const TensorId& id) { return numpyDtype(s.anchorDataType(id)); },
          pyb::arg("id"))
      .def("_getDataFlow", &Session::dataFlow)
      .def("getDevice", [](const Session& s) { return s.device().str(); })
      .def("lastRunSeconds", &Session::lastRunSeconds)
      .def("lastCompileSeconds", &Session::lastCompileSeconds)
      .def("kernelThreads", &Session::kernelThreads)
      .def("profile", &Session::profile)
      .def("graphText", &Session::graphText)
      .def("_serializedIr", &Session::serializedIr)
      .def("stagesText", &Session::stagesText)
      .def("timelineJson", &Session::timelineJson)
      .def("replicaOptimizerStateBytes", &Session::replicaOptimizerStateBytes)
      .def("gradientBuckets", &Session::gradientBuckets)
      .def(
          "readWeights",
          [](const Session& s, PyWeightsIO& io) {
            io.checkWritable();
            s.readWeights(io);
          },
          pyb::arg("weightsIo"))
      .def("writeWeights", &Session::writeWeights, pyb::arg("weightsIo"))
      .def("weightIds", &Session::weightIds)
      .def("resetHostWeights", &Session::resetHostWeights, pyb::arg("modelProtoOrFilename"),
           pyb::arg("ignoreWeightsInModelWithoutCorrespondingHostWeight") = false)
      .def("modelToHost", &Session::modelToHost, pyb::arg("fileName"))
      .def("modelBytes", [](const Session& s) { return pyb::bytes(s.modelBytes()); });

  pyb::class_<InferenceSession, Session>(m, "_InferenceSessionCore")
      .def(pyb::init([](const std::string& model, const DataFlow& dataFlow, std::shared_ptr<DeviceInfo> device,
                        const InputShapeInfo& shapes, const SessionOptions& options, const Patterns& patterns) {
             pyb::gil_scoped_release release;
             return InferenceSession::createFromOnnxModel(model, dataFlow, std::move(device), shapes, options,
                                                          patterns);
           }),
           pyb::arg("model"), pyb::arg("dataFlow"), pyb::arg("deviceInfo"), pyb::arg("inputShapeInfo"),
           pyb::arg("userOptions"), pyb::arg("patterns"));
}

}  // namespace graft::py
