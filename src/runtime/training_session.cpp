// TrainingSession: the plan graph gets the backward pass (autodiff) and the optimizer step;
// with gradient accumulation the step accumulates gradients and a second program applies the
// optimizer every accumulationFactor micro-batches.
#include <algorithm>
#include <map>
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
                "builder.aiGraphcore.nllloss returned)",
                loss);
    std::string prefix = autodiff::kGradientPrefix;
    if (id.rfind(prefix, 0) == 0) {
      std::string w = id.substr(prefix.size());
      if (std::find(weights.begin(), weights.end(), w) != weights.end()) return;
      const ir::Tensor* t = model.graph->findTensor(w);
      GRAFT_CHECK(t, "anchor '{}' is the gradient of '{}', which is not a tensor of the model", id, w);
      // PopART's words first (its Ir has no such tensor), then why.
      GRAFT_CHECK(t->type().isTensor() &&
                      (isFloatingPoint(t->info().dataType()) || (integerLoss() && isInteger(t->info().dataType()))),
                  "Anchor tensor `{}' not in Ir Tensors: it is the gradient of '{}', which is {}, and only "
                  "floating-point tensors have gradients (integer ones too when the loss is an integer tensor)",
                  id, w, t->type().str());
      GRAFT_CHECK(lossDependsOn_.count(t),
                  "Anchor tensor `{}' not in Ir Tensors: it is the gradient of '{}', but the loss '{}' does not "
                  "depend on '{}' through differentiable values",
                  id, w, loss, w);
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
    // As PopART does, when the session is made (transform checks again once shapes are final).
    // The loss ops of ai.graphcore are typed only once training is set up: infer the loss's own
    // node now when its inputs are typed.
    if (!l->type().known() && l->producer()) {
      ir::Node* p = l->producer();
      bool typed = true;
      for (const ir::Tensor* t : p->inputs()) typed &= !t || t->type().known();
      if (typed) ops::inferNode(*p, false);
    }
    checkScalarLoss(l->info());
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

  /// An integer loss (PopART trains those: its gradients are integers too). The loss ops of
  /// ai.graphcore are typed only once training is set up; their output has input 0's type, so an
  /// untyped loss takes the type of the first typed tensor along the inputs 0 it comes from.
  bool integerLoss() const {
    const ir::Tensor* t = model.graph->findTensor(loss);
    for (int hops = 0; t && t->info().dataType() == DataType::Undefined && hops < 16; ++hops)
      t = t->producer() && t->producer()->numInputs() > 0 ? t->producer()->input(0) : nullptr;
    return t && t->type().isTensor() && isInteger(t->info().dataType());
  }

  void checkScalarLoss(const TensorInfo& li) const {
    GRAFT_CHECK(!li.hasShape() || !li.isStatic() || li.nelms() == 1,
                "the loss '{}' is {}: reduce it to one element (for example with reduction \"Sum\" or \"Mean\"), "
                "since the loss must be a scalar tensor",
                loss, li.str());
  }

  /// Tensors the loss depends on through differentiable inputs (filled by findWeights).
  std::set<const ir::Tensor*> lossDependsOn_;

  void transform(ir::Graph& g, Plan& p) override {
    passes::PassContext ctx;
    // Gradient nodes of the model, batch statistics and dropout, before the backward pass is grown
    // from them; GELU spelled out becomes one op, whose backward reads x alone (an anchored
    // intermediate is a graph output here, planFor, so the fusion keeps it).
    passes::runPipeline(
        g, {"infer-shapes", "expand-gradient", "fold-constants", "infer-shapes", "training-mode", "fuse-gelu"}, ctx);
    ir::Tensor* l = &g.tensor(loss);
    const TensorInfo& li = l->info();
    GRAFT_CHECK(li.hasShape(), "the loss '{}' has no known shape: it must be a scalar tensor", loss);
    checkScalarLoss(li);
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
      GRAFT_CHECK(grads.at(&g.tensor(t)), "anchor '{}{}': the loss '{}' gives '{}' no gradient",
                  autodiff::kGradientPrefix, t, loss, t);
    wrt.resize(weights.size());
    std::vector<std::pair<ir::Tensor*, ir::Tensor*>> pairs;
    for (ir::Tensor* w : wrt) {
      ir::Tensor* gr = grads.at(w);
      if (!gr) {
        GRAFT_LOG_WARN(
            "weight '{}' gets no gradient from the loss '{}' (it only reaches it through non-differentiable "
            "values); it is not trained",
            w->id(), loss);
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
      ir::Attributes attrs;
      if (overwritesAccumulators()) attrs.set("overwrite", int64_t{1});
      ir::Node* acc = g.addNode("Accumulate", ops::kGraftDomain, {&g.tensor(optim::stateId("Accum", w->id())), gr}, {},
                                std::move(attrs), "accumulate_" + w->id());
      // Added after the whole backward pass, it would run only once nothing else is ready, after
      // all of it; eager, it runs right after its gradient's producer, so the gradient is complete
      // (and its bucket's all-reduce can start, replication.cpp) while the backward pass goes on.
      // So does the Identity that names the gradient (autodiff's Gradient___<weight>), also added
      // after the backward pass.
      acc->eager = true;
      for (ir::Node* n = gr->producer(); n && n->type() == "Identity" && n->numInputs() == 1 && n->input(0);
           n = n->input(0)->producer())
        n->eager = true;
      trained.push_back(w->id());
      p.accumulatorIds.push_back(optim::stateId("Accum", w->id()));
    }
    // Sharded: each replica's optimizer step is built once the replicas exist (buildShardGraph).
    if (!splitsOptimizerStep()) p.applyGraph = buildApplyGraph(trained);
  }

  // What the accumulated gradients are averaged over for a Mean reduction (the accumulators hold
  // sums): the updates divide by it with the loss scaling (optim::addUpdates).
  double meanDivisor() const {
    if (options.accumulationAndReplicationReductionType != ReductionType::Mean) return 1.0;
    return static_cast<double>(accumulationFactor()) * globalReplicas();
  }

  void setUpSharding() override {
    auto sh = std::make_unique<Sharding>();
    sh->views = !shardsOptimizerState();
    const int global = globalReplicas();
    const int offset = options.enableDistributedReplicatedGraphs ? options.globalReplicaOffset : 0;
    sh->state.resize(static_cast<size_t>(localReplicas()));
    for (const TensorId& w : weights) {
      const ir::Tensor& wt = model.graph->tensor(w);
      Sharding::Weight sw;
      sw.id = w;
      sw.numel = wt.data()->numel();
      sw.shard = (sw.numel + global - 1) / global;
      for (const char* kind : {"Accl", "Accl1", "Accl2", "Accl3", "Step"}) {
        const ir::Tensor* t = model.graph->findTensor(optim::stateId(kind, w));
        if (!t || !t->data() || t->kind() != ir::TensorKind::Variable) continue;
        bool perElement =
            t->data()->numel() == sw.numel && t->data()->shape() == wt.data()->shape() && std::string(kind) != "Step";
        (perElement ? sw.state : sw.private_).push_back(t->id());
        if (perElement && sh->views) continue;  // read in place (buildShardGraph)
        for (int i = 0; i < localReplicas(); ++i) {
          NDArray own = perElement ? NDArray(t->data()->dtype(), {sh->length(sw, offset + i)}) : t->data()->clone();
          sh->state[i].emplace(t->id(), std::move(own));
        }
      }
      sh->weights.push_back(std::move(sw));
    }
    sh->materialized = true;  // the model graph holds the initial (or a checkpoint's) state
    sharding = std::move(sh);
  }

  std::unique_ptr<ir::Graph> buildShardGraph(Plan& p, int i) override {
    const int global = (options.enableDistributedReplicatedGraphs ? options.globalReplicaOffset : 0) + i;
    auto g = std::make_unique<ir::Graph>(fmt::format("optimizer_step_replica_{}", global));
    g->setOpsetVersion(model.graph->opsetVersion());
    g->otherOpsets[ops::kGraftDomain] = 1;
    std::set<std::string> owned;  // ids this graph gets as shards or private copies
    std::vector<std::pair<ir::Tensor*, ir::Tensor*>> pairs;
    std::vector<ir::Tensor*> zeroed;  // accumulator slices this graph zeroes after the update
    for (size_t k = 0; k < p.accumulatorIds.size(); ++k) {
      const std::string w = p.accumulatorIds[k].substr(std::string("Accum___").size());
      auto sw =
          std::find_if(sharding->weights.begin(), sharding->weights.end(), [&](const auto& x) { return x.id == w; });
      GRAFT_ASSERT(sw != sharding->weights.end(), "no shard layout for '{}'", w);
      const int64_t b = sharding->begin(*sw, global), n = sharding->length(*sw, global);
      if (n == 0) continue;  // a weight smaller than the replica count: this replica has no part of it
      // Elements [b, b + n) of a whole array, in place.
      auto slice = [&](NDArray& whole) {
        return NDArray::wrap(static_cast<char*>(whole.rawData()) + b * dtypeSize(whole.dtype()), whole.dtype(), {n});
      };
      ir::Tensor* wt = g->addInitializer(w, slice(*model.graph->tensor(w).mutableData()), ir::TensorKind::Variable);
      // Over MPI replica 0's accumulators hold the all-reduced sums (startBucket, reduceGradients);
      // in one process each replica sums its slice of every replica's accumulator here, in
      // parallel, and zeroes those slices after the update (unless the Accumulates overwrite).
      const size_t sources = comm ? 1 : p.replicas.size();
      std::vector<ir::Tensor*> parts;
      for (size_t j = 0; j < sources; ++j)
        parts.push_back(g->addInitializer(j == 0 ? p.accumulatorIds[k] : g->uniqueId(p.accumulatorIds[k] + "_replica"),
                                          slice(p.replicas[j]->accumulators[k]), ir::TensorKind::Variable));
      if (!comm && !overwritesAccumulators()) zeroed.insert(zeroed.end(), parts.begin(), parts.end());
      ir::Tensor* at = parts[0];
      if (parts.size() > 1) {
        ir::Node* sum = g->addNode("Sum", "", parts, {g->uniqueId("replicaSum_" + w)});
        ops::inferNode(*sum, false);
        at = sum->output(0);
      }
      for (const TensorId& id : sw->state) {
        g->addInitializer(id,
                          sharding->views ? slice(*model.graph->tensor(id).mutableData()) : sharding->state[i].at(id),
                          ir::TensorKind::Variable);
        owned.insert(id);
      }
      for (const TensorId& id : sw->private_) {
        g->addInitializer(id, sharding->state[i].at(id), ir::TensorKind::Variable);
        owned.insert(id);
      }
      owned.insert(w);
      pairs.emplace_back(wt, at);
    }
    // Hyper-parameters and loss scaling: the model's, shared (updateOptimizerFromHost writes them).
    for (const ir::Tensor* t : model.graph->initializers())
      if (optim::isOptimizerTensor(t->id()) && !owned.count(t->id()) && t->id().rfind("Accum___", 0) != 0 &&
          t->data() && t->data()->numel() <= 1 && !g->findTensor(t->id()))
        g->addInitializer(t->id(), *t->data(), t->kind());
    optim::addUpdates(*optimizer, *g, pairs, meanDivisor());
    zeroAfterUpdates(*g, zeroed);
    return g;
  }

  // ZeroFill nodes for `accumulators`, each after every node `g` has now (the updates).
  static void zeroAfterUpdates(ir::Graph& g, const std::vector<ir::Tensor*>& accumulators) {
    std::vector<ir::Node*> updates = g.nodes();
    for (ir::Tensor* a : accumulators) {
      ir::Node* z = g.addNode("ZeroFill", ops::kGraftDomain, {a}, {}, {}, g.uniqueId("zero_" + a->id()));
      for (ir::Node* u : updates) z->addRunsAfter(u);
    }
  }

  // The optimizer step over the accumulated gradients, then the accumulators back to zero.
  std::unique_ptr<ir::Graph> buildApplyGraph(const std::vector<TensorId>& trained) {
    auto g = std::make_unique<ir::Graph>("optimizer_step");
    g->setOpsetVersion(model.graph->opsetVersion());
    g->otherOpsets[ops::kGraftDomain] = 1;
    for (const ir::Tensor* t : model.graph->initializers()) {
      bool ours =
          optim::isOptimizerTensor(t->id()) || std::find(trained.begin(), trained.end(), t->id()) != trained.end();
      if (ours) g->addInitializer(t->id(), *t->data(), t->kind());  // shares the buffer
    }
    std::vector<std::pair<ir::Tensor*, ir::Tensor*>> pairs;
    pairs.reserve(trained.size());
    for (const auto& w : trained) {
      pairs.emplace_back(&g->tensor(w), &g->tensor(optim::stateId("Accum", w)));
    }
    // The mean over micro-batches and over replicas, for a Mean reduction.
    optim::addUpdates(*optimizer, *g, pairs, meanDivisor());
    if (!overwritesAccumulators()) {
      std::vector<ir::Tensor*> accumulators;
      accumulators.reserve(pairs.size());
      for (const auto& [w, acc] : pairs) accumulators.push_back(acc);
      zeroAfterUpdates(*g, accumulators);
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

std::unique_ptr<TrainingSession> TrainingSession::createFromOnnxModel(
    const std::string& model, const DataFlow& dataFlow, const TensorId& loss, const Optimizer& optimizer,
    std::shared_ptr<DeviceInfo> deviceInfo, const InputShapeInfo& inputShapeInfo, const SessionOptions& userOptions,
    const Patterns&) {
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
  // Global-norm clipping and Lamb need whole weights: they cannot be sharded, and their step is
  // not split between replicas.
  const bool clips = !impl->optimizer->clipNormSettings().empty();
  bool lamb = false;
  if (impl->optimizer->type() == OptimizerType::Adam) {
    AdamMode m = static_cast<const Adam&>(*impl->optimizer).mode();
    lamb = m == AdamMode::Lamb || m == AdamMode::LambNoBias;
  }
  if (userOptions.shardOptimizerState) {
    GRAFT_CHECK(impl->replicated(),
                "SessionOptions.shardOptimizerState shards the optimizer state across replicas; it needs replication "
                "(enableReplicatedGraphs with replicatedGraphCount > 1, or enableDistributedReplicatedGraphs)");
    GRAFT_CHECK(!clips,
                "SessionOptions.shardOptimizerState: {} clips gradients by their global norm, which no replica's "
                "shard can compute alone; graft does not combine the two",
                impl->optimizer->str());
    GRAFT_CHECK(!lamb,
                "SessionOptions.shardOptimizerState: Lamb scales each weight's update by the norms of the whole "
                "weight, which no replica's shard can compute alone; use Adam, or turn sharding off");
  }
  // In one process the optimizer step of several replicas is split between their workers by
  // default: run on the host thread it would take one core's time after the backward pass, and
  // its OpenMP team (spinning after the step) would steal the replicas' cores at the next one.
  impl->splitUnshardedStep = impl->localReplicas() > 1 && !userOptions.enableDistributedReplicatedGraphs &&
                             !impl->usesStages() && !clips && !lamb;
  optim::createState(*impl->optimizer, *impl->model.graph, impl->weights,
                     impl->accumulationFactor() > 1 || impl->replicated());
  if (impl->replicated()) impl->shareAccumulators(impl->weights);
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
