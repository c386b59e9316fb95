#pragma once
// Branch-free float versions of exp, log, tanh, sigmoid, erf and GELU that the compiler can
// vectorise (std:: functions are calls that it cannot). Each is within a few ulp of the
// correctly rounded result over the whole float range, NaN and infinities included; tests
// compare them with the reference kernels. Doubles use the std:: functions.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/elementwise_table.hpp"

// Every function is always inlined: the kernels' hot loops are compiled again for AVX-512 and
// AVX2 (GRAFT_VEC_RUN, target attributes), and GCC does not inline a plain inline function of the
// default target into them on its own. They then called each function out of line, through the
// PLT, one float at a time (found on 2026-12-06 in FusedElementwise's exp/log/GELU and the
// LSTM cells' tanh: none of those loops was vectorised).
#define GRAFT_VECMATH_INLINE [[gnu::always_inline]] inline

namespace graft::backends::cpu::vecmath {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Rounds to the nearest integer (ties to even) for |x| < 2^22, without SSE4.1's roundps.
GRAFT_VECMATH_INLINE float roundNearest(float x) { return (x + 12582912.0f) - 12582912.0f; }

/// exp(x), Cephes' polynomial on a range reduction by ln 2; the scale 2^n is applied in two
/// halves so that results down to the smallest denormal come out right.
/// exp's range reduction and polynomial: e^r for r = x - n ln 2, n = round(x / ln 2) (into fn).
GRAFT_VECMATH_INLINE float expReduced(float x, float& fn) {
  fn = roundNearest(x * 1.44269504088896341f);
  float r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

GRAFT_VECMATH_INLINE float exp(float x) {
  bool nan = x != x;
  float xc = nan ? 0.0f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  xc = xc > 88.8f ? 88.8f : xc;
  float fn;
  float y = expReduced(xc, fn);
  auto n = static_cast<int32_t>(fn);
  int32_t n1 = n / 2, n2 = n - n1;
  y = y * std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  y = y * std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  return nan ? x : y;
}

/// log(x), Cephes' polynomial on the mantissa in [sqrt(1/2), sqrt(2)).
GRAFT_VECMATH_INLINE float log(float x) {
  bool denormal = x < 1.17549435e-38f;
  float xs = denormal ? x * 8388608.0f : x;
  auto bits = std::bit_cast<uint32_t>(xs);
  auto e = static_cast<int32_t>((bits >> 23) & 0xffu) - 126;
  float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u);
  e = denormal ? e - 23 : e;
  auto fe = static_cast<float>(e);
  bool low = m < 0.707106781186547524f;
  fe = low ? fe - 1.0f : fe;
  m = low ? m + m - 1.0f : m - 1.0f;
  float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += -2.12194440e-4f * fe;
  y += -0.5f * z;
  float r = m + y;
  r += 0.693359375f * fe;
  r = x == kInf ? kInf : r;
  r = x == 0.0f ? -kInf : r;
  r = (x < 0.0f || x != x) ? kNaN : r;
  return r;
}

/// log(1 + u) for u >= 0 (exact for tiny u: the rounding of 1 + u is corrected for).
GRAFT_VECMATH_INLINE float log1pPositive(float u) {
  float w = 1.0f + u;
  float d = w - 1.0f;
  float r = log(w) * (u / (d == 0.0f ? 1.0f : d));
  return d == 0.0f ? u : r;
}

/// tanh(x): an odd polynomial near 0, 1 - 2 / (exp(2|x|) + 1) elsewhere.
/// tanh's odd polynomial, for |x| < 0.625.
GRAFT_VECMATH_INLINE float tanhSmall(float x) {
  float z = x * x;
  float p = -5.70498872745e-3f * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  return p * z * x + x;
}

GRAFT_VECMATH_INLINE float tanh(float x) {
  float ax = std::fabs(x);
  float small = tanhSmall(x);
  float e = exp(2.0f * ax);
  float large = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : large;
}

/// 1 / (1 + exp(-x)) without overflow.
GRAFT_VECMATH_INLINE float sigmoid(float x) {
  float e = exp(-std::fabs(x));
  float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

/// exp(x) for x <= 0 (NaN kept), for the LSTM cells' gates (sigmoidCell, tanhCell): one scale by
/// 2^n instead of exp's two halves, and results below 2^-126 (x < -87.34) flushed to zero where
/// exp returns denormals (a gate of 1e-39 against 0).
GRAFT_VECMATH_INLINE float expNonPositive(float x) {
  bool nan = x != x;
  bool tiny = x < -87.33654f;
  float xc = tiny || nan ? 0.0f : x;
  float fn;
  float y = expReduced(xc, fn);
  y = y * std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(fn) + 127) << 23);
  y = tiny ? 0.0f : y;
  return nan ? x : y;
}

/// sigmoid on expNonPositive: the LSTM cells' gates (0 where sigmoid is below 2^-126).
GRAFT_VECMATH_INLINE float sigmoidCell(float x) {
  float e = expNonPositive(-std::fabs(x));
  float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

/// tanh on expNonPositive, (1 - e) / (1 + e) with e = exp(-2|x|) outside tanh's polynomial: the
/// LSTM cells'.
GRAFT_VECMATH_INLINE float tanhCell(float x) {
  float ax = std::fabs(x);
  float small = tanhSmall(x);
  float e = expNonPositive(-2.0f * ax);
  float large = std::copysign((1.0f - e) / (1.0f + e), x);
  return ax < 0.625f ? small : large;
}

/// log(1 + exp(x)) without overflow.
GRAFT_VECMATH_INLINE float softplus(float x) {
  float m = x > 0.0f ? x : 0.0f;
  float r = m + log1pPositive(exp(-std::fabs(x)));
  return x != x ? x : r;
}

namespace detail {
// erf(x) = x P(x^2) for |x| < 1; erfc(x) = exp(-x^2 + Q((x - 2.5) / 1.5)) for 1 <= x < 4
// (least-squares fits on Chebyshev nodes; at most 1.4 ulp over the float range).
GRAFT_VECMATH_INLINE float erfSmall(float x) {
  float z = x * x;
  float p = -9.728410704156142e-06f;
  p = p * z + 0.00011288175575280279f;
  p = p * z - 0.0008487267844914242f;
  p = p * z + 0.00522126150352864f;
  p = p * z - 0.02686551744722951f;
  p = p * z + 0.11283784111883832f;
  p = p * z - 0.37612638590433184f;
  p = p * z + 1.1283791670822856f;
  return x * p;
}
/// erfc(a) for a >= 1 (a is clamped to 4, where erfc is below float's resolution of 1).
GRAFT_VECMATH_INLINE float erfcLarge(float a) {
  a = a > 4.0f ? 4.0f : a;
  float u = (a - 2.5f) * (1.0f / 1.5f);
  float q = 4.1366633758018236e-05f;
  q = q * u - 0.00022740341234472883f;
  q = q * u + 0.0008815708782012321f;
  q = q * u - 0.0031904728096462816f;
  q = q * u + 0.010961124068113781f;
  q = q * u - 0.0366474949176744f;
  q = q * u + 0.1262393093868101f;
  q = q * u - 0.5290210216092839f;
  q = q * u - 1.5568152770519281f;
  return exp(q - a * a);
}
}  // namespace detail

GRAFT_VECMATH_INLINE float erf(float x) {
  float ax = std::fabs(x);
  float big = std::copysign(1.0f - detail::erfcLarge(ax < 1.0f ? 1.0f : ax), x);
  float r = ax < 1.0f ? detail::erfSmall(x) : big;
  r = ax >= 4.0f ? std::copysign(1.0f, x) : r;
  return x != x ? x : r;
}

/// GELU, erf form: x/2 (1 + erf(x / sqrt 2)); for x < 0 the sum 1 + erf is taken as erfc, which
/// keeps its relative precision far into the tail.
GRAFT_VECMATH_INLINE float geluErf(float x) {
  float z = x * 0.70710678118654752f;
  float az = std::fabs(z);
  float c = detail::erfcLarge(az < 1.0f ? 1.0f : az);  // erfc(|z|), |z| >= 1
  float onePlus = z > 0.0f ? 2.0f - c : c;
  onePlus = az < 1.0f ? 1.0f + detail::erfSmall(z) : onePlus;
  onePlus = az >= 4.0f ? (z > 0.0f ? 2.0f : 0.0f) : onePlus;
  float r = 0.5f * x * onePlus;
  return x != x ? x : r;
}

/// PopART's GELU (tanh approximation).
GRAFT_VECMATH_INLINE float geluTanh(float x) {
  float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanh(u));
}

}  // namespace graft::backends::cpu::vecmath

namespace graft::backends::cpu {

/// The math of the cpu kernels' elementwise formulas (ops/elementwise_table.hpp): vecmath's
/// functions for float, the reference's (std::) for other types.
struct VecMath : ops::ew::StdMath {
#define GRAFT_VECMATH_FN(name)              \
  template <class C>                        \
  GRAFT_VECMATH_INLINE static C name(C x) { \
    if constexpr (std::is_same_v<C, float>) \
      return vecmath::name(x);              \
    else                                    \
      return ops::ew::StdMath::name(x);     \
  }
  GRAFT_VECMATH_FN(exp)
  GRAFT_VECMATH_FN(log)
  GRAFT_VECMATH_FN(tanh)
  GRAFT_VECMATH_FN(erf)
  GRAFT_VECMATH_FN(sigmoid)
  GRAFT_VECMATH_FN(softplus)
  GRAFT_VECMATH_FN(geluTanh)
  GRAFT_VECMATH_FN(geluErf)
#undef GRAFT_VECMATH_FN
};

}  // namespace graft::backends::cpu
