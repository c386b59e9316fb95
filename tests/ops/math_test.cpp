// Tests of src/ops/math.cpp: elementwise arithmetic, comparison, logic and unary math.
#include <cmath>

#include "op_case_util.hpp"
#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray run1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  auto out = runReference({type, std::move(in), std::move(a)});
  return out.at(0);
}

TEST(Add, BroadcastsLikeNumpy) {
  auto a = arr<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = arr<float>({3}, {10, 20, 30});
  EXPECT_TRUE(allClose(run1("Add", {a, b}), arr<float>({2, 3}, {11, 22, 33, 14, 25, 36})));
  auto c = arr<float>({2, 1}, {100, 200});
  EXPECT_TRUE(allClose(run1("Add", {a, c}), arr<float>({2, 3}, {101, 102, 103, 204, 205, 206})));
}

TEST(Add, RejectsShapesThatDoNotBroadcast) {
  EXPECT_THROW(run1("Add", {arr<float>({2, 3}, {1, 2, 3, 4, 5, 6}), arr<float>({2}, {1, 2})}), Error);
}

TEST(Add, Integers) { EXPECT_TRUE(allClose(run1("Add", {arr<int64_t>({2}, {1, 2}), arr<int64_t>({}, {5})}), arr<int64_t>({2}, {6, 7}))); }

TEST(Sub, Basic) { EXPECT_TRUE(allClose(run1("Sub", {arr<float>({2}, {5, 1}), arr<float>({2}, {1, 2})}), arr<float>({2}, {4, -1}))); }

TEST(Mul, Basic) { EXPECT_TRUE(allClose(run1("Mul", {arr<double>({2}, {3, 4}), arr<double>({1}, {2})}), arr<double>({2}, {6, 8}))); }

TEST(Div, IntegerDivisionByZeroDoesNotTrap) {
  EXPECT_TRUE(allClose(run1("Div", {arr<int32_t>({3}, {7, -7, 5}), arr<int32_t>({3}, {2, 2, 0})}), arr<int32_t>({3}, {3, -3, 0})));
  EXPECT_TRUE(allClose(run1("Div", {arr<float>({1}, {1}), arr<float>({1}, {4})}), arr<float>({1}, {0.25f})));
}

TEST(Pow, MixedTypes) {
  EXPECT_TRUE(allClose(run1("Pow", {arr<float>({3}, {1, 2, 3}), arr<int64_t>({1}, {2})}), arr<float>({3}, {1, 4, 9})));
}

TEST(Mod, SignFollowsDivisorUnlessFmod) {
  EXPECT_TRUE(allClose(run1("Mod", {arr<int32_t>({2}, {-4, 7}), arr<int32_t>({2}, {3, -3})}), arr<int32_t>({2}, {2, -2})));
  EXPECT_TRUE(allClose(run1("Mod", {arr<float>({2}, {-4, 7}), arr<float>({2}, {3, -3})}, attrs({{"fmod", int64_t{1}}})),
                       arr<float>({2}, {-1, 1})));
  // Opset 28: floats with fmod=0 take the divisor's sign, like Python's %.
  EXPECT_TRUE(allClose(run1("Mod", {arr<float>({3}, {-4, 7, 5.5f}), arr<float>({3}, {3, -3, 2})}),
                       arr<float>({3}, {2, -2, 1.5f})));
}

TEST(BitShift, LeftAndRight) {
  EXPECT_TRUE(allClose(run1("BitShift", {arr<uint8_t>({2}, {1, 16}), arr<uint8_t>({2}, {3, 2})}, attrs({{"direction", std::string("LEFT")}})),
                       arr<uint8_t>({2}, {8, 64})));
  EXPECT_TRUE(allClose(run1("BitShift", {arr<uint8_t>({2}, {1, 16}), arr<uint8_t>({2}, {3, 2})}, attrs({{"direction", std::string("RIGHT")}})),
                       arr<uint8_t>({2}, {0, 4})));
}

// Opset 28: signed integers; right shifts are arithmetic, counts outside [0, bits) give 0 or the
// sign fill.
TEST(BitShift, SignedIntegersAndCountsOutOfRange) {
  auto left = attrs({{"direction", std::string("LEFT")}}), right = attrs({{"direction", std::string("RIGHT")}});
  EXPECT_TRUE(allClose(run1("BitShift", {arr<int8_t>({4}, {1, -1, 64, 3}), arr<int8_t>({4}, {2, 1, 1, -1})}, left),
                       arr<int8_t>({4}, {4, -2, -128, 0})));
  EXPECT_TRUE(
      allClose(run1("BitShift", {arr<int32_t>({4}, {-16, 16, -1, 5}), arr<int32_t>({4}, {2, 2, 40, -3})}, right),
               arr<int32_t>({4}, {-4, 4, -1, 0})));
  EXPECT_TRUE(allClose(run1("BitShift", {arr<uint16_t>({2}, {1, 2}), arr<uint16_t>({2}, {16, 1})}, left),
                       arr<uint16_t>({2}, {0, 4})));
}

// The first input broadcast to the output through a scalar (Sum(1, x) in Gelu's function body).
TEST(Sum, ScalarFirstBroadcasts) {
  EXPECT_TRUE(
      allClose(run1("Sum", {scalar<float>(1), arr<float>({2, 2}, {1, 2, 3, 4})}), arr<float>({2, 2}, {2, 3, 4, 5})));
  EXPECT_TRUE(allClose(run1("Max", {arr<float>({1}, {2}), arr<float>({3}, {1, 2, 3})}), arr<float>({3}, {2, 2, 3})));
}

TEST(Equal, NumbersAndStrings) {
  EXPECT_TRUE(allClose(run1("Equal", {arr<int32_t>({3}, {1, 2, 3}), arr<int32_t>({3}, {1, 0, 3})}), arr<bool>({3}, {true, false, true})));
  EXPECT_TRUE(allClose(run1("Equal", {arr<std::string>({2}, {"a", "b"}), arr<std::string>({1}, {"b"})}), arr<bool>({2}, {false, true})));
}

TEST(Less, Basic) { EXPECT_TRUE(allClose(run1("Less", {arr<float>({2}, {1, 3}), arr<float>({1}, {2})}), arr<bool>({2}, {true, false}))); }
TEST(LessOrEqual, Basic) { EXPECT_TRUE(allClose(run1("LessOrEqual", {arr<float>({2}, {2, 3}), arr<float>({1}, {2})}), arr<bool>({2}, {true, false}))); }
TEST(Greater, Basic) { EXPECT_TRUE(allClose(run1("Greater", {arr<float>({2}, {1, 3}), arr<float>({1}, {2})}), arr<bool>({2}, {false, true}))); }
TEST(GreaterOrEqual, Basic) { EXPECT_TRUE(allClose(run1("GreaterOrEqual", {arr<float>({2}, {2, 1}), arr<float>({1}, {2})}), arr<bool>({2}, {true, false}))); }
// ONNX defines both by function bodies; graft infers their type itself (BOOL, broadcast shape).
TEST(GreaterOrEqual, InfersBoolOfTheBroadcastShape) {
  for (const char* type : {"GreaterOrEqual", "LessOrEqual"}) {
    auto t = inferTypes({type, {NDArray(DataType::Float, {4, 1, 3}), NDArray(DataType::Float, {5, 1})}});
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].info.dataType(), DataType::Bool) << type;
    EXPECT_EQ(t[0].info.shape(), (Shape{4, 5, 3})) << type;
    EXPECT_THROW(inferTypes({type, {NDArray(DataType::Float, {4}), NDArray(DataType::Float, {3})}}), Error) << type;
    EXPECT_THROW(inferTypes({type, {NDArray(DataType::Float, {4}), NDArray(DataType::Int32, {4})}}), Error) << type;
  }
}

TEST(And, Truth) { EXPECT_TRUE(allClose(run1("And", {arr<bool>({4}, {0, 0, 1, 1}), arr<bool>({4}, {0, 1, 0, 1})}), arr<bool>({4}, {0, 0, 0, 1}))); }
TEST(Or, Truth) { EXPECT_TRUE(allClose(run1("Or", {arr<bool>({4}, {0, 0, 1, 1}), arr<bool>({4}, {0, 1, 0, 1})}), arr<bool>({4}, {0, 1, 1, 1}))); }
TEST(Xor, Truth) { EXPECT_TRUE(allClose(run1("Xor", {arr<bool>({4}, {0, 0, 1, 1}), arr<bool>({4}, {0, 1, 0, 1})}), arr<bool>({4}, {0, 1, 1, 0}))); }
TEST(Not, Truth) { EXPECT_TRUE(allClose(run1("Not", {arr<bool>({2}, {0, 1})}), arr<bool>({2}, {1, 0}))); }

TEST(Sum, ThreeInputsBroadcast) {
  EXPECT_TRUE(allClose(run1("Sum", {arr<float>({2}, {1, 2}), arr<float>({1}, {10}), arr<float>({2, 1}, {100, 200})}),
                       arr<float>({2, 2}, {111, 112, 211, 212})));
}
TEST(Mean, Basic) { EXPECT_TRUE(allClose(run1("Mean", {arr<float>({2}, {1, 2}), arr<float>({2}, {3, 6})}), arr<float>({2}, {2, 4}))); }
TEST(Max, PropagatesNaN) {
  EXPECT_TRUE(allClose(run1("Max", {arr<float>({2}, {1, NAN}), arr<float>({2}, {3, 1})}), arr<float>({2}, {3, NAN})));
}
TEST(Min, Basic) { EXPECT_TRUE(allClose(run1("Min", {arr<int64_t>({2}, {1, 5}), arr<int64_t>({2}, {3, 2})}), arr<int64_t>({2}, {1, 2}))); }

TEST(Where, Broadcasts) {
  EXPECT_TRUE(allClose(run1("Where", {arr<bool>({2}, {1, 0}), arr<float>({2, 1}, {1, 2}), arr<float>({1}, {9})}),
                       arr<float>({2, 2}, {1, 9, 2, 9})));
}

struct UnaryCase {
  const char* op;
  double x;
  double want;
};

TEST(Abs, Basic) { EXPECT_TRUE(allClose(run1("Abs", {arr<int32_t>({2}, {-3, 4})}), arr<int32_t>({2}, {3, 4}))); }
TEST(Neg, Basic) { EXPECT_TRUE(allClose(run1("Neg", {arr<float>({2}, {-3, 4})}), arr<float>({2}, {3, -4}))); }
TEST(Sign, Basic) { EXPECT_TRUE(allClose(run1("Sign", {arr<float>({3}, {-3, 0, 4})}), arr<float>({3}, {-1, 0, 1}))); }
TEST(Round, HalfToEven) { EXPECT_TRUE(allClose(run1("Round", {arr<float>({4}, {0.5f, 1.5f, 2.5f, -0.5f})}), arr<float>({4}, {0, 2, 2, -0.0f}))); }
TEST(Sign, NaNPropagates) {
  EXPECT_TRUE(allClose(run1("Sign", {arr<float>({4}, {NAN, -3, 0, 2})}), arr<float>({4}, {NAN, -1, 0, 1})));
}

TEST(IsNaN, Basic) { EXPECT_TRUE(allClose(run1("IsNaN", {arr<float>({2}, {NAN, 1})}), arr<bool>({2}, {1, 0}))); }
TEST(IsInf, DetectSigns) {
  EXPECT_TRUE(allClose(run1("IsInf", {arr<float>({3}, {INFINITY, -INFINITY, 1})}, attrs({{"detect_negative", int64_t{0}}})),
                       arr<bool>({3}, {1, 0, 0})));
}

// Unary functions compared with the C library on a few points.
TEST(Exp, MatchesLibm) { EXPECT_TRUE(allClose(run1("Exp", {arr<float>({2}, {0, 1})}), arr<float>({2}, {1, std::exp(1.0f)}))); }
TEST(Log, MatchesLibm) { EXPECT_TRUE(allClose(run1("Log", {arr<float>({2}, {1, 2})}), arr<float>({2}, {0, std::log(2.0f)}))); }
TEST(Sqrt, MatchesLibm) { EXPECT_TRUE(allClose(run1("Sqrt", {arr<float>({2}, {4, 2})}), arr<float>({2}, {2, std::sqrt(2.0f)}))); }
TEST(Reciprocal, Basic) { EXPECT_TRUE(allClose(run1("Reciprocal", {arr<float>({2}, {4, -2})}), arr<float>({2}, {0.25f, -0.5f}))); }
TEST(Floor, Basic) { EXPECT_TRUE(allClose(run1("Floor", {arr<float>({2}, {1.5f, -1.5f})}), arr<float>({2}, {1, -2}))); }
TEST(Ceil, Basic) { EXPECT_TRUE(allClose(run1("Ceil", {arr<float>({2}, {1.5f, -1.5f})}), arr<float>({2}, {2, -1}))); }
TEST(Sin, MatchesLibm) { EXPECT_TRUE(allClose(run1("Sin", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::sin(0.5)}))); }
TEST(Cos, MatchesLibm) { EXPECT_TRUE(allClose(run1("Cos", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::cos(0.5)}))); }
TEST(Tan, MatchesLibm) { EXPECT_TRUE(allClose(run1("Tan", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::tan(0.5)}))); }
TEST(Asin, MatchesLibm) { EXPECT_TRUE(allClose(run1("Asin", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::asin(0.5)}))); }
TEST(Acos, MatchesLibm) { EXPECT_TRUE(allClose(run1("Acos", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::acos(0.5)}))); }
TEST(Atan, MatchesLibm) { EXPECT_TRUE(allClose(run1("Atan", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::atan(0.5)}))); }
TEST(Sinh, MatchesLibm) { EXPECT_TRUE(allClose(run1("Sinh", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::sinh(0.5)}))); }
TEST(Cosh, MatchesLibm) { EXPECT_TRUE(allClose(run1("Cosh", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::cosh(0.5)}))); }
TEST(Asinh, MatchesLibm) { EXPECT_TRUE(allClose(run1("Asinh", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::asinh(0.5)}))); }
TEST(Acosh, MatchesLibm) { EXPECT_TRUE(allClose(run1("Acosh", {arr<double>({1}, {1.5})}), arr<double>({1}, {std::acosh(1.5)}))); }
TEST(Atanh, MatchesLibm) { EXPECT_TRUE(allClose(run1("Atanh", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::atanh(0.5)}))); }
TEST(Erf, MatchesLibm) { EXPECT_TRUE(allClose(run1("Erf", {arr<double>({1}, {0.5})}), arr<double>({1}, {std::erf(0.5)}))); }

TEST(Add, HalfPrecisionRoundsThroughFloat) {
  NDArray a(DataType::Float16, {2}), b(DataType::Float16, {2});
  a.data<Half>()[0] = Half(1.5f);
  a.data<Half>()[1] = Half(-2.0f);
  b.data<Half>()[0] = Half(0.25f);
  b.data<Half>()[1] = Half(0.5f);
  NDArray y = run1("Add", {a, b});
  ASSERT_EQ(y.dtype(), DataType::Float16);
  EXPECT_EQ(static_cast<float>(y.data<Half>()[0]), 1.75f);
  EXPECT_EQ(static_cast<float>(y.data<Half>()[1]), -1.5f);
}


// ---- opset 18-28 additions ----------------------------------------------------------------------

TEST(BitwiseAnd, SignedAndUnsigned) {
  EXPECT_TRUE(allClose(runOutputs("BitwiseAnd", {arr<int32_t>({2}, {12, -1}), arr<int32_t>({2}, {10, 7})}).at(0),
                       arr<int32_t>({2}, {8, 7})));
  EXPECT_THROW(runOutputs("BitwiseAnd", {arr<float>({1}, {1}), arr<float>({1}, {1})}), Error);
}

TEST(BitwiseOr, Bytes) {
  EXPECT_TRUE(allClose(runOutputs("BitwiseOr", {arr<uint8_t>({2}, {0xF0, 1}), arr<uint8_t>({2}, {0x0F, 2})}).at(0),
                       arr<uint8_t>({2}, {0xFF, 3})));
}

TEST(BitwiseXor, Broadcasts) {
  EXPECT_TRUE(allClose(runOutputs("BitwiseXor", {arr<int64_t>({2, 2}, {1, 2, 3, 4}), arr<int64_t>({1}, {1})}).at(0),
                       arr<int64_t>({2, 2}, {0, 3, 2, 5})));
  EXPECT_EQ(inferTypes({"BitwiseXor", {arr<int64_t>({2, 1}, {1, 2}), arr<int64_t>({3}, {1, 2, 3})}}).at(0).info.shape(),
            Shape({2, 3}));
}

TEST(BitwiseNot, ComplementsEveryBit) {
  EXPECT_TRUE(allClose(runOutputs("BitwiseNot", {arr<int8_t>({3}, {0, -1, 5})}).at(0), arr<int8_t>({3}, {-1, 0, -6})));
  EXPECT_TRUE(allClose(runOutputs("BitwiseNot", {arr<uint16_t>({2}, {0, 0xFF00})}).at(0),
                       arr<uint16_t>({2}, {0xFFFF, 0x00FF})));
}

}  // namespace
}  // namespace graft::testing
