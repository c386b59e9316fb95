// Tests of src/ops/matmul.cpp: MatMul and Gemm against a naive triple loop written here.
#include <limits>

#include "op_case_util.hpp"

namespace graft::testing {
namespace {

// C = A[M,K] * B[K,N] in double.
std::vector<double> naive(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t K, int64_t N) {
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) c[m * N + n] += a[m * K + k] * b[k * N + n];
  return c;
}

NDArray fromVec(const std::vector<double>& v, Shape s) { return arr<double>(std::move(s), v); }

TEST(MatMul, TwoD) {
  auto a = arr<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = arr<float>({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_TRUE(allClose(run1("MatMul", {a, b}), arr<float>({2, 2}, {58, 64, 139, 154})));
}

TEST(MatMul, OneDOperands) {
  auto v = arr<float>({3}, {1, 2, 3});
  auto m = arr<float>({3, 2}, {1, 0, 0, 1, 1, 1});
  EXPECT_TRUE(allClose(run1("MatMul", {v, m}), arr<float>({2}, {4, 5})));
  EXPECT_TRUE(allClose(run1("MatMul", {arr<float>({2, 3}, {1, 0, 0, 0, 1, 1}), v}), arr<float>({2}, {1, 5})));
  EXPECT_TRUE(allClose(run1("MatMul", {v, v}), scalar<float>(14)));
}

TEST(MatMul, BatchedBroadcastingMatchesNaive) {
  NDArray a = randomArray(DataType::Double, {2, 1, 3, 4}, 1);
  NDArray b = randomArray(DataType::Double, {3, 4, 5}, 2);
  NDArray y = run1("MatMul", {a, b});
  ASSERT_EQ(y.shape(), Shape({2, 3, 3, 5}));
  auto av = toDoubles(a), bv = toDoubles(b);
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      std::vector<double> am(av.begin() + i * 12, av.begin() + (i + 1) * 12);
      std::vector<double> bm(bv.begin() + j * 20, bv.begin() + (j + 1) * 20);
      auto c = naive(am, bm, 3, 4, 5);
      want.insert(want.end(), c.begin(), c.end());
    }
  EXPECT_TRUE(allClose(y, fromVec(want, {2, 3, 3, 5}), 1e-12, 1e-12));
}

TEST(MatMul, IntegersWrapInsteadOfOverflowing) {
  EXPECT_TRUE(allClose(run1("MatMul", {arr<int32_t>({1, 2}, {2, 3}), arr<int32_t>({2, 1}, {4, 5})}), arr<int32_t>({1, 1}, {23})));
  int64_t big = std::numeric_limits<int64_t>::max();
  // big * 2 wraps to -2 modulo 2^64
  EXPECT_TRUE(allClose(run1("MatMul", {arr<int64_t>({1, 1}, {big}), arr<int64_t>({1, 1}, {2})}), arr<int64_t>({1, 1}, {-2})));
}

TEST(MatMul, RejectsMismatches) {
  EXPECT_THROW(run1("MatMul", {arr<float>({2, 3}, {1, 2, 3, 4, 5, 6}), arr<float>({2, 2}, {1, 2, 3, 4})}), Error);
  EXPECT_THROW(run1("MatMul", {arr<float>({1, 1}, {1}), arr<double>({1, 1}, {1})}), Error);
  EXPECT_THROW(run1("MatMul", {scalar<float>(1), arr<float>({1}, {1})}), Error);
  EXPECT_THROW(run1("MatMul", {arr<float>({2, 1, 1}, {1, 2}), arr<float>({3, 1, 1}, {1, 2, 3})}), Error);
}

TEST(Gemm, TransposesAlphaBeta) {
  NDArray a = randomArray(DataType::Double, {4, 3}, 5);  // transposed: [K=4, M=3]
  NDArray b = randomArray(DataType::Double, {2, 4}, 6);  // transposed: [N=2, K=4]
  NDArray c = randomArray(DataType::Double, {3, 2}, 7);
  float alpha = 0.5f, beta = 2.0f;
  NDArray y = run1("Gemm", {a, b, c},
                   attrs({{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", alpha}, {"beta", beta}}));
  auto av = toDoubles(a), bv = toDoubles(b), cv = toDoubles(c);
  std::vector<double> at(12), bt(8);
  for (int k = 0; k < 4; ++k)
    for (int m = 0; m < 3; ++m) at[m * 4 + k] = av[k * 3 + m];
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k) bt[k * 2 + n] = bv[n * 4 + k];
  auto p = naive(at, bt, 3, 4, 2);
  for (size_t i = 0; i < p.size(); ++i) p[i] = 0.5 * p[i] + 2.0 * cv[i];
  EXPECT_TRUE(allClose(y, fromVec(p, {3, 2}), 1e-12, 1e-12));
}

TEST(Gemm, BroadcastsCAndCIsOptional) {
  auto a = arr<float>({2, 2}, {1, 2, 3, 4});
  auto id = arr<float>({2, 2}, {1, 0, 0, 1});
  EXPECT_TRUE(allClose(run1("Gemm", {a, id, arr<float>({2}, {10, 20})}), arr<float>({2, 2}, {11, 22, 13, 24})));
  EXPECT_TRUE(allClose(run1("Gemm", {a, id, arr<float>({2, 1}, {10, 20})}), arr<float>({2, 2}, {11, 12, 23, 24})));
  EXPECT_TRUE(allClose(run1("Gemm", {a, id, scalar<float>(1)}), arr<float>({2, 2}, {2, 3, 4, 5})));
  EXPECT_TRUE(allClose(run1("Gemm", {a, id}), a));
  EXPECT_THROW(run1("Gemm", {a, id, arr<float>({3}, {1, 2, 3})}), Error);
}

TEST(Gemm, IntegersAndBadInputs) {
  auto a = arr<int32_t>({1, 2}, {2, 3});
  auto b = arr<int32_t>({2, 1}, {4, 5});
  EXPECT_TRUE(allClose(run1("Gemm", {a, b, arr<int32_t>({1}, {1})}), arr<int32_t>({1, 1}, {24})));
  float alpha = 0.5f;
  EXPECT_TRUE(allClose(run1("Gemm", {a, b}, attrs({{"alpha", alpha}})), arr<int32_t>({1, 1}, {11})));
  EXPECT_THROW(run1("Gemm", {arr<float>({2}, {1, 2}), arr<float>({2, 1}, {1, 2})}), Error);
  EXPECT_THROW(run1("Gemm", {arr<float>({1, 2}, {1, 2}), arr<float>({1, 2}, {1, 2})}), Error);
  EXPECT_THROW(run1("Gemm", {arr<float>({1, 1}, {1}), arr<float>({1, 1}, {1}), arr<double>({1}, {1})}), Error);
}

}  // namespace
}  // namespace graft::testing
