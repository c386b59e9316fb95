// training-mode: see training_mode.hpp.
//
// BatchNormalization nodes whose running-statistics outputs the model does not use get
// training_mode = 1 and momentum = 0, which by ONNX's definition makes those outputs the batch
// mean and (biased) batch variance. From them the running statistics are updated as PyTorch
// does, with PyTorch's momentum m = 1 - (ONNX momentum, as torch.onnx.export writes it):
//   running_mean = m * batch_mean + (1 - m) * running_mean
//   running_var  = m * batch_var * M / (M - 1) + (1 - m) * running_var   (M values per channel)
// and written back with ai.graft Assign ops ordered after every reader of the running
// statistics. PyTorch normalizes with the biased variance but tracks the unbiased one; ONNX
// tracks the biased one. A model that uses the running outputs itself asked for ONNX's
// semantics and keeps them (and so does every inference session).
//
// Dropout nodes become ai.graft Dropout nodes (ops/training_mode_ops.cpp) reading the seed
// Variable; one Assign per step advances its step.
#include "passes/training_mode.hpp"

#include "ops/dtype_dispatch.hpp"
#include "ops/infer.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft::passes {
namespace {

bool isOnnx(const ir::Node& n, const char* type) { return n.domain().empty() && n.type() == type; }

bool used(const ir::Tensor* t) { return t && (!t->uses().empty() || t->isGraphOutput()); }

// Whether every reader of t is an ai.graphcore Detach (and t is not a graph output).
bool onlyDetached(const ir::Tensor* t) {
  if (!t || t->uses().empty() || t->isGraphOutput()) return false;
  for (const ir::Use& u : t->uses())
    if (u.node->domain() != ops::kGraphcoreDomain || u.node->type() != "Detach") return false;
  return true;
}

// A BatchNormalization node the session trains: the model does not use its running outputs, and
// does not detach its output (PopART's way of asking for a normalization in inference mode
// inside a training graph).
bool sessionTrainsBatchNorm(const ir::Node& n) {
  return isOnnx(n, "BatchNormalization") && !used(n.output(1)) && !used(n.output(2)) && !onlyDetached(n.output(0));
}

// Whether t is a Variable that only node n reads (and it only once).
bool ownVariable(const ir::Tensor* t, const ir::Node& n) {
  if (!t || t->kind() != ir::TensorKind::Variable || !t->data() || t->isGraphOutput()) return false;
  return t->uses().size() == 1 && t->uses()[0].node == &n;
}

NDArray floatScalar(DataType dt, double v) {
  NDArray a(dt, {});
  ops::dispatch<ops::kFloats>(dt, "training-mode constant", [&](auto tag) {
    using T = typename decltype(tag)::type;
    a.data<T>()[0] = static_cast<T>(static_cast<ops::ComputeType<T>>(v));
  });
  return a;
}

// Adds typed nodes named after a base.
struct Builder {
  ir::Graph& g;
  std::string base;
  ir::Tensor* op(const std::string& type, const std::vector<ir::Tensor*>& inputs, ir::Attributes a = {},
                 const std::string& domain = "") {
    ir::Node* n =
        g.addNode(type, domain, inputs, {g.uniqueId(base + "/" + type)}, std::move(a), g.uniqueId(base + "/" + type));
    ops::inferNode(*n, false);
    return n->output(0);
  }
  ir::Tensor* constant(NDArray v) {
    return g.addInitializer(g.uniqueId(base + "/const"), std::move(v), ir::TensorKind::Constant);
  }
  // Writes value into target after every node that reads target now.
  void assign(ir::Tensor* target, ir::Tensor* value) {
    if (!g.otherOpsets.count(ops::kGraftDomain)) g.otherOpsets[ops::kGraftDomain] = 1;
    ir::Node* a = g.addNode("Assign", ops::kGraftDomain, {target, value}, {}, {}, g.uniqueId(base + "/assign"));
    for (const ir::Use& u : target->uses())
      if (u.node != a) a->addRunsAfter(u.node);
  }
};

void trainBatchNorm(ir::Graph& g, ir::Node& n) {
  std::string what = n.describe();
  Builder b{g, n.name().empty() ? n.output(0)->id() : n.name()};
  double m = 1.0 - static_cast<double>(n.attrFloat("momentum", 0.9f));
  n.attrs().set("training_mode", int64_t{1});
  n.attrs().set("momentum", 0.0f);
  for (size_t i : {1, 2})
    if (!n.output(i)) {
      ir::Tensor* t = g.addTensor(g.uniqueId(b.base + (i == 1 ? "/batch_mean" : "/batch_var")),
                                  ir::ValueType::tensor(TensorInfo{}), ir::TensorKind::Activation);
      g.setOutput(&n, i, t);
    }
  ops::inferNode(n, false);
  ir::Tensor *x = n.input(0), *mean = n.input(3), *var = n.input(4);
  if (!ownVariable(mean, n) || !ownVariable(var, n)) {
    GRAFT_LOG_WARN(
        "{}: its running mean '{}' and variance '{}' are not weights that only it reads; it trains with batch "
        "statistics but cannot update them",
        what, mean ? mean->id() : "", var ? var->id() : "");
    return;
  }
  DataType dt = mean->info().dataType();
  ir::Tensor* batchMean = n.output(1);
  ir::Tensor* batchVar = n.output(2);
  ir::Tensor* unbias;  // M / (M - 1)
  const TensorInfo& xi = x->info();
  if (xi.isStatic()) {
    int64_t c = xi.rank() >= 2 ? xi.shape()[1] : 1;
    int64_t count = c > 0 ? xi.nelms() / c : 0;
    GRAFT_CHECK(count > 1, "{}: training needs more than one value per channel (for the variance), got input shape {}",
                what, shapeToString(xi.shape()));
    unbias = b.constant(floatScalar(dt, static_cast<double>(count) / static_cast<double>(count - 1)));
  } else {
    ir::Tensor* count = b.op("CastLike", {b.op("Div", {b.op("Size", {x}), b.op("Size", {mean})}), mean});
    unbias = b.op("Div", {count, b.op("Sub", {count, b.constant(floatScalar(dt, 1.0))})});
  }
  ir::Tensor* mk = b.constant(floatScalar(dt, m));
  ir::Tensor* keep = b.constant(floatScalar(dt, 1.0 - m));
  ir::Tensor* newMean = b.op("Add", {b.op("Mul", {batchMean, mk}), b.op("Mul", {mean, keep})});
  ir::Tensor* newVar = b.op("Add", {b.op("Mul", {b.op("Mul", {batchVar, unbias}), mk}), b.op("Mul", {var, keep})});
  b.assign(mean, newMean);
  b.assign(var, newVar);
}

// FNV-1a: a stable per-node stream id from the output's name (names survive checkpoints).
uint64_t streamOf(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

bool isConstant(const ir::Tensor* t) { return t->data() || (t->producer() && isOnnx(*t->producer(), "Constant")); }

void trainDropout(ir::Graph& g, ir::Node* n, ir::Tensor* seed) {
  ir::Tensor* y = n->output(0);
  ir::Tensor* mask = n->output(1);
  // The session decides the mode, as for BatchNormalization; a computed training_mode still
  // decides at run time.
  ir::Tensor* mode = n->input(2) && !isConstant(n->input(2)) ? n->input(2) : nullptr;
  std::vector<ir::Tensor*> ins{n->input(0), n->input(1), mode, seed};
  std::string name = n->name();
  ir::Attributes a;
  a.set("stream", static_cast<int64_t>(streamOf(y->id())));
  g.removeNode(n);
  ir::Node* d = g.addNode("Dropout", ops::kGraftDomain, ins, {"", ""}, std::move(a), name);
  g.setOutput(d, 0, y);
  if (!mask)
    mask = g.addTensor(g.uniqueId(y->id() + "/mask"), ir::ValueType::tensor(TensorInfo{}), ir::TensorKind::Activation);
  g.setOutput(d, 1, mask);
  ops::inferNode(*d, false);
}

NDArray zeroSeed() { return NDArray(DataType::Int64, {2}); }

class TrainingMode : public Pass {
 public:
  std::string_view name() const override { return "training-mode"; }
  bool run(ir::Graph& g, PassContext&) override {
    std::vector<ir::Node*> batchNorms, dropouts;
    for (ir::Node* n : g.nodes()) {
      if (sessionTrainsBatchNorm(*n)) batchNorms.push_back(n);
      if (isOnnx(*n, "Dropout")) dropouts.push_back(n);
    }
    if (!batchNorms.empty() || !dropouts.empty()) g.otherOpsets[ops::kGraftDomain] = 1;
    for (ir::Node* n : batchNorms) trainBatchNorm(g, *n);
    if (dropouts.empty()) return !batchNorms.empty();
    ir::Tensor* seed = g.findTensor(kRandomSeedId);
    if (!seed) seed = g.addInitializer(kRandomSeedId, zeroSeed(), ir::TensorKind::Variable);
    for (ir::Node* n : dropouts) trainDropout(g, n, seed);
    // The step advances once the step's masks are drawn.
    Builder b{g, kRandomSeedId};
    NDArray one(DataType::Int64, {2});
    one.data<int64_t>()[1] = 1;
    b.assign(seed, b.op("Add", {seed, b.constant(std::move(one))}));
    return true;
  }
};

GRAFT_REGISTER_PASS("training-mode", TrainingMode);

}  // namespace

void prepareTrainingMode(ir::Graph& source) {
  bool dropout = false;
  for (ir::Node* n : source.nodes()) {
    dropout |= isOnnx(*n, "Dropout");
    if (!sessionTrainsBatchNorm(*n)) continue;
    for (size_t i : {3, 4}) {
      ir::Tensor* t = n->input(i);
      if (!t || ownVariable(t, *n) || t->isGraphOutput() || t->uses().size() != 1) continue;
      ir::Node* p = t->producer();
      const NDArray* value = nullptr;
      if (p && isOnnx(*p, "Identity") && p->input(0) && p->input(0)->data() && p->numOutputs() == 1)
        value = p->input(0)->data();
      else if (!p && t->kind() == ir::TensorKind::Constant)
        value = t->data();
      if (!value || !isFloatingPoint(value->dtype())) continue;
      NDArray own = value->clone();
      if (p) source.removeNode(p);
      t->setKind(ir::TensorKind::Variable);
      t->setType(ir::ValueType::tensor(TensorInfo(own.dtype(), own.shape())));
      t->setData(std::move(own));
    }
  }
  if (!dropout) return;
  if (ir::Tensor* s = source.findTensor(kRandomSeedId)) {
    const NDArray* d = s->data();
    GRAFT_CHECK(
        d && d->dtype() == DataType::Int64 && d->shape() == Shape{2},
        "the model has a tensor '{}' that is not graft's dropout seed (INT64 [2] data), but graft reserves that name",
        kRandomSeedId);
    s->setKind(ir::TensorKind::Variable);  // integer initializers import as constants
    return;
  }
  source.addInitializer(kRandomSeedId, zeroSeed(), ir::TensorKind::Variable);
}

}  // namespace graft::passes
