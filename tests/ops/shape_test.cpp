// Tests of src/ops/shape.cpp: Constant, Identity, Cast, CastLike, Reshape, Flatten, Squeeze,
// Unsqueeze, Transpose, Concat, Shape, Size.
#include <climits>
#include <cmath>
#include <limits>

#include "tensor_test_util.hpp"

namespace graft::testing {
namespace {

// ---- Constant -----------------------------------------------------------------------------------

NDArray constant(ir::Attributes a) { return runReference(op("Constant", {}, std::move(a))).at(0); }

TEST(Constant, EveryValueAttribute) {
  EXPECT_TRUE(allClose(constant(attrs({{"value", arr<int32_t>({2}, {3, 4})}})), arr<int32_t>({2}, {3, 4})));
  // The importer turns sparse_value into a dense tensor attribute.
  EXPECT_TRUE(allClose(constant(attrs({{"sparse_value", arr<float>({3}, {0, 5, 0})}})), arr<float>({3}, {0, 5, 0})));
  EXPECT_TRUE(allClose(constant(attrs({{"value_float", 1.5f}})), scalar<float>(1.5f)));
  EXPECT_TRUE(allClose(constant(attrs({{"value_floats", std::vector<float>{1, 2}}})), arr<float>({2}, {1, 2})));
  EXPECT_TRUE(allClose(constant(attrs({{"value_int", int64_t{-7}}})), scalar<int64_t>(-7)));
  EXPECT_TRUE(allClose(constant(attrs({{"value_ints", std::vector<int64_t>{5, 6, 7}}})), arr<int64_t>({3}, {5, 6, 7})));
  EXPECT_TRUE(allClose(constant(attrs({{"value_string", std::string("hi")}})), scalar<std::string>("hi")));
  EXPECT_TRUE(allClose(constant(attrs({{"value_strings", std::vector<std::string>{"a", "b"}}})),
                       arr<std::string>({2}, {"a", "b"})));
}

TEST(Constant, NeedsExactlyOneValue) {
  EXPECT_TRUE(throwsNamingNode(op("Constant", {}, {}), "exactly one"));
  EXPECT_TRUE(
      throwsNamingNode(op("Constant", {}, attrs({{"value_int", int64_t{1}}, {"value_float", 1.0f}})), "exactly one"));
  EXPECT_TRUE(throwsNamingNode(op("Constant", {}, attrs({{"value", int64_t{1}}})), "value"));
}

// ---- Identity -----------------------------------------------------------------------------------

TEST(Identity, ReturnsTheInput) {
  auto x = strIota({2, 2});
  auto y = run1("Identity", {x});
  EXPECT_TRUE(allClose(y, x));
  EXPECT_TRUE(y.sharesBufferWith(x));
}

// ---- Cast ---------------------------------------------------------------------------------------

NDArray cast(const NDArray& x, DataType to) { return run1("Cast", {x}, attrs({{"to", static_cast<int64_t>(to)}})); }

const DataType kNumericTypes[] = {DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16,
                                  DataType::Int8,  DataType::Int16,  DataType::Int32,   DataType::Int64,
                                  DataType::UInt8, DataType::UInt16, DataType::UInt32,  DataType::UInt64,
                                  DataType::Bool};

TEST(Cast, EveryNumericPairOnExactValues) {
  // 0, 1, 7 and 100 are exact in every numeric type; bool holds them as 0, 1, 1, 1.
  const std::vector<double> values = {0, 1, 7, 100};
  for (DataType from : kNumericTypes) {
    NDArray x(from, {4});
    ops::dispatch<ops::kNumericBool>(from, "test", [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int i = 0; i < 4; ++i) {
        if constexpr (std::is_same_v<T, bool>)
          x.data<T>()[i] = values[i] != 0;
        else
          x.data<T>()[i] = static_cast<T>(static_cast<ops::ComputeType<T>>(values[i]));
      }
    });
    for (DataType to : kNumericTypes) {
      NDArray y = cast(x, to);
      ASSERT_EQ(y.dtype(), to);
      std::vector<double> got = toDoubles(y);
      for (int i = 0; i < 4; ++i) {
        double want = (from == DataType::Bool || to == DataType::Bool) ? (values[i] != 0 ? 1 : 0) : values[i];
        EXPECT_EQ(got[i], want) << dtypeName(from) << " -> " << dtypeName(to) << " element " << i;
      }
    }
  }
}

TEST(Cast, FloatToIntegerSaturatesAndNaNGivesZero) {
  auto x = arr<float>({6}, {NAN, INFINITY, -INFINITY, 1e10f, -1e10f, -2.7f});
  EXPECT_TRUE(allClose(cast(x, DataType::Int32), arr<int32_t>({6}, {0, INT_MAX, INT_MIN, INT_MAX, INT_MIN, -2})));
  EXPECT_TRUE(
      allClose(cast(x, DataType::Int64), arr<int64_t>({6}, {0, INT64_MAX, INT64_MIN, 10000000000, -10000000000, -2})));
  EXPECT_TRUE(
      allClose(cast(arr<double>({3}, {300.7, -5.5, 255.9}), DataType::UInt8), arr<uint8_t>({3}, {255, 0, 255})));
  EXPECT_TRUE(allClose(cast(arr<double>({2}, {1e300, -1e300}), DataType::UInt64),
                       arr<uint64_t>({2}, {std::numeric_limits<uint64_t>::max(), 0})));
}

TEST(Cast, HalfAndBFloat16RoundToNearestEven) {
  NDArray h = cast(arr<float>({4}, {65519.0f, 65520.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048}), DataType::Float16);
  EXPECT_EQ(h.data<Half>()[0].bits, 0x7bffu);  // 65504, the largest half
  EXPECT_EQ(h.data<Half>()[1].bits, 0x7c00u);  // inf
  EXPECT_EQ(h.data<Half>()[2].bits, 0x3c00u);  // tie to even: 1.0
  EXPECT_EQ(h.data<Half>()[3].bits, 0x3c02u);  // tie to even: up
  NDArray b = cast(arr<float>({2}, {1.0f + 1.0f / 256, 1.0f + 3.0f / 256}), DataType::BFloat16);
  EXPECT_EQ(b.data<BFloat16>()[0].bits, 0x3f80u);
  EXPECT_EQ(b.data<BFloat16>()[1].bits, 0x3f82u);
  EXPECT_TRUE(allClose(cast(h, DataType::Float), arr<float>({4}, {65504.0f, INFINITY, 1.0f, 1.0f + 2.0f / 1024})));
}

TEST(Cast, DoubleAndInt64ToHalfTypesRoundOnce) {
  // Just above a half tie: rounding to float first would land on the tie and round down.
  NDArray h = cast(arr<double>({1}, {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)}), DataType::Float16);
  EXPECT_EQ(h.data<Half>()[0].bits, 0x3c01u);
  // Same for int64 -> bfloat16 at 2^60: the exact value is above the tie 2^60 + 2^52.
  int64_t v = (int64_t{1} << 60) + (int64_t{1} << 52) + 1;
  NDArray b = cast(arr<int64_t>({1}, {v}), DataType::BFloat16);
  EXPECT_EQ(static_cast<double>(static_cast<float>(b.data<BFloat16>()[0])), std::ldexp(1.0, 60) + std::ldexp(1.0, 53));
}

TEST(Cast, StringToNumbers) {
  auto s = arr<std::string>({6}, {"1.5", "  -2e3 ", "INF", "+INF", "-inf", "NaN"});
  EXPECT_TRUE(allClose(cast(s, DataType::Float), arr<float>({6}, {1.5f, -2000, INFINITY, INFINITY, -INFINITY, NAN})));
  EXPECT_TRUE(allClose(cast(arr<std::string>({3}, {"9223372036854775807", "+12", "3.9"}), DataType::Int64),
                       arr<int64_t>({3}, {INT64_MAX, 12, 3})));
  EXPECT_TRUE(allClose(cast(arr<std::string>({1}, {"1e400"}), DataType::Double), arr<double>({1}, {INFINITY})));
  EXPECT_TRUE(allClose(cast(arr<std::string>({5}, {"true", "0", "", "2.5", "False"}), DataType::Bool),
                       arr<bool>({5}, {true, false, false, true, false})));
  EXPECT_TRUE(throwsNamingNode(op("Cast", {arr<std::string>({1}, {"abc"})}, attrs({{"to", int64_t{1}}})), "'abc'"));
}

TEST(Cast, NumbersToStringsLikeNumpy) {
  auto f = arr<float>({8}, {0.1f, 1.0f, 1e20f, NAN, -INFINITY, 1e-5f, 0.039187793f, -0.0f});
  EXPECT_TRUE(allClose(cast(f, DataType::String),
                       arr<std::string>({8}, {"0.1", "1.0", "1e+20", "NaN", "-INF", "1e-05", "0.039187793", "-0.0"})));
  EXPECT_TRUE(allClose(cast(arr<double>({1}, {0.1}), DataType::String), arr<std::string>({1}, {"0.1"})));
  NDArray h(DataType::Float16, {1});
  h.data<Half>()[0] = Half(0.1f);  // 0.0999755859375: the shortest half-precision repr is "0.1"
  EXPECT_TRUE(allClose(cast(h, DataType::String), arr<std::string>({1}, {"0.1"})));
  EXPECT_TRUE(allClose(cast(arr<int8_t>({2}, {-5, 127}), DataType::String), arr<std::string>({2}, {"-5", "127"})));
  EXPECT_TRUE(
      allClose(cast(arr<bool>({2}, {true, false}), DataType::String), arr<std::string>({2}, {"True", "False"})));
}

TEST(Cast, SameTypeIsIdentityAndRoundTripsStrings) {
  auto x = arr<float>({2}, {0.3f, -7.25f});
  EXPECT_TRUE(allClose(cast(x, DataType::Float), x));
  EXPECT_TRUE(allClose(cast(cast(x, DataType::String), DataType::Float), x, 0, 0));
}

TEST(CastLike, TakesTheTargetTypeFromInputTwo) {
  auto out = run1("CastLike", {arr<float>({2}, {1.9f, -1.9f}), arr<int16_t>({0}, {})});
  EXPECT_TRUE(allClose(out, arr<int16_t>({2}, {1, -1})));
  out = run1("CastLike", {arr<std::string>({1}, {"2.5"}), scalar<double>(0)});
  EXPECT_TRUE(allClose(out, arr<double>({1}, {2.5})));
}

// ---- Reshape, Flatten, Squeeze, Unsqueeze ------------------------------------------------------

NDArray reshape(const NDArray& x, std::vector<int64_t> s, int64_t allowzero = 0) {
  return run1("Reshape", {x, i64(std::move(s))}, attrs({{"allowzero", allowzero}}));
}

TEST(Reshape, ZeroCopiesAndMinusOneInfers) {
  auto x = iota<float>({2, 3, 4});
  EXPECT_EQ(reshape(x, {4, 2, 3}).shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(reshape(x, {0, -1}).shape(), (Shape{2, 12}));
  EXPECT_EQ(reshape(x, {-1, 0, 2}).shape(), (Shape{4, 3, 2}));
  auto y = reshape(x, {24});
  EXPECT_TRUE(allClose(y, iota<float>({24})));
  EXPECT_TRUE(y.sharesBufferWith(x));
}

TEST(Reshape, AllowZeroKeepsZeros) {
  auto x = NDArray(DataType::Float, {0, 3});
  EXPECT_EQ(reshape(x, {3, 0}, 1).shape(), (Shape{3, 0}));
  EXPECT_EQ(reshape(x, {0, 3}, 0).shape(), (Shape{0, 3}));
  EXPECT_TRUE(throwsNamingNode(op("Reshape", {iota<float>({2, 3}), i64({3, 0})}, attrs({{"allowzero", int64_t{1}}})),
                               "reshape"));
}

TEST(Reshape, BadShapesThrow) {
  auto x = iota<float>({2, 3});
  EXPECT_TRUE(throwsNamingNode(op("Reshape", {x, i64({4, -1})}), "cannot reshape"));
  EXPECT_TRUE(throwsNamingNode(op("Reshape", {x, i64({-1, -1})}), "more than one -1"));
  EXPECT_TRUE(throwsNamingNode(op("Reshape", {x, i64({2, -3})}), "invalid dimension"));
  EXPECT_TRUE(throwsNamingNode(op("Reshape", {x, i64({0, 0, 0})}), "lacks"));
  EXPECT_TRUE(throwsNamingNode(op("Reshape", {x, i64({INT64_MAX, 4, -1})}), "int64"));
}

TEST(Flatten, Axes) {
  auto x = iota<float>({2, 3, 4});
  EXPECT_EQ(run1("Flatten", {x}).shape(), (Shape{2, 12}));
  EXPECT_EQ(run1("Flatten", {x}, attrs({{"axis", int64_t{0}}})).shape(), (Shape{1, 24}));
  EXPECT_EQ(run1("Flatten", {x}, attrs({{"axis", int64_t{3}}})).shape(), (Shape{24, 1}));
  EXPECT_EQ(run1("Flatten", {x}, attrs({{"axis", int64_t{-1}}})).shape(), (Shape{6, 4}));
  EXPECT_TRUE(allClose(run1("Flatten", {x}), iota<float>({2, 12})));
  EXPECT_TRUE(throwsNamingNode(op("Flatten", {x}, attrs({{"axis", int64_t{4}}})), "axis"));
}

TEST(Squeeze, WithAndWithoutAxes) {
  auto x = iota<float>({1, 3, 1, 2});
  EXPECT_EQ(run1("Squeeze", {x}).shape(), (Shape{3, 2}));
  EXPECT_EQ(run1("Squeeze", {x, i64({-2})}).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(run1("Squeeze", {x, i64({0, 2})}).shape(), (Shape{3, 2}));
  EXPECT_TRUE(throwsNamingNode(op("Squeeze", {x, i64({1})}), "not 1"));
  EXPECT_TRUE(throwsNamingNode(op("Squeeze", {x, i64({4})}), "out of range"));
}

TEST(Unsqueeze, UnsortedAndNegativeAxes) {
  auto x = iota<float>({3, 4});
  EXPECT_EQ(run1("Unsqueeze", {x, i64({0})}).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(run1("Unsqueeze", {x, i64({3, 0})}).shape(), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(run1("Unsqueeze", {x, i64({-1})}).shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(run1("Unsqueeze", {x, i64({1, 2, 4})}).shape(), (Shape{3, 1, 1, 4, 1}));
  EXPECT_TRUE(throwsNamingNode(op("Unsqueeze", {x, i64({1, 1})}), "twice"));
  EXPECT_TRUE(throwsNamingNode(op("Unsqueeze", {x, i64({3})}), "out of range"));
}

// ---- Transpose, Concat --------------------------------------------------------------------------

TEST(Transpose, DefaultReversesAxes) {
  EXPECT_TRUE(allClose(run1("Transpose", {iota<int32_t>({2, 3})}), arr<int32_t>({3, 2}, {0, 3, 1, 4, 2, 5})));
}

TEST(Transpose, EveryPermutationOfRank3MatchesLoops) {
  auto x = iota<float>({2, 3, 4});
  std::vector<int64_t> perm = {0, 1, 2};
  do {
    NDArray y = run1("Transpose", {x}, attrs({{"perm", perm}}));
    Shape s = {x.dim(perm[0]), x.dim(perm[1]), x.dim(perm[2])};
    ASSERT_EQ(y.shape(), s);
    for (int64_t i = 0; i < s[0]; ++i)
      for (int64_t j = 0; j < s[1]; ++j)
        for (int64_t k = 0; k < s[2]; ++k) {
          int64_t c[3];
          c[perm[0]] = i;
          c[perm[1]] = j;
          c[perm[2]] = k;
          EXPECT_EQ(y.data<float>()[(i * s[1] + j) * s[2] + k], x.data<float>()[(c[0] * 3 + c[1]) * 4 + c[2]]);
        }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(Transpose, StringsAndBadPerm) {
  EXPECT_TRUE(allClose(run1("Transpose", {strIota({1, 2})}), arr<std::string>({2, 1}, {"s0", "s1"})));
  EXPECT_TRUE(
      throwsNamingNode(op("Transpose", {iota<float>({2, 2})}, attrs({{"perm", std::vector<int64_t>{0}}})), "perm"));
  EXPECT_TRUE(
      throwsNamingNode(op("Transpose", {iota<float>({2, 2})}, attrs({{"perm", std::vector<int64_t>{0, 0}}})), "twice"));
}

TEST(Concat, AxesAndStrings) {
  auto a = iota<float>({2, 2}), b = arr<float>({2, 1}, {9, 8});
  EXPECT_TRUE(allClose(run1("Concat", {a, b}, attrs({{"axis", int64_t{-1}}})), arr<float>({2, 3}, {0, 1, 9, 2, 3, 8})));
  EXPECT_TRUE(
      allClose(run1("Concat", {a, a}, attrs({{"axis", int64_t{0}}})), arr<float>({4, 2}, {0, 1, 2, 3, 0, 1, 2, 3})));
  EXPECT_TRUE(
      allClose(run1("Concat", {strIota({1}), arr<std::string>({0}, {}), strIota({2})}, attrs({{"axis", int64_t{0}}})),
               arr<std::string>({3}, {"s0", "s0", "s1"})));
}

TEST(Concat, MismatchesThrow) {
  auto a = iota<float>({2, 2});
  EXPECT_TRUE(throwsNamingNode(op("Concat", {a, iota<float>({3, 3})}, attrs({{"axis", int64_t{0}}})), "differs"));
  EXPECT_TRUE(throwsNamingNode(op("Concat", {a, iota<float>({2})}, attrs({{"axis", int64_t{0}}})), "rank"));
  EXPECT_TRUE(throwsNamingNode(op("Concat", {a, iota<double>({2, 2})}, attrs({{"axis", int64_t{0}}})), "dtype"));
  EXPECT_TRUE(throwsNamingNode(op("Concat", {a, a}, attrs({{"axis", int64_t{2}}})), "axis"));
}

// ---- Shape, Size --------------------------------------------------------------------------------

TEST(Shape, StartAndEnd) {
  auto x = NDArray(DataType::Float, {2, 3, 4});
  EXPECT_TRUE(allClose(run1("Shape", {x}), i64({2, 3, 4})));
  EXPECT_TRUE(allClose(run1("Shape", {x}, attrs({{"start", int64_t{1}}})), i64({3, 4})));
  EXPECT_TRUE(allClose(run1("Shape", {x}, attrs({{"end", int64_t{-1}}})), i64({2, 3})));
  EXPECT_TRUE(allClose(run1("Shape", {x}, attrs({{"start", int64_t{-10}}, {"end", int64_t{10}}})), i64({2, 3, 4})));
  EXPECT_EQ(run1("Shape", {x}, attrs({{"start", int64_t{2}}, {"end", int64_t{1}}})).shape(), (Shape{0}));
  EXPECT_EQ(run1("Shape", {scalar<float>(1)}).shape(), (Shape{0}));
}

TEST(Size, CountsElements) {
  EXPECT_TRUE(allClose(run1("Size", {NDArray(DataType::Float, {2, 3, 4})}), scalar<int64_t>(24)));
  EXPECT_TRUE(allClose(run1("Size", {scalar<std::string>("a")}), scalar<int64_t>(1)));
  EXPECT_TRUE(allClose(run1("Size", {NDArray(DataType::Bool, {0, 5})}), scalar<int64_t>(0)));
}

// ---- opset 18-28 additions ----------------------------------------------------------------------

// ---- low-precision types through Cast -------------------------------------------------------------

NDArray castTo(const NDArray& x, DataType to, int64_t saturate = 1) {
  return runOutputs("Cast", {x}, attrs({{"to", static_cast<int64_t>(to)}, {"saturate", saturate}})).at(0);
}
// Float values -> `dt` -> float again: the values `dt` represents, as floats.
NDArray roundTrip(const std::vector<float>& v, DataType dt, int64_t saturate = 1) {
  NDArray low = castTo(arr<float>({static_cast<int64_t>(v.size())}, v), dt, saturate);
  EXPECT_EQ(low.dtype(), dt);
  return castTo(low, DataType::Float);
}
uint8_t byteOf(const std::vector<float>& v, DataType dt, int64_t saturate = 1) {
  NDArray low = castTo(arr<float>({1}, v), dt, saturate);
  return static_cast<const uint8_t*>(low.rawData())[0];
}

TEST(Cast, Float8E4M3FN) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(byteOf({1.0f}, DataType::Float8E4M3FN), 0x38);
  EXPECT_EQ(byteOf({-0.0f}, DataType::Float8E4M3FN), 0x80);
  EXPECT_EQ(byteOf({448.0f}, DataType::Float8E4M3FN), 0x7E);
  // 464 lies halfway between 448 (even code) and the NaN code: it rounds to 448; 465 overflows.
  EXPECT_TRUE(allClose(roundTrip({464, 465, 1000, inf, -inf, nan, 0.001f, 3.3f}, DataType::Float8E4M3FN, 0),
                       arr<float>({8}, {448, nan, nan, nan, nan, nan, 0.001953125f, 3.25f})));
  EXPECT_TRUE(
      allClose(roundTrip({465, 1000, inf, -inf}, DataType::Float8E4M3FN), arr<float>({4}, {448, 448, 448, -448})));
}

TEST(Cast, Float8E5M2AndTheUnsignedZeroFormats) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(byteOf({1.0f}, DataType::Float8E5M2), 0x3C);
  // 61440 is halfway between 57344 (odd code 0x7B) and infinity (0x7C): it rounds to infinity.
  EXPECT_TRUE(allClose(roundTrip({57344, 61440, 1000, inf, nan}, DataType::Float8E5M2, 0),
                       arr<float>({5}, {57344, inf, 1024, inf, nan})));
  EXPECT_TRUE(allClose(roundTrip({61440, -inf}, DataType::Float8E5M2), arr<float>({2}, {57344, -57344})));
  EXPECT_EQ(byteOf({1.0f}, DataType::Float8E4M3FNUZ), 0x40);
  EXPECT_EQ(byteOf({-0.0f}, DataType::Float8E4M3FNUZ), 0x00);  // no negative zero
  EXPECT_EQ(byteOf({nan}, DataType::Float8E4M3FNUZ), 0x80);
  EXPECT_TRUE(allClose(roundTrip({240, 250, inf}, DataType::Float8E4M3FNUZ, 0), arr<float>({3}, {240, nan, nan})));
  EXPECT_TRUE(allClose(roundTrip({250, inf}, DataType::Float8E4M3FNUZ), arr<float>({2}, {240, 240})));
  EXPECT_EQ(byteOf({1.0f}, DataType::Float8E5M2FNUZ), 0x40);
  EXPECT_TRUE(allClose(roundTrip({57344, 1e6f}, DataType::Float8E5M2FNUZ), arr<float>({2}, {57344, 57344})));
}

TEST(Cast, Float4AndFourBitIntegers) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Ties to even: 0.25 -> 0, 0.75 -> 1, -3.5 -> -4; float4 always saturates (to 6).
  EXPECT_TRUE(allClose(roundTrip({0.48f, 0.25f, 0.75f, 1.05f, -3.5f, -8, 9, nan}, DataType::Float4E2M1),
                       arr<float>({8}, {0.5f, 0, 1, 1, -4, -6, 6, -0.0f})));
  // INT4/UINT4: truncation toward zero; out of range gives 0 (as the onnx reference, via ml_dtypes).
  EXPECT_TRUE(allClose(roundTrip({-9, -8, 7, 8, 7.6f, -7.6f}, DataType::Int4), arr<float>({6}, {0, -8, 7, 0, 7, -7})));
  EXPECT_TRUE(allClose(roundTrip({-1, 0, 15, 16, 3.9f}, DataType::UInt4), arr<float>({5}, {0, 0, 15, 0, 3})));
  // Integers to and from INT4, and unsupported arithmetic is refused by type name.
  EXPECT_TRUE(
      allClose(castTo(castTo(arr<int8_t>({2}, {-3, 5}), DataType::Int4), DataType::Int8), arr<int8_t>({2}, {-3, 5})));
  NDArray low = castTo(arr<float>({1}, {1}), DataType::Float8E4M3FN);
  try {
    runOutputs("Relu", {low});
    ADD_FAILURE() << "expected graft::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FLOAT8E4M3FN"), std::string::npos) << e.what();
  }
}

TEST(Cast, TwoBitIntegers) {
  // INT2 holds -2..1 and UINT2 0..3; truncation toward zero, out of range (and NaN) gives 0.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(allClose(roundTrip({-3, -2, -1.5f, 0, 1, 1.9f, 2, nan}, DataType::Int2),
                       arr<float>({8}, {0, -2, -1, 0, 1, 1, 0, 0})));
  EXPECT_TRUE(allClose(roundTrip({-1, 0, 2.5f, 3, 4}, DataType::UInt2), arr<float>({5}, {0, 0, 2, 3, 0})));
  EXPECT_TRUE(allClose(castTo(castTo(arr<int8_t>({3}, {-2, -1, 1}), DataType::Int2), DataType::Int8),
                       arr<int8_t>({3}, {-2, -1, 1})));
}

TEST(Cast, Float8E8M0RoundsToPowersOfTwo) {
  auto castE8M0 = [](const std::vector<float>& v, const std::string& mode, int64_t saturate = 1) {
    return runOutputs(
               "Cast", {arr<float>({static_cast<int64_t>(v.size())}, v)},
               attrs(
                   {{"to", static_cast<int64_t>(DataType::Float8E8M0)}, {"saturate", saturate}, {"round_mode", mode}}))
        .at(0);
  };
  auto bytes = [](const NDArray& a) {
    const auto* p = static_cast<const uint8_t*>(a.rawData());
    return std::vector<int>(p, p + a.numel());
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // 1 -> 127; 3 lies between 2 (128) and 4 (129); the sign is dropped; NaN and inf -> 0xFF.
  EXPECT_EQ(bytes(castE8M0({1, 3, -3, 0.75f, nan, inf}, "up")), (std::vector<int>{127, 129, 129, 127, 255, 255}));
  EXPECT_EQ(bytes(castE8M0({1, 3, 2.9f, 0.75f}, "down")), (std::vector<int>{127, 128, 128, 126}));
  // nearest: 2.9 is nearer 2 on the mantissa's guard bit, 3.1 above the tie goes to 4.
  EXPECT_EQ(bytes(castE8M0({2.9f, 3.1f, 1}, "nearest")), (std::vector<int>{128, 129, 127}));
  // From the largest binade up: saturate keeps 0xFE, otherwise it becomes NaN.
  EXPECT_EQ(bytes(castE8M0({3e38f}, "up")), (std::vector<int>{254}));
  EXPECT_EQ(bytes(castE8M0({3e38f}, "up", 0)), (std::vector<int>{255}));
  NDArray back = castTo(castE8M0({0.5f, 8, 1e-3f}, "up"), DataType::Float);
  EXPECT_TRUE(allClose(back, arr<float>({3}, {0.5f, 8, 0.001953125f})));
  EXPECT_THROW(castE8M0({1}, "sideways"), Error);
}

TEST(BitCast, ReinterpretsBytes) {
  auto y = runOutputs("BitCast", {arr<float>({2}, {1.0f, -2.0f})}, attrs({{"to", int64_t{6}}})).at(0);  // INT32
  EXPECT_TRUE(allClose(y, arr<int32_t>({2}, {0x3f800000, static_cast<int32_t>(0xc0000000u)})));
  EXPECT_TRUE(allClose(runOutputs("BitCast", {y}, attrs({{"to", int64_t{1}}})).at(0), arr<float>({2}, {1.0f, -2.0f})));
  EXPECT_THROW(runOutputs("BitCast", {arr<float>({1}, {1})}, attrs({{"to", int64_t{7}}})), Error);  // 32 vs 64 bits
}

}  // namespace
}  // namespace graft::testing
