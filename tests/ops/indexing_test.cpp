// Tests of src/ops/indexing.cpp: Gather, GatherElements, GatherND, ScatterElements, ScatterND.
#include <climits>

#include "tensor_test_util.hpp"

namespace graft::testing {
namespace {

ir::Attributes axisAttr(int64_t a) { return attrs({{"axis", a}}); }

// ---- Gather -------------------------------------------------------------------------------------

TEST(Gather, Axis0WithMatrixOfIndices) {
  auto data = arr<float>({3, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f});
  auto ind = arr<int64_t>({2, 2}, {0, 1, 1, 2});
  EXPECT_TRUE(
      allClose(run1("Gather", {data, ind}), arr<float>({2, 2, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f})));
}

TEST(Gather, Axis1NegativeIndicesWrap) {
  auto data = iota<int32_t>({2, 3});
  auto ind = arr<int32_t>({2}, {-1, 0});
  EXPECT_TRUE(allClose(run1("Gather", {data, ind}, axisAttr(1)), arr<int32_t>({2, 2}, {2, 0, 5, 3})));
  EXPECT_TRUE(allClose(run1("Gather", {data, ind}, axisAttr(-1)), arr<int32_t>({2, 2}, {2, 0, 5, 3})));
}

TEST(Gather, ScalarIndexDropsTheAxis) {
  auto out = run1("Gather", {iota<float>({3, 2}), scalar<int64_t>(2)});
  EXPECT_TRUE(allClose(out, arr<float>({2}, {4, 5})));
}

TEST(Gather, Strings) {
  auto out = run1("Gather", {strIota({4}), arr<int64_t>({3}, {3, 0, 3})});
  EXPECT_TRUE(allClose(out, arr<std::string>({3}, {"s3", "s0", "s3"})));
}

TEST(Gather, MatchesNaiveLoopOnRank3) {
  auto data = randomArray(DataType::Double, {3, 4, 5}, 7);
  std::vector<int64_t> idx = {0, -1, 3, -4, 2, 1};
  auto ind = arr<int64_t>({2, 3}, idx);
  NDArray out = run1("Gather", {data, ind}, axisAttr(1));
  ASSERT_EQ(out.shape(), (Shape{3, 2, 3, 5}));
  const double* d = data.data<double>();
  const double* o = out.data<double>();
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t j = 0; j < 6; ++j)
      for (int64_t c = 0; c < 5; ++c) {
        int64_t v = idx[j] < 0 ? idx[j] + 4 : idx[j];
        EXPECT_EQ(o[(a * 6 + j) * 5 + c], d[(a * 4 + v) * 5 + c]);
      }
}

TEST(Gather, OutOfRangeIndexThrowsNamingTheNode) {
  EXPECT_TRUE(throwsNamingNode(op("Gather", {iota<float>({3}), i64({3})}), "out of range"));
  EXPECT_TRUE(throwsNamingNode(op("Gather", {iota<float>({3}), i64({-4})}), "-4"));
  EXPECT_TRUE(throwsNamingNode(op("Gather", {iota<float>({3}), i64({0})}, axisAttr(1)), "axis"));
  EXPECT_TRUE(throwsNamingNode(op("Gather", {iota<float>({3}), arr<float>({1}, {0})}), "INT32 or INT64"));
}

TEST(Gather, EmptyIndicesGiveEmptyOutput) {
  auto out = run1("Gather", {iota<float>({3, 2}), arr<int64_t>({0}, {})});
  EXPECT_EQ(out.shape(), (Shape{0, 2}));
}

// ---- GatherElements -----------------------------------------------------------------------------

TEST(GatherElements, SpecExampleAxis1) {
  auto out =
      run1("GatherElements", {arr<float>({2, 2}, {1, 2, 3, 4}), arr<int64_t>({2, 2}, {0, 0, 1, 0})}, axisAttr(1));
  EXPECT_TRUE(allClose(out, arr<float>({2, 2}, {1, 1, 4, 3})));
}

TEST(GatherElements, Axis0NegativeIndicesAndSmallerIndices) {
  auto data = arr<int64_t>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto out = run1("GatherElements", {data, arr<int32_t>({2, 3}, {-1, -2, 0, -2, 0, 0})});
  EXPECT_TRUE(allClose(out, arr<int64_t>({2, 3}, {7, 5, 3, 4, 2, 3})));
  // Indices may be smaller than data on the other axes.
  out = run1("GatherElements", {data, arr<int64_t>({1, 2}, {2, 1})});
  EXPECT_TRUE(allClose(out, arr<int64_t>({1, 2}, {7, 5})));
}

TEST(GatherElements, BadIndicesThrow) {
  auto data = iota<float>({2, 2});
  EXPECT_TRUE(throwsNamingNode(op("GatherElements", {data, arr<int64_t>({1, 1}, {2})}), "out of range"));
  EXPECT_TRUE(throwsNamingNode(op("GatherElements", {data, arr<int64_t>({2}, {0, 0})}), "rank"));
  EXPECT_TRUE(throwsNamingNode(op("GatherElements", {data, arr<int64_t>({1, 3}, {0, 0, 0})}), "exceeds"));
}

// ---- GatherND -----------------------------------------------------------------------------------

TEST(GatherND, SpecExamples) {
  auto d2 = arr<int32_t>({2, 2}, {0, 1, 2, 3});
  EXPECT_TRUE(allClose(run1("GatherND", {d2, arr<int64_t>({2, 2}, {0, 0, 1, 1})}), arr<int32_t>({2}, {0, 3})));
  EXPECT_TRUE(allClose(run1("GatherND", {d2, arr<int64_t>({2, 1}, {1, 0})}), arr<int32_t>({2, 2}, {2, 3, 0, 1})));
  auto d3 = iota<float>({2, 2, 2});
  EXPECT_TRUE(allClose(run1("GatherND", {d3, arr<int64_t>({2, 2}, {0, 1, 1, 0})}), arr<float>({2, 2}, {2, 3, 4, 5})));
  EXPECT_TRUE(
      allClose(run1("GatherND", {d3, arr<int64_t>({2, 1, 2}, {0, 1, 1, 0})}), arr<float>({2, 1, 2}, {2, 3, 4, 5})));
}

TEST(GatherND, BatchDims) {
  auto d3 = iota<float>({2, 2, 2});
  auto out = run1("GatherND", {d3, arr<int64_t>({2, 1}, {1, 0})}, attrs({{"batch_dims", int64_t{1}}}));
  EXPECT_TRUE(allClose(out, arr<float>({2, 2}, {2, 3, 4, 5})));
  // batch_dims 1 with full index tuples: element [b, i, j].
  out = run1("GatherND", {d3, arr<int64_t>({2, 2}, {1, 1, 0, -1})}, attrs({{"batch_dims", int64_t{1}}}));
  EXPECT_TRUE(allClose(out, arr<float>({2}, {3, 5})));
}

TEST(GatherND, StringsAndNegativeIndices) {
  auto out = run1("GatherND", {strIota({2, 2}), arr<int64_t>({1, 2}, {-1, -2})});
  EXPECT_TRUE(allClose(out, arr<std::string>({1}, {"s2"})));
}

TEST(GatherND, BadIndicesThrow) {
  auto d = iota<float>({2, 2});
  EXPECT_TRUE(throwsNamingNode(op("GatherND", {d, arr<int64_t>({1, 2}, {0, 2})}), "out of range"));
  EXPECT_TRUE(throwsNamingNode(op("GatherND", {d, arr<int64_t>({1, 3}, {0, 0, 0})}), "last dimension"));
  EXPECT_TRUE(throwsNamingNode(
      op("GatherND", {d, arr<int64_t>({3, 1}, {0, 0, 0})}, attrs({{"batch_dims", int64_t{1}}})), "batch_dims"));
}

// ---- ScatterElements ----------------------------------------------------------------------------

TEST(ScatterElements, SpecExampleAxis0) {
  auto data = NDArray(DataType::Float, {3, 3});
  auto ind = arr<int64_t>({2, 3}, {1, 0, 2, 0, 2, 1});
  auto upd = arr<float>({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f});
  EXPECT_TRUE(allClose(run1("ScatterElements", {data, ind, upd}),
                       arr<float>({3, 3}, {2.0f, 1.1f, 0.0f, 1.0f, 0.0f, 2.2f, 0.0f, 2.1f, 1.2f})));
  EXPECT_TRUE(allClose(data, NDArray(DataType::Float, {3, 3}))) << "the input must not be modified";
}

TEST(ScatterElements, Axis1NegativeIndices) {
  auto data = arr<float>({1, 5}, {1, 2, 3, 4, 5});
  auto out =
      run1("ScatterElements", {data, arr<int64_t>({1, 2}, {1, -3}), arr<float>({1, 2}, {1.1f, 2.1f})}, axisAttr(1));
  EXPECT_TRUE(allClose(out, arr<float>({1, 5}, {1, 1.1f, 2.1f, 4, 5})));
}

TEST(ScatterElements, Reductions) {
  auto data = arr<float>({1, 5}, {1, 2, 3, 4, 5});
  auto ind = arr<int64_t>({1, 2}, {1, 1});
  auto upd = arr<float>({1, 2}, {1.1f, 2.1f});
  auto with = [&](const char* r) {
    return run1("ScatterElements", {data, ind, upd}, attrs({{"axis", int64_t{1}}, {"reduction", std::string(r)}}));
  };
  EXPECT_TRUE(allClose(with("add"), arr<float>({1, 5}, {1, 5.2f, 3, 4, 5})));
  EXPECT_TRUE(allClose(with("mul"), arr<float>({1, 5}, {1, 2 * 1.1f * 2.1f, 3, 4, 5})));
  EXPECT_TRUE(allClose(with("max"), arr<float>({1, 5}, {1, 2.1f, 3, 4, 5})));
  EXPECT_TRUE(allClose(with("min"), arr<float>({1, 5}, {1, 1.1f, 3, 4, 5})));
  EXPECT_TRUE(allClose(with("none"), arr<float>({1, 5}, {1, 2.1f, 3, 4, 5})));  // last write wins
  EXPECT_TRUE(
      throwsNamingNode(op("ScatterElements", {data, ind, upd}, attrs({{"reduction", std::string("avg")}})), "avg"));
}

TEST(ScatterElements, IntegerAddWrapsWithoutUndefinedBehaviour) {
  auto out = run1("ScatterElements", {arr<int32_t>({1}, {INT_MAX}), i64({0}), arr<int32_t>({1}, {1})},
                  attrs({{"reduction", std::string("add")}}));
  EXPECT_EQ(out.data<int32_t>()[0], INT_MIN);
}

TEST(ScatterElements, StringsAndBools) {
  auto out = run1("ScatterElements", {strIota({3}), i64({2}), arr<std::string>({1}, {"x"})});
  EXPECT_TRUE(allClose(out, arr<std::string>({3}, {"s0", "s1", "x"})));
  EXPECT_TRUE(throwsNamingNode(op("ScatterElements", {strIota({3}), i64({2}), arr<std::string>({1}, {"x"})},
                                  attrs({{"reduction", std::string("add")}})),
                               "STRING"));
  auto b = run1("ScatterElements", {arr<bool>({2}, {false, true}), i64({0}), arr<bool>({1}, {true})},
                attrs({{"reduction", std::string("add")}}));
  EXPECT_TRUE(allClose(b, arr<bool>({2}, {true, true})));
}

TEST(ScatterElements, BadInputsThrow) {
  auto data = iota<float>({2, 2});
  EXPECT_TRUE(throwsNamingNode(op("ScatterElements", {data, arr<int64_t>({1, 1}, {5}), arr<float>({1, 1}, {0})}),
                               "out of range"));
  EXPECT_TRUE(throwsNamingNode(op("ScatterElements", {data, arr<int64_t>({1, 1}, {0}), arr<float>({1, 2}, {0, 0})}),
                               "updates"));
  EXPECT_TRUE(
      throwsNamingNode(op("ScatterElements", {data, arr<int64_t>({1, 1}, {0}), arr<double>({1, 1}, {0})}), "dtype"));
}

// ---- ScatterND ----------------------------------------------------------------------------------

TEST(ScatterND, SpecExample1D) {
  auto out = run1("ScatterND", {arr<float>({8}, {1, 2, 3, 4, 5, 6, 7, 8}), arr<int64_t>({4, 1}, {4, 3, 1, 7}),
                                arr<float>({4}, {9, 10, 11, 12})});
  EXPECT_TRUE(allClose(out, arr<float>({8}, {1, 11, 3, 10, 9, 6, 7, 12})));
}

TEST(ScatterND, SpecExampleSlices) {
  auto data = iota<int64_t>({4, 2, 2});
  auto upd = arr<int64_t>({2, 2, 2}, {5, 5, 5, 5, 6, 6, 6, 6});
  auto out = run1("ScatterND", {data, arr<int64_t>({2, 1}, {0, -2}), upd});
  EXPECT_TRUE(allClose(out, arr<int64_t>({4, 2, 2}, {5, 5, 5, 5, 4, 5, 6, 7, 6, 6, 6, 6, 12, 13, 14, 15})));
}

TEST(ScatterND, AddAndMulAccumulateDuplicates) {
  auto data = arr<float>({4}, {1, 2, 3, 4});
  auto ind = arr<int64_t>({2, 1}, {1, 1});
  auto upd = arr<float>({2}, {3, 5});
  EXPECT_TRUE(allClose(run1("ScatterND", {data, ind, upd}, attrs({{"reduction", std::string("add")}})),
                       arr<float>({4}, {1, 10, 3, 4})));
  EXPECT_TRUE(allClose(run1("ScatterND", {data, ind, upd}, attrs({{"reduction", std::string("mul")}})),
                       arr<float>({4}, {1, 30, 3, 4})));
}

TEST(ScatterND, BadInputsThrow) {
  auto data = iota<float>({2, 2});
  EXPECT_TRUE(
      throwsNamingNode(op("ScatterND", {data, arr<int64_t>({1, 2}, {0, 2}), arr<float>({1}, {0})}), "out of range"));
  EXPECT_TRUE(throwsNamingNode(op("ScatterND", {data, arr<int64_t>({1, 1}, {0}), arr<float>({1}, {0})}), "updates"));
  EXPECT_TRUE(throwsNamingNode(op("ScatterND", {data, arr<int64_t>({1, 3}, {0, 0, 0}), arr<float>({1}, {0})}),
                               "last dimension"));
}


// ---- opset 18-28 additions ----------------------------------------------------------------------

TEST(TensorScatter, LinearAndCircularWrites) {
  NDArray past = arr<float>({2, 4, 1}, {1, 1, 1, 1, 2, 2, 2, 2});
  NDArray upd = arr<float>({2, 2, 1}, {7, 8, 5, 6});
  auto y = runOutputs("TensorScatter", {past, upd, arr<int64_t>({2}, {1, 0})}).at(0);
  EXPECT_TRUE(allClose(y, arr<float>({2, 4, 1}, {1, 7, 8, 1, 5, 6, 2, 2})));
  y = runOutputs("TensorScatter", {past, upd, arr<int64_t>({2}, {3, 2})}, attrs({{"mode", std::string("circular")}}))
          .at(0);
  EXPECT_TRUE(allClose(y, arr<float>({2, 4, 1}, {8, 1, 1, 7, 2, 2, 5, 6})));
  EXPECT_THROW(runOutputs("TensorScatter", {past, upd, arr<int64_t>({2}, {3, 0})}), Error);  // linear: 3 + 1 >= 4
  y = runOutputs("TensorScatter", {past, upd}).at(0);                                        // no write_indices: from 0
  EXPECT_TRUE(allClose(y, arr<float>({2, 4, 1}, {7, 8, 1, 1, 5, 6, 2, 2})));
}

TEST(TensorScatter, Gradient) {
  NDArray past = randomArray(DataType::Double, {2, 2, 4, 3}, 1), upd = randomArray(DataType::Double, {2, 2, 3, 3}, 2);
  for (std::string mode : {"linear", "circular"}) {
    NDArray w = arr<int64_t>({2}, {1, mode == "linear" ? 0 : 3});
    EXPECT_TRUE(gradCheck({"TensorScatter", {past, upd, w}, attrs({{"mode", mode}})}, {0, 1})) << mode;
  }
  EXPECT_TRUE(gradCheck({"TensorScatter", {past, upd}}, {0, 1}));
}

}  // namespace
}  // namespace graft::testing
