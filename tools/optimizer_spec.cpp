#include "optimizer_spec.hpp"

#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "support/check.hpp"

namespace graft::tools {
namespace {

enum class Family { Sgd, Adam, Adaptive };

struct Kind {
  const char* name;
  Family family;
  int mode;  // AdamMode or AdaptiveMode
  WeightDecayMode decay;
};

constexpr Kind kKinds[] = {
    {"sgd", Family::Sgd, 0, WeightDecayMode::L2Regularization},
    {"adam", Family::Adam, static_cast<int>(AdamMode::Adam), WeightDecayMode::L2Regularization},
    {"adamw", Family::Adam, static_cast<int>(AdamMode::Adam), WeightDecayMode::Decay},
    {"adamax", Family::Adam, static_cast<int>(AdamMode::AdaMax), WeightDecayMode::L2Regularization},
    {"lamb", Family::Adam, static_cast<int>(AdamMode::Lamb), WeightDecayMode::Decay},
    {"rmsprop", Family::Adaptive, static_cast<int>(AdaptiveMode::RMSProp), WeightDecayMode::L2Regularization},
    {"centered-rmsprop", Family::Adaptive, static_cast<int>(AdaptiveMode::CenteredRMSProp),
     WeightDecayMode::L2Regularization},
    {"adagrad", Family::Adaptive, static_cast<int>(AdaptiveMode::AdaGrad), WeightDecayMode::L2Regularization},
    {"adadelta", Family::Adaptive, static_cast<int>(AdaptiveMode::AdaDelta), WeightDecayMode::L2Regularization},
};

// Spec keys -> the optimizer classes' parameter keys.
const std::map<std::string, std::string>& keysOf(Family f) {
  static const std::map<std::string, std::string> sgd = {
      {"lr", "defaultLearningRate"}, {"momentum", "defaultMomentum"}, {"dampening", "defaultDampening"},
      {"wd", "defaultWeightDecay"},  {"nesterov", "nesterov"},        {"clip", ""}};
  static const std::map<std::string, std::string> adam = {{"lr", "defaultLearningRate"}, {"beta1", "defaultBeta1"},
                                                          {"beta2", "defaultBeta2"},     {"eps", "defaultEps"},
                                                          {"wd", "defaultWeightDecay"},  {"clip", ""}};
  static const std::map<std::string, std::string> adaptive = {
      {"lr", "defaultLearningRate"}, {"alpha", "defaultAlpha"},    {"momentum", "defaultMomentum"},
      {"eps", "defaultEps"},         {"wd", "defaultWeightDecay"}, {"clip", ""}};
  return f == Family::Sgd ? sgd : f == Family::Adam ? adam : adaptive;
}

std::string keyList(Family f) {
  std::string s;
  for (const auto& [k, v] : keysOf(f)) s += (s.empty() ? "" : ", ") + k;
  return s;
}

std::string kindList() {
  std::string s;
  for (const auto& k : kKinds) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

float parseValue(const std::string& text, const std::string& key, const std::string& spec) {
  float v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  GRAFT_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && std::isfinite(v),
              "--optimizer '{}': {} must be a finite number, got '{}'", spec, key, text);
  return v;
}

}  // namespace

ParsedOptimizer parseOptimizerSpec(const std::string& spec) {
  auto colon = spec.find(':');
  std::string name = trim(spec.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const Kind* kind = nullptr;
  for (const auto& k : kKinds)
    if (name == k.name) kind = &k;
  GRAFT_CHECK(kind,
              "--optimizer '{}': unknown optimizer '{}' (expected one of: {}), for example sgd:lr=0.01,momentum=0.9",
              spec, name, kindList());
  const auto& keys = keysOf(kind->family);

  std::map<std::string, float> given;
  std::vector<std::string> order;
  if (colon != std::string::npos) {
    std::string rest = spec.substr(colon + 1);
    size_t pos = 0;
    while (pos <= rest.size()) {
      size_t comma = rest.find(',', pos);
      std::string item = trim(rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
      pos = comma == std::string::npos ? rest.size() + 1 : comma + 1;
      if (item.empty()) continue;
      auto eq = item.find('=');
      std::string key = trim(item.substr(0, eq));
      GRAFT_CHECK(keys.count(key), "--optimizer '{}': {} has no parameter '{}' (its parameters: {})", spec, kind->name,
                  key, keyList(kind->family));
      GRAFT_CHECK(!given.count(key), "--optimizer '{}': {} is given twice", spec, key);
      float v = 1.0f;
      if (eq == std::string::npos) {
        GRAFT_CHECK(key == "nesterov", "--optimizer '{}': {} needs a value ({}=VALUE)", spec, key, key);
      } else {
        v = parseValue(trim(item.substr(eq + 1)), key, spec);
      }
      given[key] = v;
      order.push_back(key);
    }
  }
  GRAFT_CHECK(given.count("lr"), "--optimizer '{}': the learning rate is required, for example {}:lr={}", spec,
              kind->name, kind->family == Family::Sgd ? "0.01" : "0.001");
  auto check = [&](const char* key, bool ok, const char* range) {
    auto it = given.find(key);
    GRAFT_CHECK(it == given.end() || ok, "--optimizer '{}': {} must be {}, got {}", spec, key, range, it->second);
  };
  auto val = [&](const char* key) { return given.count(key) ? given.at(key) : 0.0f; };
  check("lr", val("lr") > 0, "> 0");
  check("momentum", val("momentum") >= 0 && val("momentum") < 1, "in [0, 1)");
  check("dampening", val("dampening") >= 0 && val("dampening") <= 1, "in [0, 1]");
  check("wd", val("wd") >= 0, ">= 0");
  check("beta1", val("beta1") >= 0 && val("beta1") < 1, "in [0, 1)");
  check("beta2", val("beta2") >= 0 && val("beta2") < 1, "in [0, 1)");
  check("eps", val("eps") > 0, "> 0");
  check("alpha", val("alpha") >= 0 && val("alpha") <= 1, "in [0, 1]");
  check("clip", val("clip") > 0, "> 0");
  check("nesterov", val("nesterov") == 0 || val("nesterov") == 1, "0 or 1");
  GRAFT_CHECK(!(val("nesterov") == 1 && val("momentum") == 0), "--optimizer '{}': nesterov needs a momentum > 0", spec);
  if (std::string(kind->name) == "adamw" && !given.count("wd")) {
    given["wd"] = 0.01f;
    order.push_back("wd");
  }

  std::map<std::string, std::pair<float, bool>> params;
  for (const auto& [k, v] : given)
    if (!keys.at(k).empty()) params[keys.at(k)] = {v, true};
  std::vector<ClipNormSettings> clip;
  if (given.count("clip")) clip.push_back(ClipNormSettings::clipAllWeights(given.at("clip")));

  ParsedOptimizer out;
  switch (kind->family) {
    case Family::Sgd:
      out.optimizer = std::make_unique<SGD>(params, clip);
      break;
    case Family::Adam:
      out.optimizer = std::make_unique<Adam>(params, static_cast<AdamMode>(kind->mode), kind->decay, clip);
      break;
    case Family::Adaptive:
      out.optimizer = std::make_unique<Adaptive>(params, static_cast<AdaptiveMode>(kind->mode), kind->decay);
      if (!clip.empty()) out.optimizer->setClipNormSettings(clip);
      break;
  }
  std::string d = out.optimizer->str() + ":";
  for (const auto& k : order) {
    if (k == "nesterov") continue;  // in str() already
    d +=
        fmt::format(" {} {:g},",
                    k == "wd" ? (kind->decay == WeightDecayMode::Decay ? "decoupled weight decay" : "weight decay") : k,
                    given.at(k));
  }
  d.pop_back();
  out.description = d;
  return out;
}

}  // namespace graft::tools
