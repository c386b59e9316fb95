// Tests of src/ops/einsum.cpp: Einsum (against naive loops written out per equation) and Det.
#include "tensor_test_util.hpp"

namespace graft::testing {
namespace {

NDArray einsum(const std::string& eq, std::vector<NDArray> in) {
  return run1("Einsum", std::move(in), attrs({{"equation", eq}}));
}

TEST(Einsum, MatMulMatchesLoops) {
  auto a = randomArray(DataType::Float, {3, 4}, 1), b = randomArray(DataType::Float, {4, 5}, 2);
  NDArray want(DataType::Float, {3, 5});
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) {
      double s = 0;
      for (int j = 0; j < 4; ++j) s += a.data<float>()[i * 4 + j] * b.data<float>()[j * 5 + k];
      want.data<float>()[i * 5 + k] = static_cast<float>(s);
    }
  EXPECT_TRUE(allClose(einsum("ij,jk->ik", {a, b}), want));
  EXPECT_TRUE(allClose(einsum("ij, jk", {a, b}), want));  // implicit output, spaces allowed
}

TEST(Einsum, BatchMatMulWithBroadcastEllipsis) {
  auto a = randomArray(DataType::Double, {2, 1, 2, 3}, 3), b = randomArray(DataType::Double, {3, 3, 2}, 4);
  NDArray out = einsum("...ij,...jk->...ik", {a, b});
  ASSERT_EQ(out.shape(), (Shape{2, 3, 2, 2}));
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 3; ++q)
      for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 2; ++k) {
          double s = 0;
          for (int j = 0; j < 3; ++j)
            s += a.data<double>()[(p * 2 + i) * 3 + j] * b.data<double>()[(q * 3 + j) * 2 + k];
          EXPECT_NEAR(out.data<double>()[((p * 3 + q) * 2 + i) * 2 + k], s, 1e-12);
        }
}

TEST(Einsum, TransposeAndImplicitOrder) {
  auto x = iota<int32_t>({2, 3});
  auto t = arr<int32_t>({3, 2}, {0, 3, 1, 4, 2, 5});
  EXPECT_TRUE(allClose(einsum("ij->ji", {x}), t));
  EXPECT_TRUE(allClose(einsum("ba", {x}), t));  // implicit output is "ab": labels in ASCII order
  // Upper case sorts before lower case.
  EXPECT_EQ(einsum("bA,c", {iota<float>({2, 3}), iota<float>({4})}).shape(), (Shape{3, 2, 4}));
}

TEST(Einsum, DiagonalTraceAndBatchDiagonal) {
  auto m = iota<float>({3, 3});
  EXPECT_TRUE(allClose(einsum("ii->i", {m}), arr<float>({3}, {0, 4, 8})));
  EXPECT_TRUE(allClose(einsum("ii", {m}), scalar<float>(12)));
  auto b = iota<float>({2, 2, 2});
  EXPECT_TRUE(allClose(einsum("...ii->...i", {b}), arr<float>({2, 2}, {0, 3, 4, 7})));
  EXPECT_TRUE(allClose(einsum("iji->j", {iota<float>({2, 2, 2})}), arr<float>({2}, {0 + 5, 2 + 7})));
}

TEST(Einsum, SumsInnerAndOuterProducts) {
  auto v = arr<float>({3}, {1, 2, 3}), w = arr<float>({3}, {4, 5, 6});
  EXPECT_TRUE(allClose(einsum("i,i", {v, w}), scalar<float>(32)));
  EXPECT_TRUE(allClose(einsum("i,j->ij", {v, arr<float>({2}, {1, 10})}), arr<float>({3, 2}, {1, 10, 2, 20, 3, 30})));
  EXPECT_TRUE(allClose(einsum("ij->", {iota<float>({2, 3})}), scalar<float>(15)));
  EXPECT_TRUE(allClose(einsum("ij->i", {iota<float>({2, 3})}), arr<float>({2}, {3, 12})));
  EXPECT_TRUE(allClose(einsum("i...,i...", {iota<float>({2, 3}), iota<float>({2, 3})}), arr<float>({3}, {9, 17, 29})));
}

TEST(Einsum, IntegersAndEmptySums) {
  EXPECT_TRUE(allClose(einsum("i,i->", {arr<int64_t>({2}, {3, 4}), arr<int64_t>({2}, {5, 6})}), scalar<int64_t>(39)));
  EXPECT_TRUE(allClose(einsum("ij->i", {NDArray(DataType::Float, {2, 0})}), NDArray(DataType::Float, {2})));
  // A size-1 axis broadcasts against the label's size elsewhere, as in numpy.
  EXPECT_TRUE(allClose(einsum("ij,jk->ik", {arr<float>({2, 1}, {1, 2}), arr<float>({3, 2}, {1, 2, 3, 4, 5, 6})}),
                       arr<float>({2, 2}, {9, 12, 18, 24})));
}

TEST(Einsum, BadEquationsThrow) {
  auto m = iota<float>({2, 3});
  EXPECT_TRUE(throwsNamingNode(op("Einsum", {m}, attrs({{"equation", std::string("i1->i")}})), "unexpected character"));
  EXPECT_TRUE(throwsNamingNode(op("Einsum", {m}, attrs({{"equation", std::string("ijk->i")}})), "rank"));
  EXPECT_TRUE(throwsNamingNode(op("Einsum", {m, m}, attrs({{"equation", std::string("ij,ij->ik")}})), "output label"));
  EXPECT_TRUE(throwsNamingNode(op("Einsum", {m, m}, attrs({{"equation", std::string("ij,jk->ik")}})), "label 'j'"));
  EXPECT_TRUE(throwsNamingNode(op("Einsum", {m}, attrs({{"equation", std::string("ij,jk->ik")}})), "operands"));
  EXPECT_TRUE(throwsNamingNode(op("Einsum", {m}, attrs({{"equation", std::string("...j->j")}})), "ellipsis"));
  EXPECT_TRUE(throwsNamingNode(op("Einsum", {m}, attrs({{"equation", std::string("ij->ii")}})), "twice"));
}

// ---- Det ----------------------------------------------------------------------------------------

TEST(Einsum, InfersStaticOutputShapes) {
  // ONNX's own inference gives only the rank.
  auto t = inferTypes(
      {"Einsum", {iota<float>({2, 3}), iota<float>({3, 4})}, attrs({{"equation", std::string("ij,jk->ki")}})});
  EXPECT_EQ(t.at(0).info.shape(), (Shape{4, 2}));
  t = inferTypes(
      {"Einsum", {iota<float>({2, 1, 3}), iota<float>({1, 3, 5})}, attrs({{"equation", std::string("...ij,...jk")}})});
  EXPECT_EQ(t.at(0).info.shape(), (Shape{2, 1, 5}));
  EXPECT_EQ(t.at(0).info.dataType(), DataType::Float);
}

TEST(Det, SmallMatrices) {
  EXPECT_TRUE(allClose(run1("Det", {arr<float>({2, 2}, {1, 2, 3, 4})}), scalar<float>(-2)));
  EXPECT_TRUE(allClose(run1("Det", {arr<double>({3, 3}, {2, -3, 1, 2, 0, -1, 1, 4, 5})}), scalar<double>(49)));
  EXPECT_TRUE(allClose(run1("Det", {arr<float>({2, 2}, {0, 1, 1, 0})}), scalar<float>(-1)));  // needs a pivot swap
  EXPECT_TRUE(allClose(run1("Det", {arr<float>({2, 2}, {1, 2, 2, 4})}), scalar<float>(0)));
}

TEST(Det, BatchedAndEmptyMatrices) {
  auto out = run1("Det", {arr<float>({2, 2, 2}, {1, 2, 3, 4, 2, 0, 0, 3})});
  EXPECT_TRUE(allClose(out, arr<float>({2}, {-2, 6})));
  EXPECT_TRUE(allClose(run1("Det", {NDArray(DataType::Float, {2, 0, 0})}), arr<float>({2}, {1, 1})));
  Half h[4] = {Half(2.0f), Half(1.0f), Half(1.0f), Half(3.0f)};
  NDArray hx(DataType::Float16, {2, 2});
  std::copy(h, h + 4, hx.data<Half>());
  EXPECT_EQ(static_cast<float>(run1("Det", {hx}).data<Half>()[0]), 5.0f);
}

TEST(Det, NonSquareThrows) { EXPECT_TRUE(throwsNamingNode(op("Det", {iota<float>({2, 3})}), "[*, M, M]")); }

}  // namespace
}  // namespace graft::testing
