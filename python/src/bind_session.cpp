// Bindings of sessions and step IO. The session classes are bound as _SessionCore (what every
// session kind shares) and _InferenceSessionCore; graft/session.py adds PopART's Python methods.
// A training session binds the same way, deriving from _SessionCore.
#include <graft/graft.hpp>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

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
/// alive as long as this object.
class PyStepIO : private KeepAlive, public StepIO {
 public:
  PyStepIO(const pyb::dict& inputs, const pyb::dict& outputs)
      : KeepAlive(), StepIO(arrays(inputs, "input", false, keep_), arrays(outputs, "anchor", true, keep_)) {}

 private:
  static std::map<TensorId, NDArray> arrays(const pyb::dict& d, const char* what, bool writable,
                                            std::vector<pyb::object>& keep) {
    std::map<TensorId, NDArray> out;
    for (auto [k, v] : d) {
      GRAFT_CHECK(pyb::isinstance<pyb::str>(k), "PyStepIO: {} names must be tensor ids (str), got {}", what,
                  pyb::repr(k).cast<std::string>());
      std::string id = k.cast<std::string>();
      out[id] = viewOf(v, fmt::format("PyStepIO: {} '{}'", what, id), writable);
      keep.push_back(pyb::reinterpret_borrow<pyb::object>(v));
    }
    return out;
  }
};

/// PopART's PyWeightsIO: numpy arrays by weight id, used in place by readWeights (which writes
/// them) and writeWeights (which reads them).
class PyWeightsIO : public WeightsIO {
 public:
  explicit PyWeightsIO(const pyb::dict& weights) {
    for (auto [k, v] : weights) {
      GRAFT_CHECK(pyb::isinstance<pyb::str>(k), "PyWeightsIO: weight names must be tensor ids (str), got {}",
                  pyb::repr(k).cast<std::string>());
      std::string id = k.cast<std::string>();
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

std::unique_ptr<StepIOCallback> makeCallbackIO(pyb::function in, pyb::object inComplete, pyb::function out,
                                               pyb::object outComplete) {
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
  pyb::class_<IStepIO>(m, "IStepIO");
  pyb::class_<PyStepIO, IStepIO>(m, "PyStepIO")
      .def(pyb::init<const pyb::dict&, const pyb::dict&>(), pyb::arg("inputs"), pyb::arg("outputs"))
      // PopART checks array sizes at run time when asked; graft always does.
      .def("enableRuntimeAsserts", [](PyStepIO&, bool) {}, pyb::arg("b"));
  pyb::class_<StepIOCallback, IStepIO>(m, "PyStepIOCallback")
      .def(pyb::init(&makeCallbackIO), pyb::arg("input_callback"), pyb::arg("input_complete_callback"),
           pyb::arg("output_callback"), pyb::arg("output_complete_callback"));

  pyb::class_<WeightsIO>(m, "IWeightsIO");
  pyb::class_<PyWeightsIO, WeightsIO>(m, "PyWeightsIO").def(pyb::init<const pyb::dict&>(), pyb::arg("weights"));

  pyb::class_<OpProfile>(m, "OpProfile")
      .def_readonly("opType", &OpProfile::opType)
      .def_readonly("calls", &OpProfile::calls)
      .def_readonly("seconds", &OpProfile::seconds)
      .def_readonly("kernels", &OpProfile::kernels)
      .def("__repr__", [](const OpProfile& p) {
        return fmt::format("OpProfile({}, calls={}, seconds={:.6f})", p.opType, p.calls, p.seconds);
      });

  pyb::class_<Session>(m, "_SessionCore")
      .def("prepareDevice", &Session::prepareDevice, pyb::call_guard<pyb::gil_scoped_release>())
      .def("run", &Session::run, pyb::arg("stepio"), pyb::arg("debugName") = "",
           pyb::call_guard<pyb::gil_scoped_release>())
      .def("weightsFromHost", &Session::weightsFromHost)
      .def("weightsToHost", &Session::weightsToHost)
      .def("inputIds", &Session::inputIds)
      .def("inputInfo", &Session::inputInfo, pyb::arg("id"))
      .def("getInfo", &Session::getInfo, pyb::arg("id"))
      .def("inputArrayShape", &Session::inputArrayShape, pyb::arg("id"))
      .def("anchorArrayShape", &Session::anchorArrayShape, pyb::arg("id"))
      .def("checkAnchorArraysFit", &Session::checkAnchorArraysFit)
      .def(
          "anchorDtype", [](const Session& s, const TensorId& id) { return numpyDtype(s.anchorDataType(id)); },
          pyb::arg("id"))
      .def("_getDataFlow", &Session::dataFlow)
      .def("getDevice", [](const Session& s) { return s.device().str(); })
      .def("lastRunSeconds", &Session::lastRunSeconds)
      .def("lastCompileSeconds", &Session::lastCompileSeconds)
      .def("profile", &Session::profile)
      .def("graphText", &Session::graphText)
      .def("_serializedIr", &Session::serializedIr)
      .def("stagesText", &Session::stagesText)
      .def("timelineJson", &Session::timelineJson)
      .def("replicaOptimizerStateBytes", &Session::replicaOptimizerStateBytes)
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
             return InferenceSession::createFromOnnxModel(model, dataFlow, std::move(device), shapes, options, patterns);
           }),
           pyb::arg("model"), pyb::arg("dataFlow"), pyb::arg("deviceInfo"), pyb::arg("inputShapeInfo"),
           pyb::arg("userOptions"), pyb::arg("patterns"));
}

}  // namespace graft::py
