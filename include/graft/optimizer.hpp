#pragma once
/// @file optimizer.hpp  Optimizers with PopART's classes, names and update equations.
///
/// Hyper-parameters are OptimizerValues: a value and whether it is constant. Constant values are
/// compiled into the step; non-constant ones live in tensors that updateOptimizerFromHost
/// rewrites without recompiling. Every hyper-parameter has a default for all weights and may be
/// overridden per weight with insertSpecific.
#include <graft/dataflow.hpp>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace graft {

class OptimizerValue {
 public:
  OptimizerValue() = default;
  OptimizerValue(float value, bool isConst = true) : value_(value), isConst_(isConst) {}  // NOLINT
  OptimizerValue(std::pair<float, bool> p) : value_(p.first), isConst_(p.second) {}      // NOLINT
  float val() const { return value_; }
  bool isConst() const { return isConst_; }
  bool operator==(const OptimizerValue&) const = default;

 private:
  float value_ = 0.0f;
  bool isConst_ = true;
};

enum class WeightDecayMode {
  Decay,             ///< decoupled weight decay (AdamW style): w -= lr * wd * w
  L2Regularization,  ///< wd * w added to the gradient
};
enum class AdamMode { Adam, AdamNoBias, AdaMax, Lamb, LambNoBias };
enum class AdaptiveMode { AdaGrad, RMSProp, CenteredRMSProp, AdaDelta };
enum class OptimizerType { SGD, Adam, Adaptive };

/// Gradient clipping by global norm: the gradients of `weightIds` (all weights when empty) are
/// scaled by min(1, maxNorm / (norm + 1e-6)), norm being the L2 norm of all of them together.
class ClipNormSettings {
 public:
  ClipNormSettings(std::vector<TensorId> weightIds, float maxNorm);
  static ClipNormSettings clipWeights(std::vector<TensorId> weightIds, float maxNorm) { return {std::move(weightIds), maxNorm}; }
  static ClipNormSettings clipAllWeights(float maxNorm) { return {{}, maxNorm}; }
  const std::vector<TensorId>& weightIds() const { return weightIds_; }
  float maxNorm() const { return maxNorm_; }
  bool clipsAll() const { return weightIds_.empty(); }

 private:
  std::vector<TensorId> weightIds_;
  float maxNorm_;
};

/// Base of the optimizers. Hyper-parameters are named as in PopART's insertSpecific:
/// "learningRate", "weightDecay", "momentum", "dampening", "velocityScaling", "beta1", "beta2",
/// "eps", "alpha", "maxWeightNorm"; the global "lossScaling".
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual OptimizerType type() const = 0;
  virtual std::unique_ptr<Optimizer> clone() const = 0;
  /// "SGD", "Adam", "Adaptive" with the mode.
  virtual std::string str() const = 0;

  /// The value used for `weight` (its specific one, else the default). Throws on an unknown name.
  OptimizerValue get(const std::string& name, const TensorId& weight = "") const;
  const OptimizerValue& lossScaling() const { return lossScaling_; }
  /// Per-weight hyper-parameters ("learningRate", ...). Throws graft::Error on unknown names.
  void insertSpecific(const TensorId& weight, const std::map<std::string, std::pair<float, bool>>& values);
  bool hasSpecific(const TensorId& weight) const { return specific_.count(weight) != 0; }
  const std::map<TensorId, std::map<std::string, OptimizerValue>>& specifics() const { return specific_; }
  /// Hyper-parameter names this optimizer uses (per weight).
  std::vector<std::string> hyperParameterNames() const;
  /// Throws graft::Error naming the optimizer and hyper-parameter when a value is NaN, infinite
  /// or out of its range (learning rate and weight decay >= 0, momentum, beta1 and beta2 in
  /// [0, 1), dampening and alpha in [0, 1], velocityScaling, eps and lossScaling > 0). Every
  /// constructor and insertSpecific call it.
  void validate() const;
  const std::vector<ClipNormSettings>& clipNormSettings() const { return clip_; }
  void setClipNormSettings(std::vector<ClipNormSettings> c) { clip_ = std::move(c); }

 protected:
  /// `defaults`: every hyper-parameter with its PopART default; `params`: the user's map with
  /// PopART's keys ("defaultLearningRate", ..., "lossScaling").
  Optimizer(std::map<std::string, OptimizerValue> defaults, const std::map<std::string, std::pair<float, bool>>& params,
            const std::string& kind);
  std::map<std::string, OptimizerValue> defaults_;
  std::map<TensorId, std::map<std::string, OptimizerValue>> specific_;
  OptimizerValue lossScaling_{1.0f, true};
  std::vector<ClipNormSettings> clip_;
  std::string kind_;
};

/// Stochastic gradient descent (PopART's SGD; with dampening 0 it matches torch.optim.SGD):
///   v = mm * v + (1 - dm) * (g / ls + wd * w)        (with momentum)
///   w -= lr * v   (nesterov: w -= lr * (g / ls + wd * w + mm * v))
///   without momentum: w -= lr * (1 - dm) * (g / ls + wd * w)
/// Keys: defaultLearningRate (0.1), defaultWeightDecay (0), defaultMomentum (0), defaultDampening
/// (0), defaultVelocityScaling (1), lossScaling (1), nesterov (0 or 1).
class SGD : public Optimizer {
 public:
  explicit SGD(const std::map<std::string, std::pair<float, bool>>& params = {}, std::vector<ClipNormSettings> clip = {});
  SGD(OptimizerValue learningRate, OptimizerValue weightDecay = {0.0f, true}, OptimizerValue momentum = {0.0f, true},
      OptimizerValue dampening = {0.0f, true}, OptimizerValue velocityScaling = {1.0f, true},
      OptimizerValue lossScaling = {1.0f, true}, bool nesterov = false, std::vector<ClipNormSettings> clip = {});
  OptimizerType type() const override { return OptimizerType::SGD; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<SGD>(*this); }
  std::string str() const override;
  bool nesterov() const { return nesterov_; }
  /// True when any weight has a non-zero or non-constant momentum (momentum state is kept).
  bool usesMomentum() const;

 protected:
  bool nesterov_ = false;
};

/// SGD whose hyper-parameters are all constant.
class ConstSGD : public SGD {
 public:
  explicit ConstSGD(float learningRate, float weightDecay = 0.0f, float lossScaling = 1.0f);
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<ConstSGD>(*this); }
};

/// Adam, AdamW (WeightDecayMode::Decay), AdaMax and Lamb with PopART's equations (adam.hpp docs
/// in docs/training.md). Keys: defaultLearningRate (0.1), defaultWeightDecay (0), defaultBeta1
/// (0.9), defaultBeta2 (0.999), defaultEps (1e-6), lossScaling (1), maxWeightNorm (10).
class Adam : public Optimizer {
 public:
  explicit Adam(const std::map<std::string, std::pair<float, bool>>& params = {}, AdamMode mode = AdamMode::Adam,
                WeightDecayMode decayMode = WeightDecayMode::Decay, std::vector<ClipNormSettings> clip = {});
  OptimizerType type() const override { return OptimizerType::Adam; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<Adam>(*this); }
  std::string str() const override;
  AdamMode mode() const { return mode_; }
  WeightDecayMode weightDecayMode() const { return decayMode_; }

 private:
  AdamMode mode_;
  WeightDecayMode decayMode_;
};

/// AdaGrad, RMSProp, CenteredRMSProp and AdaDelta with PopART's equations. Keys:
/// defaultLearningRate (0.01), defaultWeightDecay (0), defaultAlpha (0.99), defaultMomentum (0),
/// defaultEps (1e-6), lossScaling (1).
class Adaptive : public Optimizer {
 public:
  explicit Adaptive(const std::map<std::string, std::pair<float, bool>>& params = {},
                    AdaptiveMode mode = AdaptiveMode::RMSProp, WeightDecayMode decayMode = WeightDecayMode::Decay,
                    bool rmspropTFVariant = false);
  OptimizerType type() const override { return OptimizerType::Adaptive; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<Adaptive>(*this); }
  std::string str() const override;
  AdaptiveMode mode() const { return mode_; }
  WeightDecayMode weightDecayMode() const { return decayMode_; }
  bool rmspropTFVariant() const { return tfVariant_; }

 private:
  AdaptiveMode mode_;
  WeightDecayMode decayMode_;
  bool tfVariant_;
};

}  // namespace graft
