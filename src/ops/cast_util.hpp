#pragma once
// Element conversion between any two graft element types, without undefined behaviour:
// float-to-integer conversions of NaN or out-of-range values saturate (NaN gives 0).
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include <graft/ndarray.hpp>

#include "ops/dtype_dispatch.hpp"

namespace graft::ops {

template <class To, class From>
To convertElement(const From& v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, std::string>) {
    if constexpr (std::is_same_v<To, bool>) {
      return !(v.empty() || v == "0" || v == "false" || v == "False");
    } else {
      // ONNX parses strings as numbers: "INF", "-inf", "NaN", "1e3", ...
      double d = 0;
      try {
        size_t used = 0;
        d = std::stod(v, &used);
      } catch (const std::exception&) {
        d = 0;  // not a number: 0, as unparsable input must not abort the run
      }
      return convertElement<To>(d);
    }
  } else if constexpr (std::is_same_v<To, std::string>) {
    if constexpr (std::is_same_v<From, bool>) {
      return v ? "1" : "0";
    } else {
      using C = ComputeType<From>;
      C c = static_cast<C>(v);
      if constexpr (std::is_floating_point_v<C>) {
        if (std::isnan(c)) return "NaN";
        if (std::isinf(c)) return c > 0 ? "INF" : "-INF";
        char buf[64];
        auto res = std::to_chars(buf, buf + sizeof(buf), c);
        return std::string(buf, res.ptr);
      } else {
        return std::to_string(c);
      }
    }
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<ComputeType<From>>(v) != ComputeType<From>(0);
  } else {
    using CF = ComputeType<From>;
    using CT = ComputeType<To>;
    CF c = static_cast<CF>(v);
    if constexpr (std::is_floating_point_v<CF> && std::is_integral_v<CT>) {
      if (std::isnan(c)) return To(0);
      if (c <= static_cast<CF>(std::numeric_limits<CT>::lowest())) return static_cast<To>(std::numeric_limits<CT>::lowest());
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
