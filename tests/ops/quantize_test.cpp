// Tests of src/ops/quantize.cpp and src/ops/quantize_conv.cpp: linear (de)quantization, the
// integer matrix products and the quantized convolutions, against hand-computed values and
// naive loops written here.
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

std::vector<NDArray> ref(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}, int nout = 1) {
  return runReference(OpCase{type, std::move(in), std::move(a), nout, ""});
}
NDArray ref1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return ref(type, std::move(in), std::move(a)).at(0);
}

// ---- QuantizeLinear / DequantizeLinear ----------------------------------------------------------

TEST(QuantizeLinear, RoundsHalfToEvenAndSaturatesToUint8) {
  auto x = arr<float>({8}, {0, 1, 2.5f, 3.5f, -2.5f, 300, -300, 1.4999f});
  EXPECT_TRUE(allClose(ref1("QuantizeLinear", {x, scalar<float>(1), scalar<uint8_t>(10)}),
                       arr<uint8_t>({8}, {10, 11, 12, 14, 8, 255, 0, 11})));
}

TEST(QuantizeLinear, Int8ZeroPoint) {
  // x / 0.5 = 2.5, -1.5, 200, -200 -> 2, -2 (half to even), saturated; then + (-3).
  auto x = arr<float>({4}, {1.25f, -0.75f, 100, -100});
  EXPECT_TRUE(allClose(ref1("QuantizeLinear", {x, scalar<float>(0.5f), scalar<int8_t>(-3)}),
                       arr<int8_t>({4}, {-1, -5, 127, -128})));
}

TEST(QuantizeLinear, WithoutZeroPointGivesUint8) {
  EXPECT_TRUE(allClose(ref1("QuantizeLinear", {arr<float>({3}, {-1, 0.6f, 7.5f}), scalar<float>(1)}),
                       arr<uint8_t>({3}, {0, 1, 8})));
}

TEST(QuantizeLinear, PerAxis) {
  auto x = arr<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto s = arr<float>({3}, {1, 2, 4}), z = arr<uint8_t>({3}, {0, 1, 2});
  // Columns: x/1 + 0, x/2 + 1, x/4 + 2 (3/4 = 0.75 -> 1; 5/2 = 2.5 -> 2; 6/4 = 1.5 -> 2).
  auto want = arr<uint8_t>({2, 3}, {1, 2, 3, 4, 3, 4});
  EXPECT_TRUE(allClose(ref1("QuantizeLinear", {x, s, z}), want));
  EXPECT_TRUE(allClose(ref1("QuantizeLinear", {x, s, z}, attrs({{"axis", int64_t{-1}}})), want));
  // Along axis 0: rows scaled by 1 and 2.
  EXPECT_TRUE(allClose(ref1("QuantizeLinear", {x, arr<float>({2}, {1, 2}), arr<uint8_t>({2}, {0, 0})}, attrs({{"axis", int64_t{0}}})),
                       arr<uint8_t>({2, 3}, {1, 2, 3, 2, 2, 3})));
}

TEST(QuantizeLinear, Int32Input) {
  EXPECT_TRUE(allClose(ref1("QuantizeLinear", {arr<int32_t>({3}, {5, -7, 1000}), scalar<float>(2), scalar<int8_t>(0)}),
                       arr<int8_t>({3}, {2, -4, 127})));
}

TEST(QuantizeLinear, RejectsMismatchedParameters) {
  auto x = arr<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THROW(ref1("QuantizeLinear", {x, arr<float>({2}, {1, 2}), arr<uint8_t>({2}, {0, 0})}), Error);  // axis 1 has 3
  EXPECT_THROW(ref1("QuantizeLinear", {x, arr<float>({3}, {1, 2, 3}), arr<uint8_t>({2}, {0, 0})}), Error);
  EXPECT_THROW(ref1("QuantizeLinear", {x, arr<float>({3}, {1, 2, 3})}, attrs({{"axis", int64_t{2}}})), Error);
  EXPECT_THROW(ref1("QuantizeLinear", {x, scalar<float>(1), scalar<float>(0)}), Error);
}

// Opset 21: a scale of x's rank, one value per block of block_size along the axis (the last
// block may be short).
TEST(QuantizeLinear, BlockedAlongAnAxis) {
  auto x = arr<float>({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  auto s = arr<float>({2, 3}, {1, 2, 4, 1, 0.5f, 10}), z = arr<int8_t>({2, 3}, {0, 1, 2, 0, 0, -1});
  auto a = attrs({{"axis", int64_t{1}}, {"block_size", int64_t{2}}});
  // Row 0: [1 2]/1 + 0, [3 4]/2 + 1, [5]/4 + 2 (1.25 -> 1); row 1: [6 7]/1, [8 9]/0.5, [10]/10 - 1.
  auto q = ref1("QuantizeLinear", {x, s, z}, a);
  EXPECT_TRUE(allClose(q, arr<int8_t>({2, 5}, {1, 2, 3, 3, 3, 6, 7, 16, 18, 0})));
  EXPECT_TRUE(allClose(ref1("DequantizeLinear", {q, s, z}, a), arr<float>({2, 5}, {1, 2, 4, 4, 4, 6, 7, 8, 9, 10})));
  // The scale's blocked extent must be ceil(5 / 2) = 3.
  EXPECT_THROW(ref1("QuantizeLinear", {x, arr<float>({2, 2}, {1, 1, 1, 1})}, a), Error);
}

// Opset 21-25: 16-bit and 4-bit integers, output_dtype without a zero point, float8 targets.
TEST(QuantizeLinear, SixteenAndFourBitAndFloat8) {
  auto x = arr<float>({4}, {-70000, -3, 2.5f, 70000});
  EXPECT_TRUE(allClose(ref1("QuantizeLinear", {x, scalar<float>(1), scalar<int16_t>(1)}),
                       arr<int16_t>({4}, {-32768, -2, 3, 32767})));
  EXPECT_TRUE(allClose(ref1("QuantizeLinear", {x, scalar<float>(1)}, attrs({{"output_dtype", int64_t{4}}})),
                       arr<uint16_t>({4}, {0, 0, 2, 65535})));
  auto q4 = ref1("QuantizeLinear", {arr<float>({3}, {-20, 3, 20}), scalar<float>(2)},
                 attrs({{"output_dtype", static_cast<int64_t>(DataType::Int4)}}));
  ASSERT_EQ(q4.dtype(), DataType::Int4);
  EXPECT_TRUE(allClose(ref1("DequantizeLinear", {q4, scalar<float>(2)}), arr<float>({3}, {-16, 4, 14})));
  auto q8 = ref1("QuantizeLinear", {arr<float>({2}, {1, 1000}), scalar<float>(0.5f)},
                 attrs({{"output_dtype", static_cast<int64_t>(DataType::Float8E4M3FN)}}));
  EXPECT_TRUE(allClose(ref1("DequantizeLinear", {q8, scalar<float>(0.5f)}), arr<float>({2}, {1, 224})));  // 448 * 0.5
  // output_dtype and the zero point's type must agree.
  EXPECT_THROW(ref1("QuantizeLinear", {x, scalar<float>(1), scalar<int16_t>(0)}, attrs({{"output_dtype", int64_t{3}}})),
               Error);
}

TEST(DequantizeLinear, OutputDtypeAndSixteenBit) {
  // (0 - 32768) * 0.5 and (65535 - 32768) * 0.5 = 16383.5, which FLOAT16 rounds to 16384.
  auto y = ref1("DequantizeLinear", {arr<uint16_t>({2}, {0, 65535}), scalar<float>(0.5f), scalar<uint16_t>(32768)},
                attrs({{"output_dtype", int64_t{10}}}));  // FLOAT16
  ASSERT_EQ(y.dtype(), DataType::Float16);
  EXPECT_TRUE(allClose(y, arr<Half>({2}, {Half(-16384.0f), Half(16384.0f)})));
}

TEST(DequantizeLinear, PerTensor) {
  EXPECT_TRUE(allClose(ref1("DequantizeLinear", {arr<uint8_t>({4}, {0, 3, 128, 255}), scalar<float>(0.5f), scalar<uint8_t>(128)}),
                       arr<float>({4}, {-64, -62.5f, 0, 63.5f})));
  EXPECT_TRUE(allClose(ref1("DequantizeLinear", {arr<int8_t>({2}, {-128, 127}), scalar<float>(2)}), arr<float>({2}, {-256, 254})));
}

TEST(DequantizeLinear, PerAxisAndInt32) {
  auto x = arr<int8_t>({2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(allClose(ref1("DequantizeLinear", {x, arr<float>({2}, {1, 10}), arr<int8_t>({2}, {1, -1})}),
                       arr<float>({2, 2}, {0, 30, 2, 50})));
  EXPECT_TRUE(allClose(ref1("DequantizeLinear", {arr<int32_t>({2}, {-100000, 7}), scalar<float>(0.25f)}),
                       arr<float>({2}, {-25000, 1.75f})));
}

TEST(DequantizeLinear, InvertsQuantizeWithinHalfAStep) {
  auto x = randomArray(DataType::Float, {50}, 3, -2, 2);
  auto q = ref1("QuantizeLinear", {x, scalar<float>(0.02f), scalar<int8_t>(5)});
  auto back = ref1("DequantizeLinear", {q, scalar<float>(0.02f), scalar<int8_t>(5)});
  EXPECT_TRUE(allClose(back, x, 0, 0.01 + 1e-6));
}

TEST(DequantizeLinear, RejectsZeroPointOfAnotherType) {
  EXPECT_THROW(ref1("DequantizeLinear", {arr<uint8_t>({1}, {1}), scalar<float>(1), scalar<int8_t>(0)}), Error);
}

TEST(DynamicQuantizeLinear, MatchesTheSpecificationExample) {
  // Range [-3, 2]: scale 5/255, zero point rint(3 / scale) = 153.
  auto out = ref("DynamicQuantizeLinear", {arr<float>({6}, {0, 2, -3, -2.5f, 1.34f, 0.5f})}, {}, 3);
  EXPECT_TRUE(allClose(out[0], arr<uint8_t>({6}, {153, 255, 0, 26, 221, 179})));
  EXPECT_TRUE(allClose(out[1], scalar<float>(5.0f / 255.0f)));
  EXPECT_TRUE(allClose(out[2], scalar<uint8_t>(153)));
}

TEST(DynamicQuantizeLinear, RangeAlwaysIncludesZero) {
  auto out = ref("DynamicQuantizeLinear", {arr<float>({2}, {1, 4})}, {}, 3);
  EXPECT_TRUE(allClose(out[1], scalar<float>(4.0f / 255.0f)));
  EXPECT_TRUE(allClose(out[2], scalar<uint8_t>(0)));
  EXPECT_TRUE(allClose(out[0], arr<uint8_t>({2}, {64, 255})));  // 1 / (4/255) = 63.75
  auto zeros = ref("DynamicQuantizeLinear", {arr<float>({3}, {0, 0, 0})}, {}, 3);
  EXPECT_TRUE(allClose(zeros[0], arr<uint8_t>({3}, {0, 0, 0})));
  EXPECT_TRUE(allClose(zeros[1], scalar<float>(1)));
}

TEST(DynamicQuantizeLinear, RejectsDouble) {
  EXPECT_THROW(ref("DynamicQuantizeLinear", {arr<double>({1}, {1})}, {}, 3), Error);
}

// ---- MatMulInteger / QLinearMatMul --------------------------------------------------------------

// (A - azp[m]) @ (B - bzp[n]) for 2-D operands.
std::vector<int64_t> naiveMatmul(const NDArray& a, const NDArray& b, const std::vector<double>& azp,
                                 const std::vector<double>& bzp) {
  auto av = toDoubles(a), bv = toDoubles(b);
  int64_t M = a.dim(0), K = a.dim(1), N = b.dim(1);
  std::vector<int64_t> out(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += (av[m * K + k] - azp[azp.size() == 1 ? 0 : m]) * (bv[k * N + n] - bzp[bzp.size() == 1 ? 0 : n]);
      out[m * N + n] = static_cast<int64_t>(s);
    }
  return out;
}

TEST(MatMulInteger, ScalarZeroPoints) {
  auto a = arr<uint8_t>({4, 3}, {11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0});
  auto b = arr<uint8_t>({3, 2}, {1, 4, 2, 5, 3, 6});
  EXPECT_TRUE(allClose(ref1("MatMulInteger", {a, b, arr<uint8_t>({1}, {12}), arr<uint8_t>({1}, {0})}),
                       arr<int32_t>({4, 2}, {-38, -83, -44, -98, -50, -113, -56, -128})));
  // No zero points: plain integer product.
  EXPECT_TRUE(allClose(ref1("MatMulInteger", {arr<uint8_t>({1, 2}, {200, 100}), arr<uint8_t>({2, 1}, {255, 2})}),
                       arr<int32_t>({1, 1}, {51200})));
}

TEST(MatMulInteger, PerRowAndPerColumnZeroPoints) {
  auto a = randomArray(DataType::Int8, {3, 5}, 1, -128, 127);
  auto b = randomArray(DataType::UInt8, {5, 4}, 2, 0, 255);
  auto azp = arr<int8_t>({3}, {-3, 0, 7}), bzp = arr<uint8_t>({4}, {1, 128, 250, 0});
  auto want = naiveMatmul(a, b, toDoubles(azp), toDoubles(bzp));
  NDArray w(DataType::Int32, {3, 4});
  for (int64_t i = 0; i < 12; ++i) w.data<int32_t>()[i] = static_cast<int32_t>(want[i]);
  EXPECT_TRUE(allClose(ref1("MatMulInteger", {a, b, azp, bzp}), w));
}

TEST(MatMulInteger, BatchesAndVectors) {
  auto a = randomArray(DataType::UInt8, {2, 2, 3}, 4, 0, 255);
  auto b = randomArray(DataType::UInt8, {3, 2}, 5, 0, 255);
  auto y = ref1("MatMulInteger", {a, b, scalar<uint8_t>(100), scalar<uint8_t>(3)});
  ASSERT_EQ(y.shape(), Shape({2, 2, 2}));
  for (int64_t i = 0; i < 2; ++i) {
    NDArray ai(DataType::UInt8, {2, 3});
    std::copy_n(a.data<uint8_t>() + i * 6, 6, ai.data<uint8_t>());
    auto want = naiveMatmul(ai, b, {100}, {3});
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(y.data<int32_t>()[i * 4 + j], want[j]);
  }
  // A 1-D left operand is a row vector, and its dimension is dropped.
  auto v = ref1("MatMulInteger", {arr<uint8_t>({3}, {1, 2, 3}), arr<uint8_t>({3, 1}, {1, 1, 1})});
  EXPECT_TRUE(allClose(v, arr<int32_t>({1}, {6})));
}

TEST(MatMulInteger, RejectsBadShapes) {
  EXPECT_THROW(ref1("MatMulInteger", {arr<uint8_t>({1, 2}, {1, 2}), arr<uint8_t>({3, 1}, {1, 2, 3})}), Error);
  EXPECT_THROW(ref1("MatMulInteger", {arr<uint8_t>({2, 2}, {1, 2, 3, 4}), arr<uint8_t>({2, 1}, {1, 2}), arr<uint8_t>({3}, {1, 2, 3})}),
               Error);
  EXPECT_THROW(ref1("MatMulInteger", {arr<float>({1, 1}, {1}), arr<uint8_t>({1, 1}, {1})}), Error);
}

TEST(QLinearMatMul, HandComputed) {
  // acc = 2 * 4 = 8; multiplier 0.5 * 0.25 / 0.125 = 1; y = 8 + 1.
  auto y = ref1("QLinearMatMul", {arr<uint8_t>({1, 1}, {2}), scalar<float>(0.5f), scalar<uint8_t>(0), arr<uint8_t>({1, 1}, {4}),
                                  scalar<float>(0.25f), scalar<uint8_t>(0), scalar<float>(0.125f), scalar<uint8_t>(1)});
  EXPECT_TRUE(allClose(y, arr<uint8_t>({1, 1}, {9})));
  // Saturation, and int8 output from the output zero point's type.
  auto s = ref1("QLinearMatMul", {arr<uint8_t>({1, 1}, {200}), scalar<float>(1), scalar<uint8_t>(0), arr<uint8_t>({1, 1}, {200}),
                                  scalar<float>(1), scalar<uint8_t>(0), scalar<float>(1), scalar<int8_t>(0)});
  EXPECT_TRUE(allClose(s, arr<int8_t>({1, 1}, {127})));
}

TEST(QLinearMatMul, MatchesNaiveRequantization) {
  auto a = randomArray(DataType::UInt8, {3, 4}, 7, 0, 255);
  auto b = randomArray(DataType::Int8, {4, 2}, 8, -128, 127);
  float as = 0.02f, ys = 0.5f;
  auto bs = arr<float>({2}, {0.01f, 0.03f});
  auto acc = naiveMatmul(a, b, {120}, {-2});
  auto y = ref1("QLinearMatMul", {a, scalar<float>(as), scalar<uint8_t>(120), b, bs, scalar<int8_t>(-2), scalar<float>(ys),
                                  scalar<uint8_t>(128)});
  ASSERT_EQ(y.shape(), Shape({3, 2}));
  for (int64_t i = 0; i < 6; ++i) {
    float mult = as * bs.data<float>()[i % 2] / ys;
    double v = std::nearbyint(static_cast<double>(acc[i]) * mult) + 128;
    EXPECT_EQ(y.data<uint8_t>()[i], static_cast<uint8_t>(std::clamp(v, 0.0, 255.0))) << i;
  }
}

TEST(QLinearMatMul, RejectsScaleOfWrongLength) {
  auto a = arr<uint8_t>({2, 2}, {1, 2, 3, 4});
  EXPECT_THROW(ref1("QLinearMatMul", {a, scalar<float>(1), scalar<uint8_t>(0), a, arr<float>({3}, {1, 1, 1}), scalar<uint8_t>(0),
                                      scalar<float>(1), scalar<uint8_t>(0)}),
               Error);
}

// ---- ConvInteger / QLinearConv ------------------------------------------------------------------

struct Conv2d {
  int64_t strideH = 1, strideW = 1, dilH = 1, dilW = 1, padT = 0, padL = 0, padB = 0, padR = 0, group = 1;
};

// Naive 2-D convolution of (x - xzp) with (w - wzp[m]).
std::vector<int64_t> naiveConv(const NDArray& x, const NDArray& w, double xzp, const std::vector<double>& wzp, const Conv2d& p,
                               Shape* outShape) {
  auto xv = toDoubles(x), wv = toDoubles(w);
  int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(0), kh = w.dim(2), kw = w.dim(3);
  int64_t cg = C / p.group, mg = M / p.group;
  int64_t OH = (H + p.padT + p.padB - ((kh - 1) * p.dilH + 1)) / p.strideH + 1;
  int64_t OW = (W + p.padL + p.padR - ((kw - 1) * p.dilW + 1)) / p.strideW + 1;
  *outShape = {N, M, OH, OW};
  std::vector<int64_t> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = 0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t ih = oh * p.strideH - p.padT + i * p.dilH, iw = ow * p.strideW - p.padL + j * p.dilW;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                int64_t ic = (m / mg) * cg + c;
                s += (xv[((n * C + ic) * H + ih) * W + iw] - xzp) *
                     (wv[((m * cg + c) * kh + i) * kw + j] - wzp[wzp.size() == 1 ? 0 : m]);
              }
          out.push_back(static_cast<int64_t>(s));
        }
  return out;
}

NDArray int32Array(const std::vector<int64_t>& v, const Shape& s) {
  NDArray a(DataType::Int32, s);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
  return a;
}

TEST(ConvInteger, PaddingHandComputed) {
  // x - 1 = [[1,2,3],[4,5,6],[7,8,9]], a 2x2 all-ones kernel, one pixel of padding all round.
  auto x = arr<uint8_t>({1, 1, 3, 3}, {2, 3, 4, 5, 6, 7, 8, 9, 10});
  auto w = arr<uint8_t>({1, 1, 2, 2}, {1, 1, 1, 1});
  auto y = ref1("ConvInteger", {x, w, scalar<uint8_t>(1)}, attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  EXPECT_TRUE(allClose(y, arr<int32_t>({1, 1, 4, 4}, {1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9})));
}

TEST(ConvInteger, OneDimensional) {
  // x = [1, 2, 3, 4], w = [1, -1] (int8), stride 2: [1 - 2, 3 - 4].
  auto y = ref1("ConvInteger", {arr<int8_t>({1, 1, 4}, {1, 2, 3, 4}), arr<int8_t>({1, 1, 2}, {1, -1})},
                attrs({{"strides", std::vector<int64_t>{2}}}));
  EXPECT_TRUE(allClose(y, arr<int32_t>({1, 1, 2}, {-1, -1})));
}

TEST(ConvInteger, StridesDilationsGroupsAndPerChannelZeroPoints) {
  auto x = randomArray(DataType::UInt8, {2, 4, 7, 6}, 1, 0, 255);
  auto w = randomArray(DataType::Int8, {6, 2, 3, 2}, 2, -128, 127);
  auto wzp = arr<int8_t>({6}, {0, 1, -1, 5, -7, 2});
  Conv2d p{2, 1, 1, 2, 1, 0, 2, 1, 2};
  Shape s;
  auto want = naiveConv(x, w, 9, toDoubles(wzp), p, &s);
  auto y = ref1("ConvInteger", {x, w, scalar<uint8_t>(9), wzp},
                attrs({{"strides", std::vector<int64_t>{2, 1}}, {"dilations", std::vector<int64_t>{1, 2}},
                       {"pads", std::vector<int64_t>{1, 0, 2, 1}}, {"group", int64_t{2}}, {"kernel_shape", std::vector<int64_t>{3, 2}}}));
  EXPECT_TRUE(allClose(y, int32Array(want, s)));
}

TEST(ConvInteger, AutoPadSame) {
  auto x = randomArray(DataType::UInt8, {1, 1, 5, 5}, 3, 0, 255);
  auto w = randomArray(DataType::UInt8, {1, 1, 2, 2}, 4, 0, 255);
  // Total padding 1 per axis: SAME_UPPER puts it at the end, SAME_LOWER at the start.
  Shape s;
  auto upper = naiveConv(x, w, 0, {0}, Conv2d{1, 1, 1, 1, 0, 0, 1, 1, 1}, &s);
  EXPECT_TRUE(allClose(ref1("ConvInteger", {x, w}, attrs({{"auto_pad", std::string("SAME_UPPER")}})), int32Array(upper, s)));
  auto lower = naiveConv(x, w, 0, {0}, Conv2d{1, 1, 1, 1, 1, 1, 0, 0, 1}, &s);
  EXPECT_TRUE(allClose(ref1("ConvInteger", {x, w}, attrs({{"auto_pad", std::string("SAME_LOWER")}})), int32Array(lower, s)));
  auto valid = naiveConv(x, w, 0, {0}, Conv2d{}, &s);
  EXPECT_TRUE(allClose(ref1("ConvInteger", {x, w}, attrs({{"auto_pad", std::string("VALID")}})), int32Array(valid, s)));
}

TEST(ConvInteger, RejectsBadGeometry) {
  auto x = arr<uint8_t>({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_THROW(ref1("ConvInteger", {x, arr<uint8_t>({1, 1, 3, 3}, std::vector<uint8_t>(9, 1))}), Error);  // channels
  EXPECT_THROW(ref1("ConvInteger", {x, arr<uint8_t>({1, 2, 3, 3}, std::vector<uint8_t>(18, 1))}), Error);  // kernel > input
  EXPECT_THROW(ref1("ConvInteger", {x, arr<uint8_t>({1, 2, 1, 1}, {1, 1})}, attrs({{"pads", std::vector<int64_t>{1, 1}}})), Error);
  EXPECT_THROW(ref1("ConvInteger", {x, arr<uint8_t>({1, 2, 1, 1}, {1, 1})}, attrs({{"strides", std::vector<int64_t>{0, 1}}})), Error);
  EXPECT_THROW(ref1("ConvInteger", {x, arr<uint8_t>({1, 2, 2, 1}, {1, 1, 1, 1})}, attrs({{"dilations", std::vector<int64_t>{INT64_MAX, 1}}})),
               Error);
  EXPECT_THROW(ref1("ConvInteger", {x, arr<uint8_t>({1, 2, 1, 1}, {1, 1}), arr<uint8_t>({2}, {1, 1})}), Error);  // x_zero_point
}

TEST(QLinearConv, MatchesNaiveRequantizationWithBias) {
  auto x = randomArray(DataType::UInt8, {1, 2, 5, 5}, 5, 0, 255);
  auto w = randomArray(DataType::UInt8, {3, 2, 3, 3}, 6, 0, 255);
  auto ws = arr<float>({3}, {0.002f, 0.004f, 0.001f}), wzp = arr<uint8_t>({3}, {128, 120, 130});
  auto bias = arr<int32_t>({3}, {1000, -2000, 0});
  float xs = 0.01f, ys = 0.05f;
  Shape s;
  auto acc = naiveConv(x, w, 100, toDoubles(wzp), Conv2d{1, 1, 1, 1, 1, 1, 1, 1, 1}, &s);
  auto y = ref1("QLinearConv", {x, scalar<float>(xs), scalar<uint8_t>(100), w, ws, wzp, scalar<float>(ys), scalar<uint8_t>(60), bias},
                attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  ASSERT_EQ(y.shape(), s);
  int64_t plane = s[2] * s[3];
  for (int64_t i = 0; i < y.numel(); ++i) {
    int64_t m = i / plane;
    float mult = xs * ws.data<float>()[m] / ys;
    double v = std::nearbyint(static_cast<double>(acc[i] + bias.data<int32_t>()[m]) * mult) + 60;
    EXPECT_EQ(y.data<uint8_t>()[i], static_cast<uint8_t>(std::clamp(v, 0.0, 255.0))) << i;
  }
}

TEST(QLinearConv, Int8Output) {
  // One pixel: (10 - 0) * (3 - 1) = 20; times 1 * 1 / 4 = 5; plus -10.
  auto y = ref1("QLinearConv", {arr<int8_t>({1, 1, 1, 1}, {10}), scalar<float>(1), scalar<int8_t>(0), arr<int8_t>({1, 1, 1, 1}, {3}),
                                scalar<float>(1), scalar<int8_t>(1), scalar<float>(4), scalar<int8_t>(-10)});
  EXPECT_TRUE(allClose(y, arr<int8_t>({1, 1, 1, 1}, {-5})));
}

TEST(QLinearConv, RejectsPerChannelXScale) {
  auto x = arr<uint8_t>({1, 2, 1, 1}, {1, 2});
  auto w = arr<uint8_t>({1, 2, 1, 1}, {1, 2});
  EXPECT_THROW(ref1("QLinearConv", {x, arr<float>({2}, {1, 1}), scalar<uint8_t>(0), w, scalar<float>(1), scalar<uint8_t>(0),
                                    scalar<float>(1), scalar<uint8_t>(0)}),
               Error);
  EXPECT_THROW(ref1("QLinearConv", {x, scalar<float>(1), scalar<uint8_t>(0), w, scalar<float>(1), scalar<uint8_t>(0),
                                    scalar<float>(1), scalar<uint8_t>(0), arr<int32_t>({2}, {1, 2})}),
               Error);  // bias of the wrong length
}

}  // namespace
}  // namespace graft::testing
