// Signal processing: DFT, STFT, the window generators HannWindow, HammingWindow and
// BlackmanWindow, and MelWeightMatrix (ai.onnx opset 17).
//
// Transforms are direct O(n^2) sums in double with twiddle angles reduced modulo n, which keeps
// them exact-ish for any length (not just powers of two) and obviously correct.
#include <cmath>
#include <complex>
#include <numbers>

#include "ops/cast_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

using Complex = std::complex<double>;

// out[k] = scale * sum_t in[t] * exp(sign * 2 pi i k t / n) for k < out.size(), over the
// in.size() <= n given samples (the rest of the length-n signal being zero).
void dft(const std::vector<Complex>& in, int64_t n, bool inverse, std::vector<Complex>& out) {
  const double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / static_cast<double>(n) : 1.0;
  const auto len = static_cast<int64_t>(in.size());
  for (size_t k = 0; k < out.size(); ++k) {
    Complex acc = 0;
    for (int64_t t = 0; t < len; ++t) {
      int64_t r = (static_cast<int64_t>(k) * t) % n;
      double angle = sign * 2.0 * std::numbers::pi * static_cast<double>(r) / static_cast<double>(n);
      acc += in[t] * Complex(std::cos(angle), std::sin(angle));
    }
    out[k] = acc * scale;
  }
}

// The full length-n spectrum whose first n/2 + 1 bins are `half` (zero-padded or truncated), by
// Hermitian symmetry; the imaginary parts of bin 0 and (n even) bin n/2 are dropped, as a real
// signal's spectrum has none there.
std::vector<Complex> hermitianExtend(const std::vector<Complex>& half, int64_t n) {
  std::vector<Complex> full(static_cast<size_t>(n));
  auto bin = [&](int64_t k) { return k < static_cast<int64_t>(half.size()) ? half[k] : Complex(0); };
  for (int64_t k = 0; k < n; ++k) full[k] = k <= n / 2 ? bin(k) : std::conj(bin(n - k));
  full[0] = full[0].real();
  if (n % 2 == 0) full[n / 2] = full[n / 2].real();
  return full;
}

int64_t scalarInt(const NDArray& a, const std::string& what, const char* name) {
  GRAFT_CHECK(a.numel() == 1 && a.rank() <= 1, "{}: {} must be a scalar, got shape {}", what, name,
              shapeToString(a.shape()));
  return toInt64Vector(a)[0];
}

double scalarDouble(const NDArray& a, const std::string& what, const char* name) {
  GRAFT_CHECK(a.numel() == 1 && a.rank() <= 1, "{}: {} must be a scalar, got shape {}", what, name,
              shapeToString(a.shape()));
  double v = 0;
  dispatch<kNumeric>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(static_cast<ComputeType<T>>(a.data<T>()[0]));
  });
  return v;
}


// Writes `v` into a new array of type dt (saturating for integer types).
NDArray fromDoubles(DataType dt, Shape shape, const std::vector<double>& v, const std::string& what) {
  NDArray out = NDArray::uninitialized(dt, std::move(shape));
  dispatch<kNumeric>(dt, what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < out.numel(); ++i) out.data<T>()[i] = convertElement<T>(v[i]);
  });
  return out;
}

KernelFn dftKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axisAttr = n.attrInt("axis", 1);
  bool inverse = n.attrInt("inverse", 0) != 0, onesided = n.attrInt("onesided", 0) != 0;
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const int64_t r = x.rank();
    GRAFT_CHECK(r >= 3 && (x.dim(-1) == 1 || x.dim(-1) == 2),
                "{}: input must be [batch, signal dims..., 1 or 2], got shape {}", what, shapeToString(x.shape()));
    // Opset 20 made the axis an input (the version converter moves older models' attribute there).
    int64_t axisGiven = k.hasInput(2) ? scalarInt(k.input(2), what, "axis") : axisAttr;
    int64_t axis = axisGiven < 0 ? axisGiven + r : axisGiven;
    GRAFT_CHECK(axis >= 0 && axis <= r - 2, "{}: axis {} is outside [-{}, -2] and [0, {}] for an input of rank {}",
                what, axisGiven, r, r - 2, r - 2);
    const bool complexIn = x.dim(-1) == 2;
    const int64_t len = x.dim(axis);
    int64_t length = inverse && onesided ? 2 * (len - 1) : len;
    if (k.hasInput(1)) length = scalarInt(k.input(1), what, "dft_length");
    // The direct sum would take years beyond 2^31 points; the bound also keeps k * t in int64.
    GRAFT_CHECK(length >= 1 && length <= (int64_t{1} << 31), "{}: the DFT length must be in [1, 2^31], got {}", what,
                length);
    GRAFT_CHECK(!(onesided && !inverse && complexIn), "{}: a one-sided forward DFT needs a real input ([..., 1]), got shape {}",
                what, shapeToString(x.shape()));
    const bool realOut = inverse && onesided;
    const int64_t outLen = onesided && !inverse ? length / 2 + 1 : length;
    const int64_t outer = shapeProduct(x.shape(), 0, axis), inner = shapeProduct(x.shape(), axis + 1, r - 1);
    Shape os = x.shape();
    os[axis] = outLen;
    os.back() = realOut ? 1 : 2;
    std::vector<double> in = readAsDoubles(x, what);
    std::vector<double> out(static_cast<size_t>(shapeNumel(os)));
    const int64_t ci = complexIn ? 2 : 1, co = realOut ? 1 : 2;
    // The transform reads at most `length` input samples (shorter inputs are zero-padded); an
    // IRFFT reads the n/2 + 1 bins of a one-sided spectrum.
    const int64_t used = std::min(len, realOut ? length / 2 + 1 : length);
    std::vector<Complex> sig(static_cast<size_t>(used)), spec(static_cast<size_t>(outLen));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        for (int64_t t = 0; t < used; ++t) {
          const double* e = in.data() + ((o * len + t) * inner + i) * ci;
          sig[t] = Complex(e[0], complexIn ? e[1] : 0.0);
        }
        if (realOut) dft(hermitianExtend(sig, length), length, true, spec);
        else dft(sig, length, inverse, spec);
        for (int64_t t = 0; t < outLen; ++t) {
          double* e = out.data() + ((o * outLen + t) * inner + i) * co;
          e[0] = spec[t].real();
          if (!realOut) e[1] = spec[t].imag();
        }
      }
    k.setOutput(0, fromDoubles(x.dtype(), os, out, what));
  };
}

KernelFn stftKernel(CompileContext& c) {
  std::string what = c.node().describe();
  bool onesided = c.node().attrInt("onesided", 1) != 0;
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() == 3 && (x.dim(2) == 1 || x.dim(2) == 2),
                "{}: signal must be [batch, length, 1 or 2], got shape {}", what, shapeToString(x.shape()));
    const int64_t B = x.dim(0), L = x.dim(1);
    const bool complexIn = x.dim(2) == 2;
    int64_t step = scalarInt(k.input(1), what, "frame_step");
    GRAFT_CHECK(step >= 1, "{}: frame_step must be positive, got {}", what, step);
    std::vector<double> window;
    if (k.hasInput(2)) {
      const NDArray& w = k.input(2);
      GRAFT_CHECK(w.rank() == 1, "{}: window must be 1-D, got shape {}", what, shapeToString(w.shape()));
      window = readAsDoubles(w, what);
    }
    int64_t frameLength = k.hasInput(2) ? static_cast<int64_t>(window.size()) : L;
    if (k.hasInput(3)) {
      frameLength = scalarInt(k.input(3), what, "frame_length");
      GRAFT_CHECK(!k.hasInput(2) || frameLength == static_cast<int64_t>(window.size()),
                  "{}: frame_length {} differs from the window's length {}", what, frameLength, window.size());
    }
    GRAFT_CHECK(frameLength >= 1 && frameLength <= L, "{}: frame_length must be in [1, {}] (the signal length), got {}",
                what, L, frameLength);
    GRAFT_CHECK(!(onesided && complexIn), "{}: onesided output needs a real signal ([..., 1]); set onesided=0", what);
    if (window.empty()) window.assign(static_cast<size_t>(frameLength), 1.0);
    const int64_t frames = (L - frameLength) / step + 1;
    const int64_t bins = onesided ? frameLength / 2 + 1 : frameLength;
    std::vector<double> in = readAsDoubles(x, what);
    std::vector<double> out(static_cast<size_t>(B * frames * bins * 2));
    const int64_t ci = complexIn ? 2 : 1;
    std::vector<Complex> frame(static_cast<size_t>(frameLength)), spec(static_cast<size_t>(bins));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t f = 0; f < frames; ++f) {
        for (int64_t t = 0; t < frameLength; ++t) {
          const double* e = in.data() + (b * L + f * step + t) * ci;
          frame[t] = Complex(e[0], complexIn ? e[1] : 0.0) * window[t];
        }
        dft(frame, frameLength, false, spec);
        for (int64_t j = 0; j < bins; ++j) {
          out[((b * frames + f) * bins + j) * 2] = spec[j].real();
          out[((b * frames + f) * bins + j) * 2 + 1] = spec[j].imag();
        }
      }
    k.setOutput(0, fromDoubles(x.dtype(), {B, frames, bins, 2}, out, what));
  };
}

DataType outputDatatype(const ir::Node& n) {
  int64_t code = n.attrInt("output_datatype", 1);
  auto dt = static_cast<DataType>(code);
  auto bit = static_cast<uint32_t>(code);
  GRAFT_CHECK(code > 0 && code < 32 && ((kNumeric >> bit) & 1u), "{}: output_datatype {} is not a numeric tensor type",
              n.describe(), code);
  return dt;
}

// Generalised cosine windows: w[n] = sum_j a_j cos(2 pi j n / N), N = size (periodic) or
// size - 1 (symmetric).
KernelFactory windowKernel(std::vector<double> coeffs) {
  return [coeffs](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    bool periodic = c.node().attrInt("periodic", 1) != 0;
    DataType dt = outputDatatype(c.node());
    return [=](KernelContext& k) {
      int64_t size = scalarInt(k.input(0), what, "size");
      GRAFT_CHECK(size >= 0, "{}: size must be >= 0, got {}", what, size);
      const int64_t N = periodic ? size : size - 1;
      std::vector<double> w(static_cast<size_t>(size));
      for (int64_t i = 0; i < size; ++i) {
        if (N == 0) {  // a symmetric window of one sample (0/0 in the formula) is 1, as in numpy
          w[i] = 1.0;
          continue;
        }
        double v = 0;
        for (size_t j = 0; j < coeffs.size(); ++j)
          v += coeffs[j] * std::cos(2.0 * std::numbers::pi * static_cast<double>(j) * static_cast<double>(i) /
                                    static_cast<double>(N));
        w[i] = v;
      }
      k.setOutput(0, fromDoubles(dt, {size}, w, what));
    };
  };
}

KernelFn melWeightMatrixKernel(CompileContext& c) {
  std::string what = c.node().describe();
  DataType dt = outputDatatype(c.node());
  return [=](KernelContext& k) {
    int64_t numMel = scalarInt(k.input(0), what, "num_mel_bins");
    int64_t dftLength = scalarInt(k.input(1), what, "dft_length");
    int64_t sampleRate = scalarInt(k.input(2), what, "sample_rate");
    double lower = scalarDouble(k.input(3), what, "lower_edge_hertz");
    double upper = scalarDouble(k.input(4), what, "upper_edge_hertz");
    constexpr int64_t kMax = int64_t{1} << 31;  // keeps the index arithmetic far from overflow
    GRAFT_CHECK(numMel >= 1 && numMel <= kMax, "{}: num_mel_bins must be in [1, 2^31], got {}", what, numMel);
    GRAFT_CHECK(dftLength >= 1 && dftLength <= kMax, "{}: dft_length must be in [1, 2^31], got {}", what, dftLength);
    GRAFT_CHECK(sampleRate >= 1, "{}: sample_rate must be positive, got {}", what, sampleRate);
    GRAFT_CHECK(lower >= 0 && lower < upper && upper <= sampleRate / 2.0,
                "{}: expected 0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2 = {}, got {} and {}", what,
                sampleRate / 2.0, lower, upper);
    const int64_t numBins = dftLength / 2 + 1;
    auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
    auto hz = [](double m) { return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0); };
    // num_mel_bins + 2 band edges, equally spaced in mel, mapped to DFT bins. The spacing
    // divides by the number of edges (not of gaps), as in the ONNX reference implementation.
    const double lowMel = mel(lower), highMel = mel(upper);
    const double step = (highMel - lowMel) / static_cast<double>(numMel + 2);
    std::vector<int64_t> edge(static_cast<size_t>(numMel + 2));
    for (int64_t i = 0; i < numMel + 2; ++i) {
      double f = hz(lowMel + static_cast<double>(i) * step);
      auto b = static_cast<int64_t>(std::floor(static_cast<double>(dftLength + 1) * f / static_cast<double>(sampleRate)));
      edge[i] = std::max<int64_t>(0, std::min(b, numBins - 1));
    }
    std::vector<double> out(static_cast<size_t>(shapeNumel({numBins, numMel})), 0.0);
    for (int64_t m = 0; m < numMel; ++m) {
      int64_t left = edge[m], center = edge[m + 1], right = edge[m + 2];
      if (center == left) {
        out[center * numMel + m] = 1.0;
      } else {
        for (int64_t j = left; j <= center; ++j)
          out[j * numMel + m] = static_cast<double>(j - left) / static_cast<double>(center - left);
      }
      for (int64_t j = center; j < right; ++j)
        out[j * numMel + m] = static_cast<double>(right - j) / static_cast<double>(right - center);
    }
    k.setOutput(0, fromDoubles(dt, {numBins, numMel}, out, what));
  };
}

}  // namespace

GRAFT_REGISTER_OPS(signal) {
  r.add("DFT").setReference(dftKernel);
  r.add("STFT").setReference(stftKernel);
  r.add("HannWindow").setReference(windowKernel({0.5, -0.5}));
  // ONNX's Hamming coefficients are 25/46 and 21/46 (not the rounded 0.54 and 0.46).
  r.add("HammingWindow").setReference(windowKernel({25.0 / 46.0, -21.0 / 46.0}));
  r.add("BlackmanWindow").setReference(windowKernel({0.42, -0.5, 0.08}));
  r.add("MelWeightMatrix").setReference(melWeightMatrixKernel);
}

}  // namespace graft::ops
