// Bindings of training: optimizers (PopART's SGD, ConstSGD, Adam, Adaptive with their Python
// constructor signatures), OptimizerValue, ClipNormSettings and the training session core
// (_TrainingSessionCore, which graft/session.py extends into TrainingSession).
#include <pybind11/stl.h>
#include <graft/graft.hpp>

#include "bindings.hpp"
#include "numpy_util.hpp"
#include "support/check.hpp"

namespace graft::py {
namespace {

using ParamMap = std::map<std::string, std::pair<float, bool>>;

// One hyper-parameter from Python: PopART passes (value, isConst) tuples; an OptimizerValue or a
// two-element list is accepted too.
std::pair<float, bool> paramValue(const std::string& key, pyb::handle v, const std::string& what) {
  if (pyb::isinstance<OptimizerValue>(v)) {
    auto ov = v.cast<OptimizerValue>();
    return {ov.val(), ov.isConst()};
  }
  bool pairLike = (pyb::isinstance<pyb::tuple>(v) || pyb::isinstance<pyb::list>(v)) && pyb::len(v) == 2;
  GRAFT_CHECK(pairLike, "{}: the value of '{}' must be a (value, isConst) tuple, for example (0.01, False), got {}",
              what, key, pyb::repr(v).cast<std::string>());
  auto seq = pyb::reinterpret_borrow<pyb::sequence>(v);
  pyb::object value = seq[0], isConst = seq[1];
  GRAFT_CHECK(
      pyb::isinstance<pyb::float_>(value) || pyb::isinstance<pyb::int_>(value) || pyb::hasattr(value, "__float__"),
      "{}: the value of '{}' must be a number, got {}", what, key, pyb::repr(value).cast<std::string>());
  GRAFT_CHECK(
      pyb::isinstance<pyb::bool_>(isConst) || pyb::isinstance<pyb::int_>(isConst) || pyb::hasattr(isConst, "__bool__"),
      "{}: isConst of '{}' must be a bool, got {}", what, key, pyb::repr(isConst).cast<std::string>());
  return {pyb::float_(value).cast<float>(), pyb::bool_(isConst).cast<bool>()};
}

ParamMap paramMap(const pyb::dict& d, const std::string& what) {
  ParamMap out;
  for (auto [k, v] : d) {
    std::string key = dictKeyOf(k, what + ": hyper-parameter names");
    out[key] = paramValue(key, v, what);
  }
  return out;
}

/// PopART's OptimizerValueMap: the default value of a hyper-parameter and its per-weight values.
struct OptimizerValueMap {
  OptimizerValue defaultValue;
  std::map<TensorId, OptimizerValue> specific;

  static OptimizerValueMap of(const Optimizer& o, const std::string& name) {
    OptimizerValueMap m{o.get(name), {}};
    for (const auto& [w, values] : o.specifics()) {
      auto it = values.find(name);
      if (it != values.end()) m.specific[w] = it->second;
    }
    return m;
  }
  OptimizerValue get(const TensorId& id) const {
    auto it = specific.find(id);
    return it == specific.end() ? defaultValue : it->second;
  }
};

std::string ovRepr(const OptimizerValue& v) {
  return fmt::format("OptimizerValue({}, isConst={})", v.val(), v.isConst() ? "True" : "False");
}

// The map getters of an optimizer class: learningRates() -> OptimizerValueMap of "learningRate".
template <class Cls>
void mapGetters(Cls& cls, const std::vector<std::pair<const char*, const char*>>& getters) {
  for (const auto& [method, name] : getters) {
    std::string n = name;
    cls.def(method, [n](const Optimizer& o) { return OptimizerValueMap::of(o, n); });
  }
}

// Accepted for PopART compatibility: graft keeps optimizer state in the weight's type.
void checkStateType(pyb::handle dt, const char* arg, const std::string& what) {
  GRAFT_CHECK(dt.is_none() || pyb::isinstance<DataType>(dt) || pyb::isinstance<pyb::str>(dt),
              "{}: {} must be a graft.DataType, got {}", what, arg, pyb::repr(dt).cast<std::string>());
}

enum class SGDAccumulatorAndMomentum { Combined, Separate };

}  // namespace

void bindTraining(pyb::module_& m) {
  pyb::class_<OptimizerValue>(m, "OptimizerValue")
      .def(pyb::init<>())
      .def(pyb::init<float, bool>(), pyb::arg("val"), pyb::arg("isConst"))
      .def(pyb::init<float>(), pyb::arg("val"))
      .def(pyb::init([](const pyb::tuple& t) {
             auto p = paramValue("OptimizerValue", t, "OptimizerValue");
             return OptimizerValue(p.first, p.second);
           }),
           pyb::arg("valueAndIsConst"))
      .def("val", &OptimizerValue::val)
      .def("isConst", &OptimizerValue::isConst)
      .def("__eq__", [](const OptimizerValue& a, const OptimizerValue& b) { return a == b; })
      .def("__repr__", &ovRepr);

  pyb::class_<OptimizerValueMap>(m, "OptimizerValueMap")
      .def("getDefault", [](const OptimizerValueMap& v) { return v.defaultValue; })
      .def("get", &OptimizerValueMap::get, pyb::arg("id"))
      .def(
          "hasSpecific", [](const OptimizerValueMap& v, const TensorId& id) { return v.specific.count(id) != 0; },
          pyb::arg("id"))
      .def("__repr__", [](const OptimizerValueMap& v) {
        return fmt::format("OptimizerValueMap(default={}, {} specific)", ovRepr(v.defaultValue), v.specific.size());
      });

  pyb::enum_<WeightDecayMode>(m, "WeightDecayMode")
      .value("Decay", WeightDecayMode::Decay)
      .value("L2Regularization", WeightDecayMode::L2Regularization);
  pyb::enum_<AdamMode>(m, "AdamMode")
      .value("Adam", AdamMode::Adam)
      .value("AdamNoBias", AdamMode::AdamNoBias)
      .value("AdaMax", AdamMode::AdaMax)
      .value("Lamb", AdamMode::Lamb)
      .value("LambNoBias", AdamMode::LambNoBias);
  pyb::enum_<AdaptiveMode>(m, "AdaptiveMode")
      .value("AdaGrad", AdaptiveMode::AdaGrad)
      .value("RMSProp", AdaptiveMode::RMSProp)
      .value("CenteredRMSProp", AdaptiveMode::CenteredRMSProp)
      .value("AdaDelta", AdaptiveMode::AdaDelta);
  pyb::enum_<SGDAccumulatorAndMomentum>(m, "SGDAccumulatorAndMomentum")
      .value("Combined", SGDAccumulatorAndMomentum::Combined)
      .value("Separate", SGDAccumulatorAndMomentum::Separate);

  pyb::class_<ClipNormSettings>(m, "ClipNormSettings")
      .def(pyb::init<std::vector<TensorId>, float>(), pyb::arg("weightIds"), pyb::arg("maxNorm"))
      .def_static("clipWeights", &ClipNormSettings::clipWeights, pyb::arg("weightIds"), pyb::arg("maxNorm"))
      .def_static("clipAllWeights", &ClipNormSettings::clipAllWeights, pyb::arg("maxNorm"))
      .def_property(
          "weightIds", [](const ClipNormSettings& c) { return c.weightIds(); },
          [](ClipNormSettings& c, std::vector<TensorId> ids) { c = ClipNormSettings(std::move(ids), c.maxNorm()); })
      .def_property(
          "maxNorm", [](const ClipNormSettings& c) { return c.maxNorm(); },
          [](ClipNormSettings& c, float n) { c = ClipNormSettings(c.weightIds(), n); })
      .def("__repr__", [](const ClipNormSettings& c) {
        return c.clipsAll() ? fmt::format("ClipNormSettings.clipAllWeights({})", c.maxNorm())
                            : fmt::format("ClipNormSettings([{}], {})", fmt::join(c.weightIds(), ", "), c.maxNorm());
      });

  pyb::class_<Optimizer>(m, "Optimizer")
      .def("getLossScalingVal", [](const Optimizer& o) { return o.lossScaling().val(); })
      .def("lossScaling", [](const Optimizer& o) { return o.lossScaling(); })
      .def(
          "insertSpecific",
          [](Optimizer& o, const TensorId& id, const pyb::dict& d) {
            o.insertSpecific(id, paramMap(d, fmt::format("{}.insertSpecific('{}')", o.str(), id)));
          },
          pyb::arg("id"), pyb::arg("values"))
      .def("hasSpecific", &Optimizer::hasSpecific, pyb::arg("id"))
      .def("hyperParameterNames", &Optimizer::hyperParameterNames)
      .def("get", &Optimizer::get, pyb::arg("name"), pyb::arg("weightId") = "")
      .def_property_readonly("clipNormSettings", &Optimizer::clipNormSettings)
      .def("type", &Optimizer::str)
      .def("__repr__", [](const Optimizer& o) { return "<graft." + o.str() + ">"; });

  pyb::class_<SGD, Optimizer> sgd(m, "SGD");
  sgd.def(pyb::init([](const pyb::dict& values, std::vector<ClipNormSettings> clip, SGDAccumulatorAndMomentum,
                       pyb::object accumType, pyb::object accl1Type, pyb::object) {
            checkStateType(accumType, "accumType", "SGD");
            checkStateType(accl1Type, "accl1Type", "SGD");
            return SGD(paramMap(values, "SGD"), std::move(clip));
          }),
          pyb::arg("pyd"), pyb::arg("clip_norm_settings") = std::vector<ClipNormSettings>{},
          pyb::arg("accumulatorAndMomentum") = SGDAccumulatorAndMomentum::Combined, pyb::arg("accumType") = pyb::none(),
          pyb::arg("accl1Type") = pyb::none(), pyb::arg("debugContext") = "sgd");
  sgd.def("nesterov", [](const SGD& s) { return OptimizerValueMap{{s.nesterov() ? 1.0f : 0.0f, true}, {}}; });
  mapGetters(sgd, {{"learningRates", "learningRate"},
                   {"weightDecays", "weightDecay"},
                   {"momentums", "momentum"},
                   {"dampenings", "dampening"},
                   {"velocityScalings", "velocityScaling"}});

  pyb::class_<ConstSGD, SGD>(m, "ConstSGD")
      .def(pyb::init([](float lr, float wd, float ls, std::vector<ClipNormSettings> clip) {
             ConstSGD s(lr, wd, ls);
             s.setClipNormSettings(std::move(clip));
             return s;
           }),
           pyb::arg("learning_rate"), pyb::arg("weight_decay") = 0.0f, pyb::arg("loss_scaling") = 1.0f,
           pyb::arg("clip_norm_settings") = std::vector<ClipNormSettings>{});

  pyb::class_<Adam, Optimizer> adam(m, "Adam");
  adam.def(pyb::init([](const pyb::dict& values, AdamMode mode, WeightDecayMode wdMode, pyb::object accumType,
                        pyb::object accl1Type, pyb::object accl2Type, std::vector<ClipNormSettings> clip, bool,
                        pyb::object) {
             checkStateType(accumType, "accum_type", "Adam");
             checkStateType(accl1Type, "accl1_type", "Adam");
             checkStateType(accl2Type, "accl2_type", "Adam");
             return Adam(paramMap(values, "Adam"), mode, wdMode, std::move(clip));
           }),
           pyb::arg("values"), pyb::arg("mode") = AdamMode::Adam,
           pyb::arg("weight_decay_mode") = WeightDecayMode::Decay, pyb::arg("accum_type") = pyb::none(),
           pyb::arg("accl1_type") = pyb::none(), pyb::arg("accl2_type") = pyb::none(),
           pyb::arg("clip_norm_settings") = std::vector<ClipNormSettings>{}, pyb::arg("scaled_optimizer_state") = false,
           pyb::arg("debugContext") = "adam");
  adam.def("mode", &Adam::mode).def("weightDecayMode", &Adam::weightDecayMode);
  mapGetters(adam, {{"learningRates", "learningRate"},
                    {"weightDecays", "weightDecay"},
                    {"beta1s", "beta1"},
                    {"beta2s", "beta2"},
                    {"epss", "eps"},
                    {"maxWeightNorms", "maxWeightNorm"}});

  pyb::class_<Adaptive, Optimizer> adaptive(m, "Adaptive");
  adaptive.def(pyb::init([](const pyb::dict& values, AdaptiveMode mode, WeightDecayMode wdMode, pyb::object accumType,
                            pyb::object accl1Type, pyb::object accl2Type, pyb::object accl3Type, bool tfVariant,
                            pyb::object, std::vector<ClipNormSettings> clip) {
                 checkStateType(accumType, "accum_type", "Adaptive");
                 checkStateType(accl1Type, "accl1_type", "Adaptive");
                 checkStateType(accl2Type, "accl2_type", "Adaptive");
                 checkStateType(accl3Type, "accl3_type", "Adaptive");
                 Adaptive a(paramMap(values, "Adaptive"), mode, wdMode, tfVariant);
                 a.setClipNormSettings(std::move(clip));
                 return a;
               }),
               pyb::arg("values"), pyb::arg("mode") = AdaptiveMode::RMSProp,
               pyb::arg("weight_decay_mode") = WeightDecayMode::Decay, pyb::arg("accum_type") = pyb::none(),
               pyb::arg("accl1_type") = pyb::none(), pyb::arg("accl2_type") = pyb::none(),
               pyb::arg("accl3_type") = pyb::none(), pyb::arg("rmsprop_tf_variant") = false,
               pyb::arg("debugContext") = "adaptive",
               // graft's addition: PopART's Python Adaptive takes no clip norm settings.
               pyb::arg("clip_norm_settings") = std::vector<ClipNormSettings>{});
  adaptive.def("mode", &Adaptive::mode).def("weightDecayMode", &Adaptive::weightDecayMode);
  mapGetters(adaptive, {{"learningRates", "learningRate"},
                        {"weightDecays", "weightDecay"},
                        {"alphas", "alpha"},
                        {"momentums", "momentum"},
                        {"epss", "eps"}});

  pyb::class_<TrainingSession, Session>(m, "_TrainingSessionCore")
      .def(pyb::init([](const std::string& model, const DataFlow& dataFlow, const TensorId& loss,
                        const Optimizer& optimizer, std::shared_ptr<DeviceInfo> device, const InputShapeInfo& shapes,
                        const SessionOptions& options, const Patterns& patterns) {
             pyb::gil_scoped_release release;
             return TrainingSession::createFromOnnxModel(model, dataFlow, loss, optimizer, std::move(device), shapes,
                                                         options, patterns);
           }),
           pyb::arg("model"), pyb::arg("dataFlow"), pyb::arg("loss"), pyb::arg("optimizer"), pyb::arg("deviceInfo"),
           pyb::arg("inputShapeInfo"), pyb::arg("userOptions"), pyb::arg("patterns"))
      .def("updateOptimizerFromHost", &TrainingSession::updateOptimizerFromHost, pyb::arg("optimizer"))
      .def("trainedWeightIds", &TrainingSession::trainedWeightIds)
      .def("lossId", &TrainingSession::lossId);
}

}  // namespace graft::py
