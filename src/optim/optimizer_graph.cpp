#include "optim/optimizer_graph.hpp"

#include <set>

#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"

namespace graft::optim {
namespace {

const char* kStateKinds[] = {"Accl", "Accl1", "Accl2", "Accl3", "Step", "Accum"};

NDArray floatScalar(float v) { return NDArray::scalar<float>(DataType::Float, v); }

// The per-weight state tensors an optimizer keeps.
std::vector<std::string> stateKinds(const Optimizer& opt, const std::string& w) {
  std::vector<std::string> kinds;
  switch (opt.type()) {
    case OptimizerType::SGD:
      if (static_cast<const SGD&>(opt).usesMomentum()) kinds.push_back("Accl");
      break;
    case OptimizerType::Adam:
      kinds = {"Accl1", "Accl2", "Step"};
      break;
    case OptimizerType::Adaptive: {
      const auto& a = static_cast<const Adaptive&>(opt);
      kinds.push_back("Accl1");
      if (a.mode() == AdaptiveMode::CenteredRMSProp || a.mode() == AdaptiveMode::AdaDelta) kinds.push_back("Accl2");
      OptimizerValue mm = opt.get("momentum", w);
      if (!mm.isConst() || mm.val() != 0.0f) kinds.push_back("Accl3");
      break;
    }
  }
  return kinds;
}

// `resume`: a tensor the model already holds keeps its value (optimizer state of a checkpoint);
// otherwise it takes `init` (hyper-parameters follow the session's optimizer, not the checkpoint's).
ir::Tensor* ensureTensor(ir::Graph& g, const std::string& id, const NDArray& init, ir::TensorKind kind, bool resume) {
  if (ir::Tensor* t = g.findTensor(id)) {
    const NDArray* d = t->data();
    if (d && d->dtype() == init.dtype() && d->shape() == init.shape()) {
      if (!resume) t->setData(init);
      t->setKind(kind);
      return t;
    }
    // A checkpoint's state of the wrong type or shape is an error, never a silent restart.
    GRAFT_CHECK(!resume || !d,
                "the model (checkpoint) has optimizer state '{}' of type {} {}, but this model and "
                "optimizer need {} {}: it was written for another model or optimizer",
                id, dtypeName(d ? d->dtype() : DataType::Undefined), d ? shapeToString(d->shape()) : "",
                dtypeName(init.dtype()), shapeToString(init.shape()));
    GRAFT_CHECK(t->kind() == ir::TensorKind::Variable || t->kind() == ir::TensorKind::Constant,
                "the model has a tensor '{}' that is not optimizer state, but graft reserves that name", id);
    g.removeTensor(t);
  }
  return g.addInitializer(id, init, kind);
}

}  // namespace

std::string stateId(const std::string& kind, const std::string& weight) { return kind + "___" + weight; }

bool isOptimizerTensor(const std::string& id) {
  if (id == kLossScalingId) return true;
  auto pos = id.find("___");
  if (pos == std::string::npos || pos == 0) return false;
  std::string kind = id.substr(0, pos);
  for (const char* k : kStateKinds)
    if (kind == k) return true;
  static const std::set<std::string> hyper = {"learningRate", "weightDecay", "momentum", "dampening", "velocityScaling",
                                              "beta1",        "beta2",       "eps",      "alpha",     "maxWeightNorm"};
  return hyper.count(kind) != 0;
}

void createState(const Optimizer& opt, ir::Graph& source, const std::vector<std::string>& weights, bool accumulate) {
  const OptimizerValue& ls = opt.lossScaling();
  ensureTensor(source, kLossScalingId, floatScalar(ls.val()), ls.isConst() ? ir::TensorKind::Constant : ir::TensorKind::Variable,
               false);
  for (const std::string& w : weights) {
    const ir::Tensor& wt = source.tensor(w);
    const NDArray& wd = *wt.data();
    for (const std::string& kind : stateKinds(opt, w)) {
      NDArray init = kind == "Step" ? NDArray(DataType::Float, {}) : NDArray(wd.dtype(), wd.shape());
      ensureTensor(source, stateId(kind, w), init, ir::TensorKind::Variable, true);
    }
    if (accumulate) {
      // The accumulator restarts at zero whatever a checkpoint holds: checkpoints are taken
      // between steps, when it is zero.
      ensureTensor(source, stateId("Accum", w), NDArray(wd.dtype(), wd.shape()), ir::TensorKind::Variable, false);
    }
    for (const std::string& hp : opt.hyperParameterNames()) {
      OptimizerValue v = opt.get(hp, w);
      ensureTensor(source, stateId(hp, w), floatScalar(v.val()), v.isConst() ? ir::TensorKind::Constant : ir::TensorKind::Variable,
                   false);
    }
  }
}

void addUpdates(const Optimizer& opt, ir::Graph& g, const std::vector<std::pair<ir::Tensor*, ir::Tensor*>>& weightGrads,
                double gradientDivisor) {
  std::vector<ir::Node*> sinks;
  for (ir::Node* n : g.nodes()) {
    bool used = false;
    for (ir::Tensor* t : n->outputs()) used |= t && !t->uses().empty();
    if (!used) sinks.push_back(n);
  }
  auto hp = [&](const std::string& name, const std::string& w) { return &g.tensor(stateId(name, w)); };
  auto add = [&](const std::string& type, const std::vector<ir::Tensor*>& inputs, ir::Attributes attrs,
                 const std::string& name, size_t outs) {
    std::vector<std::string> ids;
    for (size_t i = 0; i < outs; ++i) ids.push_back(g.uniqueId(name));
    ir::Node* n = g.addNode(type, ops::kGraftDomain, inputs, ids, std::move(attrs), g.uniqueId(name));
    if (!g.otherOpsets.count(ops::kGraftDomain)) g.otherOpsets[ops::kGraftDomain] = 1;
    ops::inferNode(*n, false);
    return n;
  };
  ir::Tensor* ls = &g.tensor(kLossScalingId);
  if (gradientDivisor != 1.0) {
    // One scalar op: the loss scaling times the count the gradient sums are averaged over.
    ir::Tensor* k = g.addInitializer(g.uniqueId("gradientDivisor"), floatScalar(static_cast<float>(gradientDivisor)),
                                     ir::TensorKind::Constant);
    ir::Node* mul = g.addNode("Mul", "", {ls, k}, {g.uniqueId("lossScalingTimesDivisor")});
    ops::inferNode(*mul, false);
    ls = mul->output(0);
  }

  // Gradient clipping by global norm.
  std::map<ir::Tensor*, ir::Tensor*> grads;
  for (const auto& [w, gr] : weightGrads) grads[w] = gr;
  for (const ClipNormSettings& c : opt.clipNormSettings()) {
    std::vector<ir::Tensor*> group;
    for (const auto& [w, gr] : weightGrads)
      if (c.clipsAll() || std::find(c.weightIds().begin(), c.weightIds().end(), w->id()) != c.weightIds().end())
        group.push_back(w);
    for (const auto& id : c.weightIds())
      GRAFT_CHECK(std::any_of(weightGrads.begin(), weightGrads.end(), [&](const auto& p) { return p.first->id() == id; }),
                  "ClipNormSettings names '{}', which is not a trained weight", id);
    if (group.empty()) continue;
    ir::Tensor* maxNorm = g.addInitializer(g.uniqueId("clipMaxNorm"), floatScalar(c.maxNorm()), ir::TensorKind::Constant);
    std::vector<ir::Tensor*> ins{ls, maxNorm};
    for (ir::Tensor* w : group) ins.push_back(grads[w]);
    ir::Tensor* scale = add("GlobalNormScale", ins, {}, "clipScale", 1)->output(0);
    for (ir::Tensor* w : group) {
      ir::Node* cast = g.addNode("CastLike", "", {scale, grads[w]}, {g.uniqueId("clipScale_" + w->id())});
      ops::inferNode(*cast, false);
      ir::Node* mul = g.addNode("Mul", "", {grads[w], cast->output(0)}, {g.uniqueId("clipped_" + w->id())});
      ops::inferNode(*mul, false);
      grads[w] = mul->output(0);
    }
  }

  std::vector<ir::Node*> updates;
  for (const auto& [w, g0] : weightGrads) {
    const std::string& id = w->id();
    ir::Tensor* gr = grads[w];
    ir::Attributes at;
    std::string name = "update_" + id;
    switch (opt.type()) {
      case OptimizerType::SGD: {
        const auto& s = static_cast<const SGD&>(opt);
        at.set("nesterov", int64_t{s.nesterov()});
        std::vector<ir::Tensor*> ins{w, gr, hp("learningRate", id), hp("weightDecay", id), hp("momentum", id),
                                     hp("dampening", id), hp("velocityScaling", id), ls};
        if (ir::Tensor* v = g.findTensor(stateId("Accl", id))) ins.push_back(v);
        updates.push_back(add("SGDUpdate", ins, at, name, 0));
        break;
      }
      case OptimizerType::Adam: {
        const auto& a = static_cast<const Adam&>(opt);
        at.set("mode", static_cast<int64_t>(a.mode()));
        at.set("decay_mode", static_cast<int64_t>(a.weightDecayMode()));
        updates.push_back(add("AdamUpdate",
                              {w, gr, &g.tensor(stateId("Accl1", id)), &g.tensor(stateId("Accl2", id)),
                               &g.tensor(stateId("Step", id)), hp("learningRate", id), hp("weightDecay", id), hp("beta1", id),
                               hp("beta2", id), hp("eps", id), ls, hp("maxWeightNorm", id)},
                              at, name, 0));
        break;
      }
      case OptimizerType::Adaptive: {
        const auto& a = static_cast<const Adaptive&>(opt);
        at.set("mode", static_cast<int64_t>(a.mode()));
        at.set("decay_mode", static_cast<int64_t>(a.weightDecayMode()));
        at.set("tf_variant", int64_t{a.rmspropTFVariant()});
        updates.push_back(add("AdaptiveUpdate",
                              {w, gr, &g.tensor(stateId("Accl1", id)), g.findTensor(stateId("Accl2", id)),
                               g.findTensor(stateId("Accl3", id)), hp("learningRate", id), hp("weightDecay", id),
                               hp("alpha", id), hp("momentum", id), hp("eps", id), ls},
                              at, name, 0));
        break;
      }
    }
  }
  // Updates write weights in place: each runs after every sink of the graph as it was before
  // them, hence after every node that could read a weight.
  for (ir::Node* u : updates)
    for (ir::Node* n : sinks) u->addRunsAfter(n);
}

void writeHyperParameters(const Optimizer& current, const Optimizer& opt, ir::Graph& source,
                          const std::vector<std::string>& weights) {
  GRAFT_CHECK(current.type() == opt.type() && current.str() == opt.str(),
              "updateOptimizerFromHost: the session was compiled for {}, got {}; create a new session to change the "
              "optimizer kind", current.str(), opt.str());
  auto write = [&](const std::string& id, const OptimizerValue& oldV, const OptimizerValue& newV, const std::string& what) {
    if (oldV.isConst()) {
      GRAFT_CHECK(newV.isConst() && newV.val() == oldV.val(),
                  "updateOptimizerFromHost: {} was compiled as the constant {}; it cannot change to {} (make it "
                  "non-constant, OptimizerValue({}, false), when creating the session)", what, oldV.val(), newV.val(), newV.val());
      return;
    }
    ir::Tensor* t = source.findTensor(id);
    GRAFT_ASSERT(t && t->mutableData(), "hyper-parameter tensor '{}' is missing", id);
    t->mutableData()->data<float>()[0] = newV.val();
  };
  write(kLossScalingId, current.lossScaling(), opt.lossScaling(), "lossScaling");
  for (const std::string& w : weights)
    for (const std::string& hp : current.hyperParameterNames())
      write(stateId(hp, w), current.get(hp, w), opt.get(hp, w), fmt::format("{} of '{}'", hp, w));
}

}  // namespace graft::optim
