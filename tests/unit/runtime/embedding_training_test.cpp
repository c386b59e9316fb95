// TrainingSession end to end on an embedding model: Gather rows of a weight table with repeated
// (and negative) indices, pool them with a MatMul, MseLoss. The updated table is checked against
// the same SGD steps computed by hand in double precision: rows used several times accumulate
// their gradients, rows never used stay as they were.
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

}  // namespace
}  // namespace graft
