#pragma once
// Element conversion between any two graft element types, without undefined behaviour:
// float-to-integer conversions of out-of-range values and infinities saturate, NaN gives 0;
// conversions to FLOAT16/BFLOAT16 round once (to nearest even), whatever the source type.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include <graft/ndarray.hpp>

#include "ops/dtype_dispatch.hpp"

namespace graft::ops {

namespace castdetail {

/// `v` rounded to float with round-to-odd (an inexact result gets its last mantissa bit set).
/// A second rounding of that float to half or bfloat16 then equals a single correct rounding of
/// `v`, which plain float rounding followed by half rounding does not guarantee.
template <class F>
float toFloatRoundToOdd(F v) {
  auto x = static_cast<long double>(v);  // exact for every graft integer and floating type
  auto f = static_cast<float>(x);
  if (std::isnan(x) || static_cast<long double>(f) == x) return f;
  if (std::fabs(static_cast<long double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1u;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Parses a whole string (surrounding spaces allowed) as a number, accepting what ONNX and numpy
/// write: "1.5", "-2e3", "INF", "+INF", "-inf", "NaN". Throws graft::Error when it is not one.
inline double parseDouble(const std::string& s) {
  const char* b = s.c_str();
  char* e = nullptr;
  errno = 0;
  double d = std::strtod(b, &e);  // overflow gives +-HUGE_VAL (inf), which is what we want
  while (e && *e == ' ') ++e;
  if (e == b || (e && *e != '\0')) GRAFT_THROW("Cast: cannot convert the string '{}' to a number", s);
  return d;
}

/// The shortest decimal that reads back as the same value of type T (float, double, Half,
/// BFloat16), written like numpy's str(): positional with ".0" for whole numbers in
/// [1e-4, 1e16), scientific otherwise; "NaN", "INF", "-INF" for the special values.
template <class T>
std::string floatToString(T v) {
  using C = ComputeType<T>;
  C c = static_cast<C>(v);
  if (std::isnan(c)) return "NaN";
  if (std::isinf(c)) return c > 0 ? "INF" : "-INF";
  if constexpr (!std::is_same_v<T, C>) {
    // Half and bfloat16: find the fewest significant digits that round-trip in T, then write
    // that (float) value the float way below.
    for (int p = 1; p <= 9; ++p) {
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof(buf), c, std::chars_format::scientific, p - 1);
      float back = 0;
      std::from_chars(buf, res.ptr, back);
      if (T(back).bits == v.bits) {
        c = back;
        break;
      }
    }
  }
  char buf[400];
  C mag = std::fabs(c);
  bool sci = mag != 0 && (mag < C(1e-4) || mag >= C(1e16));
  auto res = std::to_chars(buf, buf + sizeof(buf), c, sci ? std::chars_format::scientific : std::chars_format::fixed);
  std::string s(buf, res.ptr);
  if (!sci && s.find('.') == std::string::npos) s += ".0";
  return s;
}

}  // namespace castdetail

template <class To, class From>
To convertElement(const From& v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, std::string>) {
    if constexpr (std::is_same_v<To, bool>) {
      if (v.empty() || v == "false" || v == "False" || v == "FALSE") return false;
      if (v == "true" || v == "True" || v == "TRUE") return true;
      double d = castdetail::parseDouble(v);
      return d != 0;
    } else if constexpr (std::is_integral_v<To>) {
      // Integers parse exactly when they can (large int64 values lose digits through double).
      To out{};
      const char* b = v.data();
      const char* e = v.data() + v.size();
      if (!v.empty() && *b == '+') ++b;
      auto res = std::from_chars(b, e, out);
      if (res.ec == std::errc() && res.ptr == e && b != e) return out;
      return convertElement<To>(castdetail::parseDouble(v));
    } else {
      return convertElement<To>(castdetail::parseDouble(v));
    }
  } else if constexpr (std::is_same_v<To, std::string>) {
    if constexpr (std::is_same_v<From, bool>) {
      return v ? "True" : "False";  // numpy's str(), as ONNX's reference implementation writes them
    } else if constexpr (kIsFloat<From>) {
      return castdetail::floatToString(v);
    } else {
      return std::to_string(v);
    }
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<ComputeType<From>>(v) != ComputeType<From>(0);
  } else if constexpr ((std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) &&
                       !(std::is_same_v<From, float> || std::is_same_v<From, Half> || std::is_same_v<From, BFloat16> ||
                         std::is_same_v<From, bool>)) {
    return To(castdetail::toFloatRoundToOdd(v));
  } else {
    using CF = ComputeType<From>;
    using CT = ComputeType<To>;
    CF c = static_cast<CF>(v);
    if constexpr (std::is_floating_point_v<CF> && std::is_integral_v<CT>) {
      if (std::isnan(c)) return To(0);
      if (c <= static_cast<CF>(std::numeric_limits<CT>::lowest()))
        return static_cast<To>(std::numeric_limits<CT>::lowest());
      if (c >= static_cast<CF>(std::numeric_limits<CT>::max())) return static_cast<To>(std::numeric_limits<CT>::max());
      return static_cast<To>(static_cast<CT>(c));
    } else {
      return static_cast<To>(static_cast<CT>(c));
    }
  }
}

/// Converts every element of `src` into a new array of type `to`.
NDArray castArray(const NDArray& src, DataType to);

}  // namespace graft::ops
