// TrainingSession end to end through the data-movement ops' gradients. An embedding model:
// Gather rows of a weight table with repeated (and negative) indices, pool them with a MatMul,
// MseLoss; the updated table is checked against the same SGD steps computed by hand in double
// precision: rows used several times accumulate their gradients, rows never used stay as they
// were. And a chain of Einsum, Slice, Concat, Pad, Tile and Gather, whose weight gradient (as
// an anchor) and update are checked against the chain evaluated by hand.
#include <gtest/gtest.h>

#include <graft/graft.hpp>

#include <random>

#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "passes/pass.hpp"

namespace graft {
namespace {

constexpr int64_t kVocab = 6, kDim = 3, kBatch = 3, kLen = 4;
const std::vector<double> kPool = {0.5, 1.0, -1.0, 2.0};  // pooling weights over the kLen positions

std::vector<float> table() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(kVocab * kDim);
  for (auto& x : v) x = u(rng);
  return v;
}

// pooled[b, :] = sum_l pool[l] * E[ids[b, l], :]; loss = MseLoss(pooled, t, Mean).
std::string embeddingModel() {
  ir::Graph g("embedding");
  g.otherOpsets["ai.graft"] = 1;
  ir::Tensor* ids = g.addTensor("ids", ir::ValueType::tensor(TensorInfo(DataType::Int64, Shape{kBatch, kLen})),
                                ir::TensorKind::Input);
  ir::Tensor* t =
      g.addTensor("t", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{kBatch, kDim})), ir::TensorKind::Input);
  g.addInput(ids);
  g.addInput(t);
  std::vector<float> e = table();
  NDArray ea(DataType::Float, {kVocab, kDim});
  std::copy(e.begin(), e.end(), ea.data<float>());
  ir::Tensor* w = g.addInitializer("E", ea);
  // The pooling weights are a Constant node, so that they are not trained.
  NDArray pa(DataType::Float, {kLen});
  for (int64_t l = 0; l < kLen; ++l) pa.data<float>()[l] = static_cast<float>(kPool[l]);
  ir::Attributes pv;
  pv.set("value", pa);
  ir::Node* pool = g.addNode("Constant", "", {}, {"pool"}, pv);
  ir::Node* gather = g.addNode("Gather", "", {w, ids}, {"emb"});  // [B, L, D]
  ir::Node* mm =
      g.addNode("MatMul", "", {pool->output(0), gather->output(0)}, {"pooled"});  // [L] @ [B, L, D] -> [B, D]
  ir::Attributes a;
  a.set("reduction", std::string("Mean"));
  ir::Node* loss = g.addNode("MseLoss", "ai.graft", {mm->output(0), t}, {"loss"}, a);
  g.addOutput(loss->output(0));
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  return onnxio::saveModelBytes(g);
}

TEST(TrainingSession, EmbeddingRowsAccumulateRepeatedIndices) {
  constexpr double kLr = 0.1;
  auto s = TrainingSession::createFromOnnxModel(embeddingModel(), DataFlow(1, {"loss"}), "loss",
                                                ConstSGD(static_cast<float>(kLr)),
                                                DeviceManager::createDeviceManager().createCpuDevice());
  s->prepareDevice();
  EXPECT_EQ(s->trainedWeightIds(), (std::vector<TensorId>{"E"}));

  std::vector<float> e0 = table();
  std::vector<double> e(e0.begin(), e0.end());
  // Row 1 appears three times in one sequence; -1 is row 5; rows 3 and 4 are never used.
  std::vector<std::vector<int64_t>> steps = {{1, 1, 0, 1, /**/ 2, -1, 5, 0, /**/ 0, 2, 1, -6},
                                             {5, 5, 5, 5, /**/ 1, 0, 1, 2, /**/ 2, 2, -4, 0}};
  for (size_t step = 0; step < steps.size(); ++step) {
    std::vector<int64_t> ids = steps[step];
    std::vector<float> t(kBatch * kDim);
    for (size_t i = 0; i < t.size(); ++i)
      t[i] = 0.25f * static_cast<float>(i % 5) - 0.5f + 0.1f * static_cast<float>(step);
    // By hand: y = sum_l pool[l] E[id], dL/dy = 2 (y - t) / (B D), dL/dE[id] += pool[l] dL/dy.
    std::vector<double> grad(e.size(), 0.0);
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t d = 0; d < kDim; ++d) {
        double y = 0;
        for (int64_t l = 0; l < kLen; ++l) {
          int64_t v = ids[b * kLen + l];
          y += kPool[l] * e[(v < 0 ? v + kVocab : v) * kDim + d];
        }
        double dy = 2.0 * (y - t[b * kDim + d]) / static_cast<double>(kBatch * kDim);
        for (int64_t l = 0; l < kLen; ++l) {
          int64_t v = ids[b * kLen + l];
          grad[(v < 0 ? v + kVocab : v) * kDim + d] += kPool[l] * dy;
        }
      }
    for (size_t i = 0; i < e.size(); ++i) e[i] -= kLr * grad[i];

    auto anchors = s->initAnchorArrays();
    StepIO io({{"ids", NDArray::wrap(ids.data(), DataType::Int64, {kBatch, kLen})},
               {"t", NDArray::wrap(t.data(), DataType::Float, {kBatch, kDim})}},
              anchors);
    s->run(io);
  }

  WeightsIO w;
  w.insert("E", NDArray(DataType::Float, {kVocab, kDim}));
  s->readWeights(w);
  const float* got = w.weight("E").data<float>();
  for (int64_t v = 0; v < kVocab; ++v)
    for (int64_t d = 0; d < kDim; ++d) {
      size_t i = static_cast<size_t>(v * kDim + d);
      EXPECT_NEAR(got[i], e[i], 1e-5) << "E[" << v << ", " << d << "]";
      if (v == 3 || v == 4) EXPECT_EQ(got[i], e0[i]) << "row " << v << " is never used and must not change";
    }
  // The repeated row moved by the sum of its uses, not by one of them.
  EXPECT_GT(std::abs(got[1 * kDim] - e0[1 * kDim]), 1e-3);
}

// y = Gather(Tile(Pad(Concat(Slice(x W), x W), reflect), [2, 1]), rows); loss = sum(y * R).
constexpr int64_t kRows = 2, kIn = 3, kOut = 4;
const std::vector<int64_t> kPick = {0, 2, 2, 5};

NDArray floats(Shape s, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  NDArray a(DataType::Float, std::move(s));
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = u(rng);
  return a;
}

NDArray ints(std::vector<int64_t> v) {
  NDArray a(DataType::Int64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), a.data<int64_t>());
  return a;
}

std::string chainModel() {
  ir::Graph g("chain");
  g.otherOpsets["ai.graphcore"] = 1;
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{kRows, kIn})), ir::TensorKind::Input);
  g.addInput(x);
  ir::Tensor* w = g.addInitializer("W", floats({kIn, kOut}, 3));
  auto node = [&](const std::string& type, std::vector<ir::Tensor*> in, const std::string& out, ir::Attributes a = {},
                  const std::string& domain = "") {
    return g.addNode(type, domain, in, {out}, std::move(a))->output(0);
  };
  auto constant = [&](const std::string& id, NDArray v) {
    return g.addInitializer(id, std::move(v), ir::TensorKind::Constant);
  };
  ir::Attributes eq, cat, pad, gat, red, rv;
  eq.set("equation", std::string("bi,ij->bj"));
  ir::Tensor* h = node("Einsum", {x, w}, "h", eq);
  // Columns 3 and 1 of h (step -2).
  ir::Tensor* s = node(
      "Slice",
      {h, constant("s0", ints({3})), constant("s1", ints({-5})), constant("s2", ints({1})), constant("s3", ints({-2}))},
      "s");
  cat.set("axis", int64_t{-1});
  ir::Tensor* c = node("Concat", {s, h}, "c", cat);  // [2, 6]
  pad.set("mode", std::string("reflect"));
  ir::Tensor* p = node("Pad", {c, constant("pads", ints({1, 0, 0, 2}))}, "p", pad);  // [3, 8]
  ir::Tensor* t = node("Tile", {p, constant("reps", ints({2, 1}))}, "t");            // [6, 8]
  ir::Tensor* y = node("Gather", {t, constant("pick", ints(kPick))}, "y", gat);      // [4, 8]
  rv.set("value", floats({4, 8}, 4));
  ir::Tensor* r = g.addNode("Constant", "", {}, {"R"}, rv)->output(0);
  red.set("reduction", std::string("Sum"));
  ir::Tensor* loss = node("IdentityLoss", {node("Mul", {y, r}, "yr")}, "loss", red, "ai.graphcore");
  g.addOutput(loss);
  passes::PassContext ctx;
  passes::runPipeline(g, {"infer-shapes"}, ctx);
  return onnxio::saveModelBytes(g);
}

// The same chain in double precision, by index arithmetic.
double chainLoss(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& r) {
  double h[kRows][kOut] = {}, c[kRows][6];
  for (int64_t b = 0; b < kRows; ++b)
    for (int64_t j = 0; j < kOut; ++j)
      for (int64_t i = 0; i < kIn; ++i) h[b][j] += x[b * kIn + i] * w[i * kOut + j];
  for (int64_t b = 0; b < kRows; ++b) {
    c[b][0] = h[b][3];
    c[b][1] = h[b][1];
    for (int64_t j = 0; j < kOut; ++j) c[b][2 + j] = h[b][j];
  }
  const int64_t padRow[3] = {1, 0, 1}, padCol[8] = {0, 1, 2, 3, 4, 5, 4, 3};  // reflect: 1 row before, 2 columns after
  double loss = 0;
  for (size_t n = 0; n < kPick.size(); ++n)
    for (int64_t q = 0; q < 8; ++q) loss += c[padRow[kPick[n] % 3]][padCol[q]] * r[n * 8 + q];
  return loss;
}

TEST(TrainingSession, SliceConcatPadTileGatherEinsumChainMatchesHandComputation) {
  constexpr double kLr = 0.05;
  auto s = TrainingSession::createFromOnnxModel(
      chainModel(), DataFlow(1, std::vector<TensorId>{"loss", "Gradient___W"}), "loss",
      ConstSGD(static_cast<float>(kLr)), DeviceManager::createDeviceManager().createCpuDevice());
  NDArray xa = floats({kRows, kIn}, 5);
  auto anchors = s->initAnchorArrays();
  StepIO io({{"x", xa}}, anchors);
  s->run(io);

  auto toD = [](const NDArray& a) { return std::vector<double>(a.data<float>(), a.data<float>() + a.numel()); };
  std::vector<double> x = toD(xa), w = toD(floats({kIn, kOut}, 3)), r = toD(floats({4, 8}, 4));
  EXPECT_NEAR(anchors.at("loss").data<float>()[0], chainLoss(x, w, r), 1e-4);
  // The loss is linear in W: a central difference with step 1 is exact.
  WeightsIO after;
  after.insert("W", NDArray(DataType::Float, {kIn, kOut}));
  s->readWeights(after);
  for (size_t i = 0; i < w.size(); ++i) {
    std::vector<double> wp = w, wm = w;
    wp[i] += 1;
    wm[i] -= 1;
    double grad = (chainLoss(x, wp, r) - chainLoss(x, wm, r)) / 2;
    EXPECT_NEAR(anchors.at("Gradient___W").data<float>()[i], grad, 1e-4) << "dL/dW[" << i << "]";
    EXPECT_NEAR(after.weight("W").data<float>()[i], w[i] - kLr * grad, 1e-5) << "W[" << i << "]";
  }
}

}  // namespace
}  // namespace graft
