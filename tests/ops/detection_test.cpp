// Tests of src/ops/detection.cpp: NonMaxSuppression against hand-worked selections and a
// brute-force greedy selection written here.
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray nms(std::vector<NDArray> in, ir::Attributes a = {}) {
  return runReference(OpCase{"NonMaxSuppression", std::move(in), std::move(a), 1, ""}).at(0);
}

NDArray triples(const std::vector<int64_t>& v) { return arr<int64_t>({static_cast<int64_t>(v.size() / 3), 3}, v); }

// Six boxes ([y1, x1, y2, x2]): three overlapping near the origin, two near y = 10, one far away.
NDArray cornerBoxes() {
  return arr<float>({1, 6, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f, 0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100, 1, 101});
}
NDArray sixScores() { return arr<float>({1, 1, 6}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f}); }

TEST(NonMaxSuppression, SuppressesOverlapsAboveTheThreshold) {
  auto y = nms({cornerBoxes(), sixScores(), scalar<int64_t>(3), scalar<float>(0.5f), scalar<float>(0)});
  EXPECT_TRUE(allClose(y, triples({0, 0, 3, 0, 0, 0, 0, 0, 5})));
  // At most 2 per class.
  EXPECT_TRUE(allClose(nms({cornerBoxes(), sixScores(), scalar<int64_t>(2), scalar<float>(0.5f)}), triples({0, 0, 3, 0, 0, 0})));
}

TEST(NonMaxSuppression, CenterPointAndFlippedCornersAgree) {
  // The same boxes as [x_center, y_center, width, height].
  auto centers = arr<float>({1, 6, 4}, {0.5f, 0.5f, 1, 1, 0.6f, 0.5f, 1, 1, 0.4f, 0.5f, 1, 1, 10.5f, 0.5f, 1, 1, 10.6f, 0.5f, 1, 1,
                                        100.5f, 0.5f, 1, 1});
  auto y = nms({centers, sixScores(), scalar<int64_t>(3), scalar<float>(0.5f)}, attrs({{"center_point_box", int64_t{1}}}));
  EXPECT_TRUE(allClose(y, triples({0, 0, 3, 0, 0, 0, 0, 0, 5})));
  // Corners given in either order.
  auto flipped = arr<float>({1, 6, 4}, {1, 1, 0, 0, 0, 0.1f, 1, 1.1f, 0, 0.9f, 1, -0.1f, 0, 10, 1, 11, 1, 10.1f, 0, 11.1f, 1, 101, 0, 100});
  EXPECT_TRUE(allClose(nms({flipped, sixScores(), scalar<int64_t>(3), scalar<float>(0.5f)}), triples({0, 0, 3, 0, 0, 0, 0, 0, 5})));
}

TEST(NonMaxSuppression, ScoreThresholdIsStrict) {
  auto y = nms({cornerBoxes(), sixScores(), scalar<int64_t>(3), scalar<float>(0.5f), scalar<float>(0.3f)});
  EXPECT_TRUE(allClose(y, triples({0, 0, 3, 0, 0, 0})));  // box 5 scores exactly 0.3
}

TEST(NonMaxSuppression, OptionalInputsDefaults) {
  // No max_output_boxes_per_class: nothing is selected.
  EXPECT_TRUE(allClose(nms({cornerBoxes(), sixScores()}), arr<int64_t>({0, 3}, {})));
  EXPECT_TRUE(allClose(nms({cornerBoxes(), sixScores(), scalar<int64_t>(-4)}), arr<int64_t>({0, 3}, {})));
  // No iou_threshold (0): any overlap suppresses, so only the best of each cluster survives.
  EXPECT_TRUE(allClose(nms({cornerBoxes(), sixScores(), scalar<int64_t>(10)}), triples({0, 0, 3, 0, 0, 0, 0, 0, 5})));
  // iou_threshold 1: nothing is ever suppressed; order by score.
  EXPECT_TRUE(allClose(nms({cornerBoxes(), sixScores(), arr<int64_t>({1}, {10}), arr<float>({1}, {1})}),
                       triples({0, 0, 3, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 4, 0, 0, 5})));
}

TEST(NonMaxSuppression, BatchesClassesAndTies) {
  // Two batches of the same boxes, two classes; class 1 has equal scores (lower index first).
  NDArray boxes(DataType::Float, {2, 6, 4});
  std::copy_n(cornerBoxes().data<float>(), 24, boxes.data<float>());
  std::copy_n(cornerBoxes().data<float>(), 24, boxes.data<float>() + 24);
  NDArray scores(DataType::Float, {2, 2, 6});
  for (int b = 0; b < 2; ++b) {
    std::copy_n(sixScores().data<float>(), 6, scores.data<float>() + b * 12);
    std::fill_n(scores.data<float>() + b * 12 + 6, 6, 0.5f);
  }
  auto y = nms({boxes, scores, scalar<int64_t>(2), scalar<float>(0.5f)});
  EXPECT_TRUE(allClose(y, triples({0, 0, 3, 0, 0, 0, 0, 1, 0, 0, 1, 3, 1, 0, 3, 1, 0, 0, 1, 1, 0, 1, 1, 3})));
}

TEST(NonMaxSuppression, MatchesBruteForceGreedySelection) {
  const int64_t N = 40;
  auto raw = randomArray(DataType::Float, {1, N, 4}, 21, 0, 10);
  auto scores = randomArray(DataType::Float, {1, 1, N}, 22, 0, 1);
  auto y = nms({raw, scores, scalar<int64_t>(N), scalar<float>(0.3f), scalar<float>(0.2f)});
  // Brute force: repeatedly take the best remaining box, then drop everything overlapping it.
  auto b = toDoubles(raw), s = toDoubles(scores);
  auto iou = [&](int64_t i, int64_t j) {
    auto lo = [&](int64_t k, int c) { return std::min(b[k * 4 + c], b[k * 4 + c + 2]); };
    auto hi = [&](int64_t k, int c) { return std::max(b[k * 4 + c], b[k * 4 + c + 2]); };
    double ih = std::min(hi(i, 0), hi(j, 0)) - std::max(lo(i, 0), lo(j, 0));
    double iw = std::min(hi(i, 1), hi(j, 1)) - std::max(lo(i, 1), lo(j, 1));
    if (ih <= 0 || iw <= 0) return 0.0;
    double ai = (hi(i, 0) - lo(i, 0)) * (hi(i, 1) - lo(i, 1)), aj = (hi(j, 0) - lo(j, 0)) * (hi(j, 1) - lo(j, 1));
    return ih * iw / (ai + aj - ih * iw);
  };
  std::vector<bool> alive(N);
  for (int64_t i = 0; i < N; ++i) alive[i] = s[i] > static_cast<double>(0.2f);
  std::vector<int64_t> want;
  for (;;) {
    int64_t best = -1;
    for (int64_t i = 0; i < N; ++i)
      if (alive[i] && (best < 0 || s[i] > s[best])) best = i;
    if (best < 0) break;
    want.insert(want.end(), {0, 0, best});
    alive[best] = false;
    for (int64_t i = 0; i < N; ++i)
      if (alive[i] && iou(i, best) > 0.3) alive[i] = false;
  }
  EXPECT_GT(want.size(), 3u);
  EXPECT_TRUE(allClose(y, triples(want)));
}

TEST(NonMaxSuppression, RejectsBadInputs) {
  auto s = sixScores();
  EXPECT_THROW(nms({arr<float>({1, 6, 2}, std::vector<float>(12, 0)), s, scalar<int64_t>(1)}), Error);
  EXPECT_THROW(nms({cornerBoxes(), arr<float>({1, 1, 5}, {1, 2, 3, 4, 5}), scalar<int64_t>(1)}), Error);
  EXPECT_THROW(nms({cornerBoxes(), s, scalar<int64_t>(1), scalar<float>(1.5f)}), Error);
  EXPECT_THROW(nms({cornerBoxes(), s, arr<int64_t>({2}, {1, 2})}), Error);
  EXPECT_THROW(nms({cornerBoxes(), s}, attrs({{"center_point_box", int64_t{2}}})), Error);
}

}  // namespace
}  // namespace graft::testing
