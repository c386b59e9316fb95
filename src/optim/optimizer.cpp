#include <graft/optimizer.hpp>

#include <cmath>
#include <limits>
#include <set>

#include "support/check.hpp"

namespace graft {
namespace {

// PopART's map keys "defaultLearningRate" -> hyper-parameter "learningRate".
std::string stripDefault(const std::string& key) {
  if (key.rfind("default", 0) == 0 && key.size() > 7) {
    std::string s = key.substr(7);
    s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
    return s;
  }
  return key;
}

// The range of each hyper-parameter, checked wherever a value enters an optimizer (constructors,
// insertSpecific): the CLI, C++ and Python share these checks. NaN and inf are never accepted.
struct Range {
  const char* name;
  float lo, hi;
  bool loOpen, hiOpen;
};
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr Range kRanges[] = {
    {"learningRate", 0, kInf, false, true},
    {"weightDecay", 0, kInf, false, true},
    {"momentum", 0, 1, false, true},
    {"dampening", 0, 1, false, false},
    {"velocityScaling", 0, kInf, true, true},
    {"beta1", 0, 1, false, true},
    {"beta2", 0, 1, false, true},
    {"eps", 0, kInf, true, true},
    {"maxWeightNorm", 0, kInf, false, true},
    {"alpha", 0, 1, false, false},
    {"lossScaling", 0, kInf, true, true},
};

void checkValue(const std::string& kind, const std::string& name, float v, const std::string& where) {
  GRAFT_CHECK(std::isfinite(v), "{}: {}{} must be a finite number, got {}", kind, name, where, v);
  for (const Range& r : kRanges) {
    if (name != r.name) continue;
    bool ok = (r.loOpen ? v > r.lo : v >= r.lo) && (r.hiOpen ? v < r.hi : v <= r.hi);
    std::string range = r.hi == kInf
                            ? fmt::format("{} {}", r.loOpen ? ">" : ">=", r.lo)
                            : fmt::format("in {}{}, {}{}", r.loOpen ? "(" : "[", r.lo, r.hi, r.hiOpen ? ")" : "]");
    GRAFT_CHECK(ok, "{}: {}{} must be {}, got {}", kind, name, where, range, v);
  }
}

}  // namespace

void Optimizer::validate() const {
  checkValue(kind_, "lossScaling", lossScaling_.val(), "");
  for (const auto& [name, v] : defaults_) checkValue(kind_, name, v.val(), "");
  for (const auto& [w, m] : specific_)
    for (const auto& [name, v] : m) checkValue(kind_, name, v.val(), fmt::format(" (for weight '{}')", w));
}

ClipNormSettings::ClipNormSettings(std::vector<TensorId> weightIds, float maxNorm)
    : weightIds_(std::move(weightIds)), maxNorm_(maxNorm) {
  GRAFT_CHECK(std::isfinite(maxNorm) && maxNorm > 0, "ClipNormSettings: maxNorm must be positive, got {}", maxNorm);
}

Optimizer::Optimizer(std::map<std::string, OptimizerValue> defaults, const std::map<std::string, std::pair<float, bool>>& params,
                     const std::string& kind)
    : defaults_(std::move(defaults)), kind_(kind) {
  for (const auto& [key, value] : params) {
    if (key == "lossScaling") {
      lossScaling_ = OptimizerValue(value);
      GRAFT_CHECK(lossScaling_.val() > 0, "{}: lossScaling must be positive, got {}", kind_, lossScaling_.val());
      continue;
    }
    if (key == "nesterov") continue;  // handled by SGD
    std::string name = stripDefault(key);
    if (!defaults_.count(name)) {
      std::vector<std::string> known{"lossScaling"};
      for (const auto& [n, v] : defaults_) known.push_back(n == "maxWeightNorm" ? n : "default" + std::string(1, static_cast<char>(std::toupper(n[0]))) + n.substr(1));
      GRAFT_THROW("{}: unknown hyper-parameter '{}' (known: {})", kind_, key, fmt::join(known, ", "));
    }
    defaults_[name] = OptimizerValue(value);
  }
  validate();
}

OptimizerValue Optimizer::get(const std::string& name, const TensorId& weight) const {
  if (name == "lossScaling") return lossScaling_;
  auto sit = specific_.find(weight);
  if (sit != specific_.end()) {
    auto it = sit->second.find(name);
    if (it != sit->second.end()) return it->second;
  }
  auto it = defaults_.find(name);
  GRAFT_CHECK(it != defaults_.end(), "{}: no hyper-parameter '{}'", kind_, name);
  return it->second;
}

void Optimizer::insertSpecific(const TensorId& weight, const std::map<std::string, std::pair<float, bool>>& values) {
  for (const auto& [key, value] : values) {
    std::string name = stripDefault(key);
    GRAFT_CHECK(defaults_.count(name), "{}: insertSpecific for '{}': unknown hyper-parameter '{}' (known: {})", kind_,
                weight, key, fmt::join(hyperParameterNames(), ", "));
    specific_[weight][name] = OptimizerValue(value);
  }
  validate();
}

std::vector<std::string> Optimizer::hyperParameterNames() const {
  std::vector<std::string> out;
  for (const auto& [n, v] : defaults_) out.push_back(n);
  return out;
}

// ---- SGD ---------------------------------------------------------------------------------------

namespace {
std::map<std::string, OptimizerValue> sgdDefaults() {
  return {{"learningRate", {0.1f, true}}, {"weightDecay", {0.0f, true}},     {"momentum", {0.0f, true}},
          {"dampening", {0.0f, true}},    {"velocityScaling", {1.0f, true}}};
}
}  // namespace

SGD::SGD(const std::map<std::string, std::pair<float, bool>>& params, std::vector<ClipNormSettings> clip)
    : Optimizer(sgdDefaults(), params, "SGD") {
  auto it = params.find("nesterov");
  if (it != params.end()) nesterov_ = it->second.first != 0.0f;
  clip_ = std::move(clip);
}

SGD::SGD(OptimizerValue lr, OptimizerValue wd, OptimizerValue mm, OptimizerValue dm, OptimizerValue vs, OptimizerValue ls,
         bool nesterov, std::vector<ClipNormSettings> clip)
    : Optimizer(sgdDefaults(), {}, "SGD") {
  defaults_["learningRate"] = lr;
  defaults_["weightDecay"] = wd;
  defaults_["momentum"] = mm;
  defaults_["dampening"] = dm;
  defaults_["velocityScaling"] = vs;
  lossScaling_ = ls;
  nesterov_ = nesterov;
  clip_ = std::move(clip);
  validate();
}

bool SGD::usesMomentum() const {
  auto uses = [](const OptimizerValue& v) { return !v.isConst() || v.val() != 0.0f; };
  if (uses(defaults_.at("momentum"))) return true;
  for (const auto& [w, m] : specific_) {
    auto it = m.find("momentum");
    if (it != m.end() && uses(it->second)) return true;
  }
  return false;
}

std::string SGD::str() const { return nesterov_ ? "SGD (nesterov)" : "SGD"; }

ConstSGD::ConstSGD(float lr, float wd, float ls) : SGD({lr, true}, {wd, true}, {0.0f, true}, {0.0f, true}, {1.0f, true}, {ls, true}) {}

// ---- Adam --------------------------------------------------------------------------------------

Adam::Adam(const std::map<std::string, std::pair<float, bool>>& params, AdamMode mode, WeightDecayMode decayMode,
           std::vector<ClipNormSettings> clip)
    : Optimizer({{"learningRate", {0.1f, true}},
                 {"weightDecay", {0.0f, true}},
                 {"beta1", {0.9f, true}},
                 {"beta2", {0.999f, true}},
                 {"eps", {1e-6f, true}},
                 {"maxWeightNorm", {10.0f, true}}},
                params, "Adam"),
      mode_(mode),
      decayMode_(decayMode) {
  clip_ = std::move(clip);
}

std::string Adam::str() const {
  static const char* names[] = {"Adam", "AdamNoBias", "AdaMax", "Lamb", "LambNoBias"};
  std::string s = names[static_cast<int>(mode_)];
  if (mode_ == AdamMode::Adam && decayMode_ == WeightDecayMode::Decay) s = "AdamW";
  return s;
}

// ---- Adaptive ----------------------------------------------------------------------------------

Adaptive::Adaptive(const std::map<std::string, std::pair<float, bool>>& params, AdaptiveMode mode, WeightDecayMode decayMode,
                   bool tf)
    : Optimizer({{"learningRate", {0.01f, true}},
                 {"weightDecay", {0.0f, true}},
                 {"alpha", {0.99f, true}},
                 {"momentum", {0.0f, true}},
                 {"eps", {1e-6f, true}}},
                params, "Adaptive"),
      mode_(mode),
      decayMode_(decayMode),
      tfVariant_(tf) {}

std::string Adaptive::str() const {
  static const char* names[] = {"AdaGrad", "RMSProp", "CenteredRMSProp", "AdaDelta"};
  return names[static_cast<int>(mode_)];
}

}  // namespace graft
