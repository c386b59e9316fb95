// graft train: a model, data arrays (.npy or IDX), a loss and an optimizer. The loss is added to
// the model with the Builder, a TrainingSession runs shuffled mini-batches, an InferenceSession
// evaluates the test data after each epoch, and the input model is written with the trained
// weights.
#include <graft/builder.hpp>
#include <graft/graft.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <set>

#include "backends/cpu/reorder_stats.hpp"
#include "cli.hpp"
#include "format_util.hpp"
#include "ops/cast_util.hpp"
#include "optimizer_spec.hpp"
#include "progress.hpp"
#include "run_util.hpp"
#include "runtime/session_impl.hpp"
#include "support/check.hpp"
#include "support/limits.hpp"
#include "train_data.hpp"

namespace graft::tools {
namespace fs = std::filesystem;
namespace {

enum class LossKind { Nll, SoftmaxCe, Mse, L1, Tensor };

struct LossKindInfo {
  const char* name;
  LossKind kind;
  const char* meaning;
};
constexpr LossKindInfo kLossKinds[] = {
    {"nll", LossKind::Nll, "negative log likelihood of probabilities, mean over the batch"},
    {"softmax-ce", LossKind::SoftmaxCe, "softmax cross entropy of logits, mean over the batch"},
    {"mse", LossKind::Mse, "mean squared error"},
    {"l1", LossKind::L1, "mean absolute error"},
};

bool isClassification(LossKind k) { return k == LossKind::Nll || k == LossKind::SoftmaxCe; }

std::string lossKindList() {
  std::string s;
  for (const auto& k : kLossKinds) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

std::string idList(const std::vector<TensorId>& ids) {
  return ids.empty() ? std::string("none") : fmt::format("{}", fmt::join(ids, ", "));
}

// One array fed to a model input: its samples along the first axis, in the model's element type.
struct Feed {
  TensorId id;
  NDArray data;
  Shape sample;  // the shape of one sample
};

std::string dimsText(const std::vector<Dim>& dims) {
  std::vector<std::string> parts;
  for (const Dim& d : dims) parts.push_back(d.str());
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

Shape sampleShape(const NDArray& a) { return Shape(a.shape().begin() + 1, a.shape().end()); }

Shape batchShape(int64_t batch, const Shape& sample) {
  Shape s{batch};
  s.insert(s.end(), sample.begin(), sample.end());
  return s;
}

// What the loss needs to know about the model and the data.
struct LossSetup {
  LossKind kind = LossKind::Tensor;
  std::string kindName;
  TensorId prediction;  // kind losses
  TensorId label;       // kind losses: the input the loss adds
  TensorId loss;
  int64_t classAxis = -1;  // classification: the class axis of the prediction
  int64_t classes = -1;    // -1: not known from the model
  std::string description;
};

// Resolves --loss against the model: a loss kind with its prediction tensor, or a tensor.
LossSetup resolveLoss(const std::string& arg, const Builder& b) {
  GRAFT_CHECK(!arg.empty(), "--loss is required: a loss kind ({}) or the name of the model's scalar loss tensor",
              lossKindList());
  LossSetup s;
  auto colon = arg.find(':');
  std::string name = arg.substr(0, colon);
  const LossKindInfo* kind = nullptr;
  for (const auto& k : kLossKinds)
    if (name == k.name) kind = &k;
  if (!kind) {
    GRAFT_CHECK(b.hasTensor(arg), "--loss '{}' is neither a loss kind ({}) nor a tensor of the model", arg,
                lossKindList());
    s.kind = LossKind::Tensor;
    s.loss = arg;
    s.description = fmt::format("'{}' (a tensor of the model)", arg);
    return s;
  }
  s.kind = kind->kind;
  s.kindName = kind->name;
  std::vector<TensorId> outputs = b.getOutputTensorIds();
  if (colon != std::string::npos) {
    s.prediction = arg.substr(colon + 1);
    GRAFT_CHECK(b.hasTensor(s.prediction), "--loss {}: the model has no tensor '{}' (its outputs: {})", arg,
                s.prediction, idList(outputs));
  } else {
    GRAFT_CHECK(outputs.size() == 1,
                "--loss {}: the model has {} outputs ({}); name the one the loss applies to, for "
                "example --loss {}:{}",
                arg, outputs.size(), idList(outputs), name, outputs.empty() ? std::string("TENSOR") : outputs.front());
    s.prediction = outputs.front();
  }
  TensorInfo info = b.getTensorInfo(s.prediction);
  GRAFT_CHECK(isFloatingPoint(info.dataType()),
              "--loss {}: the prediction '{}' is {}; the loss needs floating-point "
              "values",
              arg, s.prediction, info.str());
  GRAFT_CHECK(info.hasShape() && info.rank() >= 1,
              "--loss {}: the prediction '{}' has no known rank ({}); its first "
              "dimension must be the batch",
              arg, s.prediction, info.str());
  if (isClassification(s.kind)) {
    GRAFT_CHECK(info.rank() >= 2, "--loss {}: the prediction '{}' is {}; {} needs [batch, classes, ...] scores", arg,
                s.prediction, info.str(), name);
    // ONNX's SoftmaxCrossEntropyLoss has the classes in axis 1; PopART's Nll in the last axis.
    s.classAxis = s.kind == LossKind::SoftmaxCe ? 1 : info.rank() - 1;
    s.classes = info.dims()[static_cast<size_t>(s.classAxis)].value;
  }
  s.description = fmt::format("{} on '{}' ({})", name, s.prediction, kind->meaning);
  return s;
}

// Whether `id` is the output of a LogSoftmax node (then Nll reads log-probabilities).
bool isLogSoftmaxOutput(const std::string& model, const TensorId& id) {
  onnxio::Model m = loadModelArgument(model);
  const ir::Tensor* t = m.graph->findTensor(id);
  return t && t->producer() && t->producer()->type() == "LogSoftmax" && t->producer()->domain().empty();
}

// Adds the label input and the loss op to the model. `labels` is the label data (converted here
// to the type the loss needs).
void addLoss(Builder& b, LossSetup& s, NamedArray& labels, const std::string& model) {
  TensorInfo pred = b.getTensorInfo(s.prediction);
  const std::string what = fmt::format("--label {}: '{}'", labels.name, labels.path);
  GRAFT_CHECK(!b.hasTensor(labels.name),
              "--label {}: the model already has a tensor '{}'; the label is a new input "
              "that the loss compares the prediction with: give it another name",
              labels.name, labels.name);
  Shape sample = sampleShape(labels.array);
  // What one sample of the label must look like: the prediction's dims after the batch, without
  // the class axis for classification.
  std::vector<Dim> want(pred.dims().begin() + 1, pred.dims().end());
  if (isClassification(s.kind)) want.erase(want.begin() + (s.classAxis - 1));
  bool match = want.size() == sample.size();
  for (size_t d = 0; match && d < want.size(); ++d) match = !want[d].known() || want[d].value == sample[d];
  std::vector<Dim> batchDims{pred.dims()[0]};
  batchDims.insert(batchDims.end(), want.begin(), want.end());
  GRAFT_CHECK(match, "{} has shape {}, so one sample is {}; {} on '{}' ({}) needs labels of shape {} (batch first{})",
              what, shapeToString(labels.array.shape()), shapeToString(sample), s.kindName, s.prediction, pred.str(),
              dimsText(batchDims),
              isClassification(s.kind) ? ", one class index per prediction" : ", like the prediction");
  DataType labelType = pred.dataType();
  if (isClassification(s.kind)) {
    GRAFT_CHECK(isInteger(labels.array.dtype()), "{} holds {} values; {} needs integer class indices", what,
                dtypeNumpyName(labels.array.dtype()), s.kindName);
    checkClassLabels(labels.array, s.classes, what);
    labelType = DataType::Int64;
  }
  if (labels.array.dtype() != labelType) {
    labels.note = fmt::format(" (converted from {})", dtypeNumpyName(labels.array.dtype()));
    labels.array = convertForInput(labels.array, labelType, what);
  }
  std::vector<Dim> dims{pred.dims()[0]};
  for (int64_t v : sample) dims.emplace_back(v);
  s.label = b.addInputTensor(TensorInfo(labelType, dims), labels.name);
  GRAFT_ASSERT(s.label == labels.name, "label input named '{}', expected '{}'", s.label, labels.name);

  int opset = b.onnxOpsetVersion() ? b.onnxOpsetVersion() : 17;
  switch (s.kind) {
    case LossKind::SoftmaxCe:
      s.loss = b.addOp("SoftmaxCrossEntropyLoss", "", opset, {s.prediction, s.label},
                       {{"reduction", std::string("mean")}}, 1, "loss")[0];
      break;
    case LossKind::Nll: {
      bool logProb = isLogSoftmaxOutput(model, s.prediction);
      if (logProb) s.description += "; the prediction comes from LogSoftmax: log-probabilities";
      s.loss = b.addOp("Nll", "ai.graphcore", 1, {s.prediction, s.label},
                       {{"reduction", std::string("Mean")}, {"inputIsLogProbability", int64_t{logProb}}}, 1, "loss")[0];
      break;
    }
    case LossKind::Mse:
      s.loss = b.addOp("MseLoss", "ai.graft", 1, {s.prediction, s.label}, {{"reduction", std::string("Mean")}}, 1,
                       "loss")[0];
      break;
    case LossKind::L1: {
      TensorId diff = b.addOp("Sub", "", opset, {s.prediction, s.label}, {}, 1, "loss_difference")[0];
      s.loss = b.addOp("L1", "ai.graphcore", 1, {diff}, {{"lambda", 1.0f}, {"reduction", std::string("Mean")}}, 1,
                       "loss")[0];
      break;
    }
    case LossKind::Tensor:
      GRAFT_ASSERT(false, "addLoss for a tensor loss");
  }
}

// Matches data arrays to the model's inputs: every input needs data, every array an input; types
// are converted, shapes checked (fixed dimensions equal, symbolic ones consistent across inputs).
// Returns the feeds and sets `fixedBatch` when the model fixes the batch dimension.
std::vector<Feed> matchFeeds(std::vector<NamedArray>& arrays, const Builder& b, const std::vector<TensorId>& inputs,
                             const std::string& option, std::optional<int64_t>& fixedBatch) {
  std::vector<Feed> feeds;
  std::map<std::string, std::pair<int64_t, TensorId>> bound;
  for (auto& a : arrays)
    GRAFT_CHECK(std::find(inputs.begin(), inputs.end(), a.name) != inputs.end(),
                "{} {}: the model has no input '{}' (its inputs: {})", option, a.name, a.name, idList(inputs));
  for (const auto& id : inputs) {
    auto it = std::find_if(arrays.begin(), arrays.end(), [&](const NamedArray& a) { return a.name == id; });
    GRAFT_CHECK(it != arrays.end(),
                "model input '{}' has no data: give it with {} {}=FILE (a .npy or IDX file whose "
                "first axis counts the samples)",
                id, option, id);
    NamedArray& a = *it;
    TensorInfo info = b.getTensorInfo(id);
    std::string what = fmt::format("{} {}: '{}'", option, id, a.path);
    if (a.array.dtype() != info.dataType()) {
      a.note += fmt::format(" (converted from {})", dtypeNumpyName(a.array.dtype()));
      a.array = convertForInput(a.array, info.dataType(), what);
    }
    if (info.hasShape()) {
      GRAFT_CHECK(info.rank() == a.array.rank(),
                  "{} has shape {} but the model input is {}: the data needs the "
                  "input's rank, its first axis counting the samples",
                  what, shapeToString(a.array.shape()), info.str());
      for (size_t d = 0; d < info.dims().size(); ++d) {
        const Dim& dim = info.dims()[d];
        int64_t have = a.array.dim(static_cast<int64_t>(d));
        if (d == 0) {
          if (dim.known()) {
            GRAFT_CHECK(!fixedBatch || *fixedBatch == dim.value, "model inputs disagree on the batch size: {} and {}",
                        *fixedBatch, dim.value);
            fixedBatch = dim.value;
          }
          continue;
        }
        if (dim.known()) {
          GRAFT_CHECK(dim.value == have, "{} has shape {} but the model input is {}: dimension {} must be {}", what,
                      shapeToString(a.array.shape()), info.str(), d, dim.value);
        } else if (!dim.param.empty()) {
          auto [b2, fresh] = bound.emplace(dim.param, std::make_pair(have, id));
          GRAFT_CHECK(fresh || b2->second.first == have, "{}: dimension '{}' is {} here but {} in input '{}'", what,
                      dim.param, have, b2->second.first, b2->second.second);
        }
      }
    }
    feeds.push_back({id, a.array, sampleShape(a.array)});
  }
  return feeds;
}

int64_t sampleCount(const std::vector<NamedArray>& arrays, const std::string& option) {
  int64_t n = arrays.front().array.dim(0);
  for (const auto& a : arrays)
    GRAFT_CHECK(a.array.dim(0) == n, "{} arrays differ in their number of samples: '{}' has {}, '{}' has {}", option,
                arrays.front().path, n, a.path, a.array.dim(0));
  return n;
}

void printArrays(std::ostream& out, const char* heading, const std::vector<NamedArray>& arrays) {
  bool first = true;
  for (const auto& a : arrays) {
    out << fmt::format("{:<11}{}  {} {}  from {}{}\n", first ? heading : "", a.name, dtypeName(a.array.dtype()),
                       shapeToString(a.array.shape()), a.path, a.note);
    first = false;
  }
}

struct EvalResult {
  double loss = 0;
  int64_t samples = 0, leftOut = 0;
  int64_t correct = 0, positions = 0;
};

EvalResult evaluate(InferenceSession& session, const std::vector<Feed>& feeds, int64_t samples, int64_t batch,
                    bool fixedBatch, const LossSetup& loss) {
  EvalResult r;
  ArrayStepIO io;
  std::vector<int64_t> rows;
  for (int64_t start = 0; start < samples; start += batch) {
    int64_t n = std::min(batch, samples - start);
    if (n < batch && fixedBatch) {
      r.leftOut = n;
      break;
    }
    rows.resize(static_cast<size_t>(n));
    std::iota(rows.begin(), rows.end(), start);
    io.reset();
    io.inputs.clear();
    NDArray labels;
    for (const auto& f : feeds) {
      NDArray a = NDArray::uninitialized(f.data.dtype(), batchShape(n, f.sample));
      gatherRows(f.data, rows.data(), n, a);
      io.inputs[f.id] = {a};
      if (f.id == loss.label) labels = a;
    }
    session.run(io);
    double l = ops::castArray(io.outputs.at(loss.loss).front(), DataType::Double).data<double>()[0];
    r.loss += l * static_cast<double>(n);
    r.samples += n;
    if (isClassification(loss.kind)) {
      r.correct += countCorrect(io.outputs.at(loss.prediction).front(), labels, loss.classAxis);
      r.positions += labels.numel();
    }
  }
  if (r.samples) r.loss /= static_cast<double>(r.samples);
  return r;
}

std::string evalText(const EvalResult& e, const LossSetup& loss) {
  std::string s = fmt::format("test loss {:.4f}", e.loss);
  if (isClassification(loss.kind) && e.positions)
    s += fmt::format("  accuracy {:.2f}%", 100.0 * static_cast<double>(e.correct) / static_cast<double>(e.positions));
  return s;
}

}  // namespace

void trainCommand(const TrainOptions& o, std::ostream& out, std::ostream& progress) {
  GRAFT_CHECK(!o.model.empty(), "no model file given");
  GRAFT_CHECK(o.epochs >= 1, "--epochs must be at least 1, got {}", o.epochs);
  GRAFT_CHECK(o.batchesPerStep >= 1, "--batches-per-step must be at least 1, got {}", o.batchesPerStep);
  GRAFT_CHECK(o.batchSize >= 0, "--batch-size must be positive, got {}", o.batchSize);
  GRAFT_CHECK(o.evalBatchSize >= 0, "--eval-batch-size must be positive, got {}", o.evalBatchSize);
  support::checkThreadCount("--threads", o.threads);
  auto device = deviceNamed(o.device);
  GRAFT_CHECK(!o.inputs.empty(), "no training data: give each model input with --input NAME=FILE");
  ParsedOptimizer optimizer = parseOptimizerSpec(o.optimizer);

  std::unique_ptr<Builder> b = Builder::createFromOnnxModel(o.model);
  std::vector<TensorId> modelInputs;
  for (const auto& id : b->getInputTensorIds())
    if (!b->isInitializer(id)) modelInputs.push_back(id);
  std::vector<TensorId> modelOutputs = b->getOutputTensorIds();
  LossSetup loss = resolveLoss(o.loss, *b);

  std::vector<NamedArray> train = readNamedArrays(o.inputs, "--input");
  std::vector<NamedArray> labelArrays = readNamedArrays(o.labels, "--label");
  if (loss.kind == LossKind::Tensor) {
    GRAFT_CHECK(labelArrays.empty(),
                "--label {}: with --loss naming a tensor of the model, the model computes its loss "
                "itself; give its label input with --input {}=FILE",
                labelArrays.front().name, labelArrays.front().name);
  } else {
    GRAFT_CHECK(labelArrays.size() == 1,
                "--loss {} needs {} label array: give it with --label NAME=FILE (NAME is the "
                "new input the loss adds)",
                loss.kindName, labelArrays.empty() ? "a" : "exactly one");
    for (const auto& a : train)
      GRAFT_CHECK(a.name != labelArrays.front().name, "'{}' is given both with --input and --label", a.name);
    addLoss(*b, loss, labelArrays.front(), o.model);
    modelInputs.push_back(loss.label);
    train.push_back(labelArrays.front());
  }
  std::optional<int64_t> fixedBatch;
  std::vector<Feed> feeds = matchFeeds(train, *b, modelInputs, "--input", fixedBatch);
  int64_t samples = sampleCount(train, "--input");

  int64_t batch = o.batchSize ? o.batchSize : fixedBatch ? *fixedBatch : 32;
  GRAFT_CHECK(!fixedBatch || batch == *fixedBatch, "--batch-size {}: the model fixes the batch dimension at {}", batch,
              *fixedBatch);
  int bps = o.batchesPerStep;
  int64_t perStep = batch * bps;
  GRAFT_CHECK(samples >= perStep, "the training data has {} samples, fewer than one step of {} batch{} of {}", samples,
              bps, bps == 1 ? "" : "es", batch);
  int64_t steps = samples / perStep;
  int64_t leftOut = samples - steps * perStep;

  // Test data: the same names as the training data.
  std::vector<NamedArray> test = readNamedArrays(o.eval, "--eval");
  std::vector<Feed> testFeeds;
  int64_t testSamples = 0;
  if (!test.empty()) {
    for (const auto& f : feeds)
      GRAFT_CHECK(std::any_of(test.begin(), test.end(), [&](const NamedArray& a) { return a.name == f.id; }),
                  "--eval has no '{}': the test data needs every array the training data has ({})", f.id, [&] {
                    std::vector<TensorId> ids;
                    for (const auto& g : feeds) ids.push_back(g.id);
                    return idList(ids);
                  }());
    if (isClassification(loss.kind))
      for (auto& a : test)
        if (a.name == loss.label) {
          GRAFT_CHECK(isInteger(a.array.dtype()), "--eval {}: '{}' holds {} values; {} needs integer class indices",
                      a.name, a.path, dtypeNumpyName(a.array.dtype()), loss.kindName);
          checkClassLabels(a.array, loss.classes, fmt::format("--eval {}: '{}'", a.name, a.path));
        }
    std::optional<int64_t> unused;
    testFeeds = matchFeeds(test, *b, modelInputs, "--eval", unused);
    testSamples = sampleCount(test, "--eval");
    for (size_t i = 0; i < feeds.size(); ++i)
      GRAFT_CHECK(testFeeds[i].sample == feeds[i].sample, "--eval {}: one sample is {} but in the training data {}",
                  feeds[i].id, shapeToString(testFeeds[i].sample), shapeToString(feeds[i].sample));
  }
  int64_t evalBatch = fixedBatch ? *fixedBatch : o.evalBatchSize ? o.evalBatchSize : 256;

  SessionOptions so;
  so.numThreads = o.threads;
  // A NaN or inf in the loss, a weight or the optimizer state stops training with an error naming
  // the step and the tensor: no model full of NaN is written, no finite-looking loss reported.
  so.detectNonFinite = true;
  so.enableProfiling = o.profile;
  InputShapeInfo shapes;
  for (const auto& f : feeds) shapes.add(f.id, TensorInfo(f.data.dtype(), batchShape(batch, f.sample)));
  const std::string lossModel = b->getModelProto();

  out << fmt::format("{:<11}{}\n", "model", o.model);
  out << fmt::format("{:<11}{}{}\n", "device", device->str(),
                     o.threads && o.device == "cpu" ? fmt::format(" (--threads {})", o.threads) : "");
  printArrays(out, "train", train);
  if (!test.empty()) printArrays(out, "test", test);
  out << fmt::format("{:<11}{}\n", "loss", loss.description);
  out << fmt::format("{:<11}{}\n", "optimizer", optimizer.description);
  out << fmt::format("{:<11}{} samples per batch, {} batch{} per step: {} steps per epoch", "batches", batch, bps,
                     bps == 1 ? "" : "es", groupDigits(steps));
  if (leftOut)
    out << fmt::format(" ({} samples left out of each epoch{})", leftOut,
                       o.shuffle ? ", different ones each time" : "");
  out << "\n" << std::flush;

  DataFlow dataFlow(bps, std::vector<TensorId>{loss.loss}, AnchorReturnType("All"));
  auto session =
      TrainingSession::createFromOnnxModel(lossModel, dataFlow, loss.loss, *optimizer.optimizer, device, shapes, so);
  session->prepareDevice();
  out << fmt::format("{:<11}{} ({} trained weight tensors)\n", "compile", humanSeconds(session->lastCompileSeconds()),
                     session->trainedWeightIds().size())
      << std::flush;

  std::unique_ptr<InferenceSession> evalSession;
  if (!test.empty()) {
    SessionOptions eo = so;
    eo.constantWeights = false;  // the weights change after every epoch
    eo.enableProfiling = false;
    eo.detectNonFinite = false;  // test data may hold what training refuses; its loss is reported as it is
    std::vector<TensorId> anchors{loss.loss};
    if (isClassification(loss.kind)) anchors.push_back(loss.prediction);
    evalSession =
        InferenceSession::createFromOnnxModel(lossModel, DataFlow(1, anchors, AnchorReturnType("All")), device, {}, eo);
  }

  ArrayStepIO io;
  for (const auto& f : feeds)
    for (int k = 0; k < bps; ++k)
      io.inputs[f.id].push_back(NDArray::uninitialized(f.data.dtype(), batchShape(batch, f.sample)));
  std::vector<int64_t> order(static_cast<size_t>(samples));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(o.seed);
  double trainSeconds = 0;
  int64_t trainedSamples = 0;
  std::optional<EvalResult> lastEval;
  backends::cpu::resetReorderStats();
  int64_t stepsRun = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    if (o.shuffle)
      for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
    ProgressBar bar(progress, o.progress, fmt::format("epoch {}/{}", epoch, o.epochs), steps, perStep);
    bar.update(0, NAN);
    double lossSum = 0;
    int64_t lossCount = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < steps; ++step) {
      for (const auto& f : feeds)
        for (int k = 0; k < bps; ++k)
          gatherRows(f.data, order.data() + (step * bps + k) * batch, batch, io.inputs[f.id][static_cast<size_t>(k)]);
      io.reset();
      try {
        session->run(io);
        ++stepsRun;
      } catch (const Error& e) {
        std::string msg = e.what();
        if (msg.find("detectNonFinite") == std::string::npos) throw;
        bar.finish();
        GRAFT_THROW(
            "epoch {}, step {} of the epoch: {}: training diverged; try a smaller learning rate than in "
            "--optimizer {} (or look for NaN and inf in the data); no model is written",
            epoch, step + 1, msg, o.optimizer);
      }
      for (const NDArray& l : io.outputs.at(loss.loss)) {
        double v = ops::castArray(l, DataType::Double).data<double>()[0];
        if (!std::isfinite(v)) {
          bar.finish();
          GRAFT_THROW(
              "the loss is {} at epoch {}, step {}: training diverged; try a smaller learning rate than in "
              "--optimizer {}",
              v, epoch, step + 1, o.optimizer);
        }
        lossSum += v;
        ++lossCount;
      }
      bar.update(step + 1, lossSum / static_cast<double>(lossCount));
    }
    bar.finish();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    trainSeconds += seconds;
    trainedSamples += steps * perStep;
    std::string line = fmt::format("epoch {}/{}  train loss {:.4f}  {}  {} samples/s", epoch, o.epochs,
                                   lossSum / static_cast<double>(lossCount), clockTime(seconds),
                                   groupDigits(std::llround(static_cast<double>(steps * perStep) / seconds)));
    if (evalSession) {
      auto e0 = std::chrono::steady_clock::now();
      evalSession->resetHostWeights(session->modelBytes(), true);
      lastEval = evaluate(*evalSession, testFeeds, testSamples, evalBatch, fixedBatch.has_value(), loss);
      line += fmt::format("  |  {}  ({})", evalText(*lastEval, loss),
                          humanSeconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count()));
    }
    out << line << "\n" << std::flush;
  }

  out << fmt::format("{:<11}{} epoch{}, {} samples in {} ({} samples/s)\n", "trained", o.epochs,
                     o.epochs == 1 ? "" : "s", groupDigits(trainedSamples), clockTime(trainSeconds),
                     groupDigits(std::llround(static_cast<double>(trainedSamples) / trainSeconds)));
  if (lastEval) {
    out << fmt::format("{:<11}{} samples: {}", "test", groupDigits(lastEval->samples), evalText(*lastEval, loss));
    if (isClassification(loss.kind))
      out << fmt::format(" ({} of {} right)", groupDigits(lastEval->correct), groupDigits(lastEval->positions));
    if (lastEval->leftOut)
      out << fmt::format("; {} samples left out (the model fixes the batch at {})", lastEval->leftOut, evalBatch);
    out << "\n";
  }
  if (o.profile) {
    std::vector<OpProfile> prof = session->profile();
    double total = 0;
    for (const auto& p : prof) total += p.seconds;
    out << "profile    time in kernels by op type (training steps)\n";
    for (size_t i = 0; i < prof.size() && i < 20; ++i)
      out << fmt::format("  {:<28} {:>8} calls  {:>10}  {:5.1f}%\n", prof[i].opType, groupDigits(prof[i].calls),
                         humanSeconds(prof[i].seconds), total > 0 ? 100.0 * prof[i].seconds / total : 0.0);
    // Layout conversions (oneDNN reorders) of the training steps (and of the evaluations between
    // epochs): activations converted inside kernels, trained weights re-packed per step.
    backends::cpu::ReorderStats r = backends::cpu::reorderStats();
    double n = static_cast<double>(std::max<int64_t>(1, stepsRun));
    out << fmt::format("reorders   {:.1f} per training step, {:.2f} MB, {} ({:.1f}% of the kernel time)\n",
                       static_cast<double>(r.count) / n, static_cast<double>(r.bytes) / n / 1e6,
                       humanSeconds(r.seconds / n), total > 0 ? 100.0 * r.seconds / total : 0.0);
  }
  if (!o.output.empty()) {
    // The input model (without the loss and the label) with the trained weights.
    SessionOptions xo;
    xo.constantWeights = false;
    TensorId anchor = !modelOutputs.empty()           ? modelOutputs.front()
                      : loss.kind == LossKind::Tensor ? loss.loss
                                                      : loss.prediction;
    auto exporter =
        InferenceSession::createFromOnnxModel(o.model, DataFlow(1, std::vector<TensorId>{anchor}), device, {}, xo);
    exporter->resetHostWeights(session->modelBytes(), true);
    fs::path p(o.output);
    std::error_code ec;
    if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
    GRAFT_CHECK(!ec, "--output: cannot create the folder '{}': {}", p.parent_path().string(), ec.message());
    exporter->modelToHost(o.output);
    out << fmt::format("{:<11}{}\n", "wrote", o.output);
  }
}

}  // namespace graft::tools
