// Tests of src/ops/cumulative.cpp (CumProd).
#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray cumProd(NDArray x, int64_t axis, int64_t exclusive = 0, int64_t reverse = 0) {
  OpCase c{"CumProd", {std::move(x), scalar<int64_t>(axis)}, attrs({{"exclusive", exclusive}, {"reverse", reverse}})};
  return runReference(c).at(0);
}

TEST(CumProd, InclusiveExclusiveReverse) {
  NDArray x = arr<float>({4}, {1, 2, 3, 4});
  EXPECT_TRUE(allClose(cumProd(x, 0), arr<float>({4}, {1, 2, 6, 24})));
  EXPECT_TRUE(allClose(cumProd(x, 0, 1), arr<float>({4}, {1, 1, 2, 6})));
  EXPECT_TRUE(allClose(cumProd(x, 0, 0, 1), arr<float>({4}, {24, 24, 12, 4})));
  EXPECT_TRUE(allClose(cumProd(x, -1, 1, 1), arr<float>({4}, {24, 12, 4, 1})));
}

TEST(CumProd, IntegersAlongAnInnerAxis) {
  EXPECT_TRUE(
      allClose(cumProd(arr<int32_t>({2, 3}, {1, 2, 3, -1, 4, 5}), 1), arr<int32_t>({2, 3}, {1, 2, 6, -1, -4, -20})));
  EXPECT_THROW(cumProd(arr<int32_t>({2}, {1, 2}), 1), Error);
}

TEST(CumProd, Gradient) {
  NDArray x = randomArray(DataType::Double, {2, 4, 3}, 1, 0.5, 1.5);
  // Zeros (one, and two on one line) have exact gradients too: no division by x.
  NDArray z = x.clone();
  z.data<double>()[3] = 0;
  z.data<double>()[4 * 3 + 1] = 0;
  z.data<double>()[5 * 3 + 1] = 0;
  for (int64_t axis : {1, -1, 0})
    for (int64_t excl : {0, 1})
      for (int64_t rev : {0, 1}) {
        OpCase c{"CumProd", {x, scalar<int64_t>(axis)}, attrs({{"exclusive", excl}, {"reverse", rev}})};
        EXPECT_TRUE(gradCheck(c, {0})) << axis << excl << rev;
        c.inputs[0] = z;
        EXPECT_TRUE(gradCheck(c, {0})) << "with zeros " << axis << excl << rev;
      }
}

}  // namespace
}  // namespace graft::testing
