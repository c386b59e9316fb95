// TrainingSession: the plan graph gets the backward pass (autodiff) and the optimizer step;
// with gradient accumulation the step accumulates gradients and a second program applies the
// optimizer every accumulationFactor micro-batches.
#include <set>

#include "autodiff/autodiff.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "optim/optimizer_graph.hpp"
#include "passes/training_mode.hpp"
#include "runtime/session_impl.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft {
namespace {

struct TrainingImpl : Session::Impl {
  TensorId loss;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<TensorId> weights;
  /// Inputs and intermediates whose gradients are anchored ("Gradient___<id>"): PopART lets a
  /// program read the gradient of any tensor the loss depends on, trained or not.
  std::vector<TensorId> gradientAnchors;

  bool weightsAreConstant() const override { return false; }
  bool isTraining() const override { return true; }
  const ir::Tensor* lossGradientSeed(const ir::Graph& g) const override { return g.findTensor(optim::kLossScalingId); }
  // Training graphs run the backend's training pipeline (cpu: no weight freezing, and fusions
  // that keep every value the backward pass reads).
  const std::vector<std::string>& pipeline() const override { return backend->passes(backends::PassMode::Training); }
  int accumulationFactor() const override {
    return options.enableGradientAccumulation ? options.accumulationFactor : 1;
  }

  void checkAnchor(const TensorId& id) const override {
    GRAFT_CHECK(id != loss || model.graph->findTensor(id),
                "the loss '{}' is not a tensor of the model: name the output of a loss op (for example what "
                "builder.aiGraphcore.nllloss returned)", loss);
    std::string prefix = autodiff::kGradientPrefix;
    if (id.rfind(prefix, 0) == 0) {
      std::string w = id.substr(prefix.size());
      if (std::find(weights.begin(), weights.end(), w) != weights.end()) return;
      const ir::Tensor* t = model.graph->findTensor(w);
      GRAFT_CHECK(t, "anchor '{}' is the gradient of '{}', which is not a tensor of the model", id, w);
      // PopART's words first (its Ir has no such tensor), then why.
      GRAFT_CHECK(t->type().isTensor() && isFloatingPoint(t->info().dataType()),
                  "Anchor tensor `{}' not in Ir Tensors: it is the gradient of '{}', which is {}, and only "
                  "floating-point tensors have gradients",
                  id, w, t->type().str());
      GRAFT_CHECK(lossDependsOn_.count(t),
                  "anchor '{}' is the gradient of '{}', but the loss '{}' does not depend on '{}' through "
                  "differentiable values", id, w, loss, w);
      return;
    }
    Session::Impl::checkAnchor(id);
  }

  std::vector<TensorId> persistentIds() const override {
    std::vector<TensorId> ids;
    for (const ir::Tensor* t : model.graph->initializers())
      if (t->kind() == ir::TensorKind::Variable) ids.push_back(t->id());
    return ids;
  }

  // The trained weights: floating-point Variables the loss depends on through differentiable
  // inputs (not optimizer state, not running statistics).
  void findWeights() {
    const ir::Graph& g = *model.graph;
    ir::Tensor* l = g.findTensor(loss);
    GRAFT_CHECK(l, "the loss '{}' is not a tensor of the model", loss);
    std::set<const ir::Tensor*> seen;
    std::vector<const ir::Tensor*> stack{l};
    while (!stack.empty()) {
      const ir::Tensor* t = stack.back();
      stack.pop_back();
      if (!seen.insert(t).second) continue;
      lossDependsOn_.insert(t);
      if (const ir::Node* n = t->producer()) {
        const ops::OpDef* def = ops::Registry::instance().find(*n);
        for (size_t k = 0; k < n->numInputs(); ++k) {
          bool nonDiff = def && std::find(def->nonDifferentiableInputs.begin(), def->nonDifferentiableInputs.end(),
                                          static_cast<int>(k)) != def->nonDifferentiableInputs.end();
          if (n->input(k) && !nonDiff) stack.push_back(n->input(k));
        }
        for (const ir::Tensor* i : n->implicitInputs()) stack.push_back(i);
      }
    }
    for (const ir::Tensor* t : g.initializers())
      if (t->kind() == ir::TensorKind::Variable && isFloatingPoint(t->info().dataType()) && seen.count(t) &&
          !optim::isOptimizerTensor(t->id()))
        weights.push_back(t->id());
    // A loss that depends on no weight is valid, as in PopART: the step then only computes the
    // anchored gradients of inputs and intermediates.
  }

  /// Tensors the loss depends on through differentiable inputs (filled by findWeights).
  std::set<const ir::Tensor*> lossDependsOn_;

  void transform(ir::Graph& g, Plan& p) override {
    passes::PassContext ctx;
    // Gradient nodes of the model, batch statistics and dropout, before the backward pass is grown
    // from them.
    passes::runPipeline(g, {"infer-shapes", "expand-gradient", "fold-constants", "infer-shapes", "training-mode"}, ctx);
    ir::Tensor* l = &g.tensor(loss);
    const TensorInfo& li = l->info();
    GRAFT_CHECK(li.hasShape() && (!li.isStatic() || li.nelms() == 1),
                "the loss '{}' must be a scalar (one element), it is {}; reduce it (for example with reduction \"Sum\" "
                "or \"Mean\")", loss, li.str());
    // The backward pass starts from the loss-scaling factor, in the loss's type and shape.
    ir::Tensor* seed = &g.tensor(optim::kLossScalingId);
    if (li.dataType() != DataType::Float || li.rank() != 0) {
      ir::Node* cast = g.addNode("CastLike", "", {seed, l}, {g.uniqueId("lossGradSeed")});
      ops::inferNode(*cast, false);
      ir::Node* shape = g.addNode("Shape", "", {l}, {g.uniqueId("lossShape")});
      ops::inferNode(*shape, false);
      ir::Node* rs = g.addNode("Reshape", "", {cast->output(0), shape->output(0)}, {g.uniqueId("lossGradSeed")});
      ops::inferNode(*rs, false);
      seed = rs->output(0);
    }
    std::vector<ir::Tensor*> wrt;
    for (const auto& w : weights) wrt.push_back(&g.tensor(w));
    for (const auto& t : gradientAnchors) wrt.push_back(&g.tensor(t));
    auto grads = autodiff::differentiate(g, l, wrt, seed);
    for (const auto& t : gradientAnchors)
      GRAFT_CHECK(grads.at(&g.tensor(t)), "anchor '{}{}': the loss '{}' gives '{}' no gradient", autodiff::kGradientPrefix,
                  t, loss, t);
    wrt.resize(weights.size());
    std::vector<std::pair<ir::Tensor*, ir::Tensor*>> pairs;
    for (ir::Tensor* w : wrt) {
      ir::Tensor* gr = grads.at(w);
      if (!gr) {
        GRAFT_LOG_WARN("weight '{}' gets no gradient from the loss '{}' (it only reaches it through non-differentiable "
                       "values); it is not trained", w->id(), loss);
        continue;
      }
      pairs.emplace_back(w, gr);
    }
    // Replicas accumulate too (even one micro-batch), so that the accumulators can be all-reduced
    // between the backward pass and the optimizer step.
    if (accumulationFactor() <= 1 && !replicated()) {
      optim::addUpdates(*optimizer, g, pairs);
      return;
    }
    if (!g.otherOpsets.count(ops::kGraftDomain)) g.otherOpsets[ops::kGraftDomain] = 1;
    std::vector<TensorId> trained;
    for (const auto& [w, gr] : pairs) {
      ir::Node* acc = g.addNode("Accumulate", ops::kGraftDomain, {&g.tensor(optim::stateId("Accum", w->id())), gr}, {},
                                {}, "accumulate_" + w->id());
      (void)acc;
      trained.push_back(w->id());
      p.accumulatorIds.push_back(optim::stateId("Accum", w->id()));
    }
    p.applyGraph = buildApplyGraph(trained);
  }

  // The optimizer step over the accumulated gradients, then the accumulators back to zero.
  std::unique_ptr<ir::Graph> buildApplyGraph(const std::vector<TensorId>& trained) {
    auto g = std::make_unique<ir::Graph>("optimizer_step");
    g->setOpsetVersion(model.graph->opsetVersion());
    g->otherOpsets[ops::kGraftDomain] = 1;
    for (const ir::Tensor* t : model.graph->initializers()) {
      bool ours = optim::isOptimizerTensor(t->id()) ||
                  std::find(trained.begin(), trained.end(), t->id()) != trained.end();
      if (ours) g->addInitializer(t->id(), *t->data(), t->kind());  // shares the buffer
    }
    std::vector<std::pair<ir::Tensor*, ir::Tensor*>> pairs;
    for (const auto& w : trained) {
      ir::Tensor* acc = &g->tensor(optim::stateId("Accum", w));
      ir::Tensor* grad = acc;
      if (options.accumulationAndReplicationReductionType == ReductionType::Mean) {
        // The mean over micro-batches and over replicas (the accumulators hold their sum).
        NDArray s = NDArray::scalar<float>(
            DataType::Float, static_cast<float>(1.0 / (static_cast<double>(accumulationFactor()) * globalReplicas())));
        ir::Tensor* k = g->addInitializer(g->uniqueId("accumulationScale"), s, ir::TensorKind::Constant);
        ir::Node* cast = g->addNode("CastLike", "", {k, acc}, {g->uniqueId("accumulationScale_" + w)});
        ops::inferNode(*cast, false);
        ir::Node* mul = g->addNode("Mul", "", {acc, cast->output(0)}, {g->uniqueId("meanGradient_" + w)});
        ops::inferNode(*mul, false);
        grad = mul->output(0);
      }
      pairs.emplace_back(&g->tensor(w), grad);
    }
    optim::addUpdates(*optimizer, *g, pairs);
    std::vector<ir::Node*> updates = g->nodes();
    for (const auto& w : trained) {
      ir::Node* z = g->addNode("ZeroFill", ops::kGraftDomain, {&g->tensor(optim::stateId("Accum", w))}, {}, {}, "zero_" + w);
      for (ir::Node* u : updates) z->addRunsAfter(u);
    }
    return g;
  }
};

TrainingImpl& trainingImpl(Session::Impl& impl) { return static_cast<TrainingImpl&>(impl); }

// A per-weight value for a tensor that is not trained would silently do nothing (a typo).
void checkSpecifics(const Optimizer& opt, const std::vector<TensorId>& weights) {
  for (const auto& [w, values] : opt.specifics())
    GRAFT_CHECK(std::find(weights.begin(), weights.end(), w) != weights.end(),
                "{}: insertSpecific names '{}', which is not a trained weight (trained: {})", opt.str(), w,
                fmt::join(weights, ", "));
}

}  // namespace

std::unique_ptr<TrainingSession> TrainingSession::createFromOnnxModel(const std::string& model, const DataFlow& dataFlow,
                                                                      const TensorId& loss, const Optimizer& optimizer,
                                                                      std::shared_ptr<DeviceInfo> deviceInfo,
                                                                      const InputShapeInfo& inputShapeInfo,
                                                                      const SessionOptions& userOptions, const Patterns&) {
  GRAFT_CHECK(!userOptions.enableGradientAccumulation || userOptions.accumulationFactor >= 1,
              "SessionOptions.accumulationFactor must be at least 1, got {}", userOptions.accumulationFactor);
  GRAFT_CHECK(userOptions.accumulationFactor == 1 || userOptions.enableGradientAccumulation,
              "SessionOptions.accumulationFactor is {} but enableGradientAccumulation is off; turn it on to accumulate",
              userOptions.accumulationFactor);
  auto impl = std::make_unique<TrainingImpl>();
  impl->loss = loss;
  impl->optimizer = optimizer.clone();
  // The anchors may name gradients of weights, which are known only once the model is loaded.
  DataFlow noAnchors(dataFlow.batchesPerStep(), AnchorReturnTypeMap{{loss, AnchorReturnType("Final")}});
  impl->init(model, noAnchors, std::move(deviceInfo), inputShapeInfo, userOptions);
  impl->dataFlow = dataFlow;
  passes::prepareTrainingMode(*impl->model.graph);
  impl->findWeights();
  for (const auto& id : dataFlow.anchors()) {
    impl->checkAnchor(id);
    std::string prefix = autodiff::kGradientPrefix;
    if (id.rfind(prefix, 0) != 0) continue;
    std::string t = id.substr(prefix.size());
    if (std::find(impl->weights.begin(), impl->weights.end(), t) == impl->weights.end())
      impl->gradientAnchors.push_back(t);
  }
  checkSpecifics(*impl->optimizer, impl->weights);
  optim::createState(*impl->optimizer, *impl->model.graph, impl->weights,
                     impl->accumulationFactor() > 1 || impl->replicated());
  return std::unique_ptr<TrainingSession>(new TrainingSession(std::move(impl)));
}

void TrainingSession::updateOptimizerFromHost(const Optimizer& optimizer) {
  std::lock_guard<std::recursive_mutex> lock(impl_->mutex);
  auto& t = trainingImpl(*impl_);
  checkSpecifics(optimizer, t.weights);
  optim::writeHyperParameters(*t.optimizer, optimizer, *t.model.graph, t.weights);
  t.optimizer = optimizer.clone();
}

std::vector<TensorId> TrainingSession::trainedWeightIds() const { return trainingImpl(*impl_).weights; }
const TensorId& TrainingSession::lossId() const { return trainingImpl(*impl_).loss; }

}  // namespace graft
