// Tests of src/ops/signal.cpp: DFT, STFT, the window generators and MelWeightMatrix, against
// hand-computed transforms and a naive DFT written here with std::polar.
#include <cmath>
#include <complex>
#include <numbers>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

using Cx = std::complex<double>;

NDArray ref1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return runReference(OpCase{type, std::move(in), std::move(a), 1, ""}).at(0);
}

// sum_t x[t] e^{-+2 pi i k t / n}, over the first min(len, n) samples.
std::vector<Cx> naiveDft(const std::vector<Cx>& x, int64_t n, bool inverse) {
  std::vector<Cx> out(n);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t t = 0; t < std::min<int64_t>(n, x.size()); ++t)
      out[k] += x[t] * std::polar(1.0, (inverse ? 2 : -2) * std::numbers::pi * double(k) * double(t) / double(n));
    if (inverse) out[k] /= double(n);
  }
  return out;
}

// [1, n, 2] float array from complex values.
NDArray complexArray(const std::vector<Cx>& v, int64_t keep = -1) {
  int64_t n = keep < 0 ? static_cast<int64_t>(v.size()) : keep;
  NDArray a(DataType::Float, {1, n, 2});
  for (int64_t i = 0; i < n; ++i) {
    a.data<float>()[2 * i] = static_cast<float>(v[i].real());
    a.data<float>()[2 * i + 1] = static_cast<float>(v[i].imag());
  }
  return a;
}

// ---- DFT ----------------------------------------------------------------------------------------

TEST(DFT, RealInputHandComputed) {
  // DFT of [1, 2, 3, 4] is [10, -2+2i, -2, -2-2i].
  auto x = arr<float>({1, 4, 1}, {1, 2, 3, 4});
  EXPECT_TRUE(allClose(ref1("DFT", {x}), arr<float>({1, 4, 2}, {10, 0, -2, 2, -2, 0, -2, -2}), 1e-6, 1e-5));
  // One-sided: the first n/2 + 1 bins.
  EXPECT_TRUE(allClose(ref1("DFT", {x}, attrs({{"onesided", int64_t{1}}})), arr<float>({1, 3, 2}, {10, 0, -2, 2, -2, 0}), 1e-6, 1e-5));
}

// Opset 20: the axis is input 2 (an empty dft_length before it).
TEST(DFT, AxisAsInput) {
  // [1, 2, 2, 1]: a 2x2 signal; along axis 2 each row [a, b] becomes [a + b, a - b].
  auto x = arr<float>({1, 2, 2, 1}, {1, 2, 3, 5});
  EXPECT_TRUE(allClose(ref1("DFT", {x, NDArray{}, scalar<int64_t>(2)}),
                       arr<float>({1, 2, 2, 2}, {3, 0, -1, 0, 8, 0, -2, 0}), 1e-6, 1e-5));
  EXPECT_TRUE(
      allClose(ref1("DFT", {x, NDArray{}, scalar<int64_t>(-2)}), ref1("DFT", {x, NDArray{}, scalar<int64_t>(2)})));
  EXPECT_THROW(ref1("DFT", {x, NDArray{}, scalar<int64_t>(3)}), Error);  // the last axis holds re/im
}

TEST(DFT, ComplexInputAndInverseRoundTrip) {
  std::vector<Cx> x = {{1, -1}, {0.5, 2}, {-3, 0.25}, {2, 2}, {0, -1}};
  auto X = ref1("DFT", {complexArray(x)});
  EXPECT_TRUE(allClose(X, complexArray(naiveDft(x, 5, false)), 1e-5, 1e-5));
  auto back = ref1("DFT", {X}, attrs({{"inverse", int64_t{1}}}));
  EXPECT_TRUE(allClose(back, complexArray(x), 1e-5, 1e-5));
}

TEST(DFT, DftLengthPadsOrTruncates) {
  // [1, 2] padded to 4: [3, 1-2i, -1, 1+2i]; [1, 2, 3, 4] cut to 2: [3, -1].
  EXPECT_TRUE(allClose(ref1("DFT", {arr<float>({1, 2, 1}, {1, 2}), scalar<int64_t>(4)}),
                       arr<float>({1, 4, 2}, {3, 0, 1, -2, -1, 0, 1, 2}), 1e-6, 1e-5));
  EXPECT_TRUE(allClose(ref1("DFT", {arr<float>({1, 4, 1}, {1, 2, 3, 4}), arr<int32_t>({1}, {2})}),
                       arr<float>({1, 2, 2}, {3, 0, -1, 0}), 1e-6, 1e-5));
}

TEST(DFT, AlongEachSignalAxis) {
  // A [1, 2, 3, 1] real signal: along axis 1 (length 2) and axis 2 (length 3, also written -2).
  auto x = arr<float>({1, 2, 3, 1}, {1, 2, 3, 4, 5, 6});
  // Axis 1: pairs (1,4), (2,5), (3,6) -> sums and differences.
  EXPECT_TRUE(allClose(ref1("DFT", {x}, attrs({{"axis", int64_t{1}}})),
                       arr<float>({1, 2, 3, 2}, {5, 0, 7, 0, 9, 0, -3, 0, -3, 0, -3, 0}), 1e-6, 1e-5));
  std::vector<double> want;
  for (int r = 0; r < 2; ++r) {
    auto row = naiveDft({double(3 * r + 1), double(3 * r + 2), double(3 * r + 3)}, 3, false);
    for (const auto& v : row) want.insert(want.end(), {v.real(), v.imag()});
  }
  NDArray w(DataType::Float, {1, 2, 3, 2});
  for (size_t i = 0; i < want.size(); ++i) w.data<float>()[i] = static_cast<float>(want[i]);
  EXPECT_TRUE(allClose(ref1("DFT", {x}, attrs({{"axis", int64_t{2}}})), w, 1e-5, 1e-5));
  EXPECT_TRUE(allClose(ref1("DFT", {x}, attrs({{"axis", int64_t{-2}}})), w, 1e-5, 1e-5));
}

TEST(DFT, InverseOneSidedIsIrfft) {
  // The half spectrum of [1, 2, 3, 4] gives back the real signal, with the default length 2 * (3 - 1).
  auto half = arr<float>({1, 3, 2}, {10, 0, -2, 2, -2, 0});
  auto inv = attrs({{"inverse", int64_t{1}}, {"onesided", int64_t{1}}});
  EXPECT_TRUE(allClose(ref1("DFT", {half}, inv), arr<float>({1, 4, 1}, {1, 2, 3, 4}), 1e-6, 1e-5));
  // An odd length needs dft_length: 5 samples from 3 bins.
  std::vector<Cx> sig = {1, -2, 0.5, 4, 3};
  auto spec = naiveDft(sig, 5, false);
  EXPECT_TRUE(allClose(ref1("DFT", {complexArray(spec, 3), scalar<int64_t>(5)}, inv), arr<float>({1, 5, 1}, {1, -2, 0.5f, 4, 3}),
                       1e-5, 1e-5));
}

TEST(DFT, DoublePrecision) {
  auto X = ref1("DFT", {arr<double>({1, 3, 1}, {1, 0, 0})});
  EXPECT_TRUE(allClose(X, arr<double>({1, 3, 2}, {1, 0, 1, 0, 1, 0}), 1e-12, 1e-12));
}

TEST(DFT, RejectsBadInputs) {
  auto x = arr<float>({1, 4, 1}, {1, 2, 3, 4});
  EXPECT_THROW(ref1("DFT", {arr<float>({1, 2, 3}, {1, 2, 3, 4, 5, 6})}), Error);               // last dim 3
  EXPECT_THROW(ref1("DFT", {x}, attrs({{"axis", int64_t{2}}})), Error);                          // the complex axis
  EXPECT_THROW(ref1("DFT", {x}, attrs({{"axis", int64_t{-1}}})), Error);
  EXPECT_THROW(ref1("DFT", {x, scalar<int64_t>(0)}), Error);                                      // empty transform
  EXPECT_THROW(ref1("DFT", {arr<float>({1, 2, 2}, {1, 2, 3, 4})}, attrs({{"onesided", int64_t{1}}})), Error);  // complex RFFT
}

// ---- STFT ---------------------------------------------------------------------------------------

TEST(STFT, RectangularFramesHandComputed) {
  // Frames [0,1,2,3] and [4,5,6,7]: one-sided DFTs [6, -2+2i, -2] and [22, -2+2i, -2].
  NDArray x(DataType::Float, {1, 8, 1});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = static_cast<float>(i);
  auto y = ref1("STFT", {x, scalar<int64_t>(4), NDArray{}, scalar<int64_t>(4)});
  EXPECT_TRUE(allClose(y, arr<float>({1, 2, 3, 2}, {6, 0, -2, 2, -2, 0, 22, 0, -2, 2, -2, 0}), 1e-6, 1e-5));
}

TEST(STFT, WindowedComplexFramesMatchNaiveDft) {
  const int64_t L = 11, step = 3, fl = 4;
  auto sig = randomArray(DataType::Float, {2, L, 2}, 9);
  auto win = arr<float>({fl}, {0.1f, 0.7f, 1.0f, 0.4f});
  auto y = ref1("STFT", {sig, scalar<int32_t>(step), win}, attrs({{"onesided", int64_t{0}}}));
  const int64_t frames = (L - fl) / step + 1;
  ASSERT_EQ(y.shape(), Shape({2, frames, fl, 2}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t f = 0; f < frames; ++f) {
      std::vector<Cx> frame;
      for (int64_t t = 0; t < fl; ++t) {
        const float* e = sig.data<float>() + (b * L + f * step + t) * 2;
        frame.push_back(Cx(e[0], e[1]) * double(win.data<float>()[t]));
      }
      auto spec = naiveDft(frame, fl, false);
      for (int64_t k = 0; k < fl; ++k) {
        const float* g = y.data<float>() + ((b * frames + f) * fl + k) * 2;
        EXPECT_NEAR(g[0], spec[k].real(), 1e-5);
        EXPECT_NEAR(g[1], spec[k].imag(), 1e-5);
      }
    }
}

TEST(STFT, FrameLengthDefaultsToTheSignal) {
  auto y = ref1("STFT", {arr<float>({1, 4, 1}, {1, 2, 3, 4}), scalar<int64_t>(1)});
  EXPECT_TRUE(allClose(y, arr<float>({1, 1, 3, 2}, {10, 0, -2, 2, -2, 0}), 1e-6, 1e-5));
}

TEST(STFT, RejectsBadInputs) {
  auto x = arr<float>({1, 4, 1}, {1, 2, 3, 4});
  EXPECT_THROW(ref1("STFT", {x, scalar<int64_t>(0)}), Error);
  EXPECT_THROW(ref1("STFT", {x, scalar<int64_t>(1), arr<float>({3}, {1, 1, 1}), scalar<int64_t>(2)}), Error);
  EXPECT_THROW(ref1("STFT", {x, scalar<int64_t>(1), NDArray{}, scalar<int64_t>(5)}), Error);  // longer than the signal
  EXPECT_THROW(ref1("STFT", {arr<float>({1, 2, 2}, {1, 2, 3, 4}), scalar<int64_t>(1)}), Error);  // complex, onesided
  EXPECT_THROW(ref1("STFT", {arr<float>({4, 1}, {1, 2, 3, 4}), scalar<int64_t>(1)}), Error);
}

// ---- windows ------------------------------------------------------------------------------------

TEST(HannWindow, PeriodicAndSymmetric) {
  EXPECT_TRUE(allClose(ref1("HannWindow", {scalar<int64_t>(4)}), arr<float>({4}, {0, 0.5f, 1, 0.5f}), 1e-6, 1e-7));
  EXPECT_TRUE(allClose(ref1("HannWindow", {scalar<int32_t>(5)}, attrs({{"periodic", int64_t{0}}})),
                       arr<float>({5}, {0, 0.5f, 1, 0.5f, 0}), 1e-6, 1e-7));
}

TEST(HannWindow, EdgeSizesAndOutputType) {
  EXPECT_TRUE(allClose(ref1("HannWindow", {scalar<int64_t>(0)}), arr<float>({0}, {})));
  EXPECT_TRUE(allClose(ref1("HannWindow", {scalar<int64_t>(1)}, attrs({{"periodic", int64_t{0}}})), arr<float>({1}, {1})));
  EXPECT_TRUE(allClose(ref1("HannWindow", {scalar<int64_t>(2)}, attrs({{"output_datatype", int64_t{11}}})),
                       arr<double>({2}, {0, 1}), 1e-12, 1e-12));
  EXPECT_THROW(ref1("HannWindow", {scalar<int64_t>(-1)}), Error);
  EXPECT_THROW(ref1("HannWindow", {arr<int64_t>({2}, {1, 2})}), Error);
  EXPECT_THROW(ref1("HannWindow", {scalar<int64_t>(2)}, attrs({{"output_datatype", int64_t{8}}})), Error);  // STRING
}

TEST(HammingWindow, UsesOnnxCoefficients) {
  // 25/46 - 21/46 cos(2 pi n / 4).
  EXPECT_TRUE(allClose(ref1("HammingWindow", {scalar<int64_t>(4)}), arr<float>({4}, {4.f / 46, 25.f / 46, 1, 25.f / 46}), 1e-6, 1e-7));
  EXPECT_TRUE(allClose(ref1("HammingWindow", {scalar<int64_t>(3)}, attrs({{"periodic", int64_t{0}}})),
                       arr<float>({3}, {4.f / 46, 1, 4.f / 46}), 1e-6, 1e-7));
}

TEST(BlackmanWindow, PeriodicAndSymmetric) {
  EXPECT_TRUE(allClose(ref1("BlackmanWindow", {scalar<int64_t>(4)}), arr<float>({4}, {0, 0.34f, 1, 0.34f}), 1e-6, 1e-7));
  EXPECT_TRUE(allClose(ref1("BlackmanWindow", {scalar<int64_t>(3)}, attrs({{"periodic", int64_t{0}}})), arr<float>({3}, {0, 1, 0}),
                       1e-6, 1e-7));
}

// ---- MelWeightMatrix ----------------------------------------------------------------------------

TEST(MelWeightMatrix, MatchesOnnxReference) {
  // Values of onnx.reference's MelWeightMatrix for (4, 32, 16000, 100, 8000).
  std::vector<float> want(17 * 4, 0.0f);
  auto set = [&](int bin, int mel, float v) { want[bin * 4 + mel] = v; };
  set(1, 0, 1);
  set(2, 1, 1);
  set(3, 2, 1);
  set(4, 2, 2.f / 3);
  set(4, 3, 1.f / 3);
  set(5, 2, 1.f / 3);
  set(5, 3, 2.f / 3);
  set(6, 3, 1);
  set(7, 3, 0.75f);
  set(8, 3, 0.5f);
  set(9, 3, 0.25f);
  auto y = ref1("MelWeightMatrix", {scalar<int64_t>(4), scalar<int64_t>(32), scalar<int64_t>(16000), scalar<float>(100),
                                    scalar<float>(8000)});
  EXPECT_TRUE(allClose(y, arr<float>({17, 4}, want)));
}

TEST(MelWeightMatrix, OutputTypeAndErrors) {
  auto y = ref1("MelWeightMatrix", {scalar<int32_t>(8), scalar<int32_t>(16), scalar<int32_t>(8192), scalar<float>(0), scalar<float>(4096)},
                attrs({{"output_datatype", int64_t{11}}}));
  EXPECT_EQ(y.dtype(), DataType::Double);
  EXPECT_EQ(y.shape(), Shape({9, 8}));
  auto mel = [&](float lo, float hi) {
    return ref1("MelWeightMatrix", {scalar<int64_t>(4), scalar<int64_t>(32), scalar<int64_t>(16000), scalar<float>(lo), scalar<float>(hi)});
  };
  EXPECT_THROW(mel(100, 9000), Error);  // above Nyquist
  EXPECT_THROW(mel(500, 400), Error);
  EXPECT_THROW(mel(-1, 400), Error);
  EXPECT_THROW(ref1("MelWeightMatrix", {scalar<int64_t>(4), scalar<int64_t>(INT64_MAX), scalar<int64_t>(16000), scalar<float>(0),
                                        scalar<float>(10)}),
               Error);
  EXPECT_THROW(ref1("MelWeightMatrix", {scalar<int64_t>(0), scalar<int64_t>(32), scalar<int64_t>(16000), scalar<float>(0), scalar<float>(10)}),
               Error);
}

}  // namespace
}  // namespace graft::testing
