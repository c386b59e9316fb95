#include "ops/low_precision.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cast_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "support/check.hpp"

namespace graft::ops {

namespace {

enum class Special { None, AllOnesNaN, Ieee, Unsigned0x80 };

struct FloatFormat {
  int ebits, mbits, bias;
  Special special;
};

FloatFormat formatOf(DataType dt) {
  switch (dt) {
    case DataType::Float8E4M3FN:
      return {4, 3, 7, Special::AllOnesNaN};
    case DataType::Float8E4M3FNUZ:
      return {4, 3, 8, Special::Unsigned0x80};
    case DataType::Float8E5M2:
      return {5, 2, 15, Special::Ieee};
    case DataType::Float8E5M2FNUZ:
      return {5, 2, 16, Special::Unsigned0x80};
    case DataType::Float4E2M1:
      return {2, 1, 1, Special::None};
    default:
      GRAFT_ASSERT(false, "not a low-precision float type");
  }
  return {};
}

const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool isNarrowInt(DataType dt) { return narrowIntRange(dt).second > 0; }

// FLOAT8E8M0 (opset 24): no sign and no mantissa; the code is a float32's biased exponent, so the
// value is 2^(code-127), with 0xFF for NaN. From float32 (as ONNX's reference, numpy_helper
// to_float8e8m0): the sign is dropped, NaN and infinity become 0xFF, and a value between two
// powers of two goes up (round_mode "up"), down, or to the nearer ("nearest", on the mantissa's
// guard/round/sticky bits). With saturate, rounding up from 2^127 stays at 0xFE.
double decodeE8M0(uint8_t code) { return code == 0xFF ? kNaN : std::ldexp(1.0, static_cast<int>(code) - 127); }

uint8_t encodeE8M0(double v, bool saturate, E8M0Round round) {
  auto f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  uint32_t e = (bits >> 23) & 0xFF;
  if (e == 0xFF) return 0xFF;
  bool up = false;
  if (round == E8M0Round::Up) {
    up = (bits & 0x7FFFFF) != 0;
  } else if (round == E8M0Round::Nearest) {
    bool g = (bits & 0x400000) != 0, r = (bits & 0x200000) != 0, st = (bits & 0x1FFFFF) != 0;
    up = g && (r || st || e > 0);
  }
  if (up && !(saturate && e == 0xFE)) ++e;
  return static_cast<uint8_t>(e);
}

// Decodes a code; NaN and infinity included.
double decode(const FloatFormat& f, uint32_t code) {
  uint32_t signBit = 1u << (f.ebits + f.mbits);
  uint32_t e = (code >> f.mbits) & ((1u << f.ebits) - 1), m = code & ((1u << f.mbits) - 1);
  uint32_t emax = (1u << f.ebits) - 1, mmax = (1u << f.mbits) - 1;
  bool neg = (code & signBit) != 0;
  if (f.special == Special::Unsigned0x80 && code == signBit) return kNaN;
  if (f.special == Special::AllOnesNaN && e == emax && m == mmax) return kNaN;
  if (f.special == Special::Ieee && e == emax)
    return m ? kNaN : (neg ? -1.0 : 1.0) * std::numeric_limits<double>::infinity();
  double v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.mbits)
                    : std::ldexp(1.0 + static_cast<double>(m) / static_cast<double>(1u << f.mbits),
                                 static_cast<int>(e) - f.bias);
  return neg ? -v : v;
}

// The non-negative finite values of a format, ascending, with their codes.
struct Table {
  std::vector<double> values;
  std::vector<uint8_t> codes;
};

const Table& tableOf(DataType dt) {
  static std::array<Table, 32> tables;
  static std::array<bool, 32> built{};
  auto i = static_cast<size_t>(dt);
  if (!built[i]) {
    FloatFormat f = formatOf(dt);
    uint32_t signBit = 1u << (f.ebits + f.mbits);
    for (uint32_t c = 0; c < signBit; ++c) {
      double v = decode(f, c);
      if (std::isfinite(v)) {
        tables[i].values.push_back(v);
        tables[i].codes.push_back(static_cast<uint8_t>(c));
      }
    }
    built[i] = true;  // codes ascend with value for these formats
  }
  return tables[i];
}

uint8_t encodeFloat(DataType dt, double v, bool saturate) {
  FloatFormat f = formatOf(dt);
  uint8_t signBit = static_cast<uint8_t>(1u << (f.ebits + f.mbits));
  const Table& t = tableOf(dt);
  bool alwaysSaturate = f.special == Special::None;
  uint8_t nanCode = f.special == Special::Unsigned0x80 ? signBit
                    : f.special == Special::Ieee       ? static_cast<uint8_t>(0x7E)
                    : f.special == Special::AllOnesNaN ? static_cast<uint8_t>(0x7F)
                                                       : signBit;  // float4: -0, as ml_dtypes
  uint8_t infCode = static_cast<uint8_t>(0x7C);                    // E5M2 only
  if (std::isnan(v)) return nanCode;
  bool neg = std::signbit(v);
  double a = std::abs(v);
  auto withSign = [&](uint8_t code) -> uint8_t {
    if (!neg) return code;
    if (code == 0 && f.special == Special::Unsigned0x80) return 0;  // no negative zero
    return static_cast<uint8_t>(code | signBit);
  };
  double maxV = t.values.back();
  uint8_t maxCode = t.codes.back();
  auto overflow = [&]() -> uint8_t {
    if (saturate || alwaysSaturate) return withSign(maxCode);
    return f.special == Special::Ieee ? withSign(infCode) : nanCode;
  };
  if (std::isinf(a)) return overflow();
  if (a > maxV) {
    // The next value up would be max + one unit in the last place of max's binade.
    int e;
    std::frexp(maxV, &e);
    double spacing = std::ldexp(1.0, e - 1 - f.mbits);
    double mid = maxV + spacing / 2;
    if (a < mid || (a == mid && (maxCode & 1u) == 0)) return withSign(maxCode);
    return overflow();
  }
  auto it = std::lower_bound(t.values.begin(), t.values.end(), a);
  size_t hi = static_cast<size_t>(it - t.values.begin());
  if (t.values[hi] == a || hi == 0) return withSign(t.codes[hi]);
  size_t lo = hi - 1;
  double dl = a - t.values[lo], dh = t.values[hi] - a;
  size_t pick = dl < dh ? lo : dh < dl ? hi : ((t.codes[lo] & 1u) == 0 ? lo : hi);
  return withSign(t.codes[pick]);
}

}  // namespace

std::pair<double, double> narrowIntRange(DataType dt) {
  switch (dt) {
    case DataType::Int4:
      return {-8, 7};
    case DataType::UInt4:
      return {0, 15};
    case DataType::Int2:
      return {-2, 1};
    case DataType::UInt2:
      return {0, 3};
    default:
      return {0, 0};
  }
}

double lowPrecisionToDouble(DataType dt, uint8_t code) {
  if (dt == DataType::Int4 || dt == DataType::Int2) return static_cast<double>(static_cast<int8_t>(code));
  if (dt == DataType::UInt4 || dt == DataType::UInt2) return static_cast<double>(code);
  if (dt == DataType::Float8E8M0) return decodeE8M0(code);
  return decode(formatOf(dt), code);
}

uint8_t lowPrecisionFromDouble(DataType dt, double v, bool saturate, E8M0Round round) {
  if (isNarrowInt(dt)) {
    if (std::isnan(v)) return 0;
    double t = std::trunc(v);
    auto [lo, hi] = narrowIntRange(dt);
    if (t < lo || t > hi) return 0;
    return static_cast<uint8_t>(static_cast<int8_t>(t));
  }
  if (dt == DataType::Float8E8M0) return encodeE8M0(v, saturate, round);
  return encodeFloat(dt, v, saturate);
}

E8M0Round e8m0RoundFromString(const std::string& mode, const std::string& what) {
  if (mode == "up") return E8M0Round::Up;
  if (mode == "down") return E8M0Round::Down;
  if (mode == "nearest") return E8M0Round::Nearest;
  GRAFT_THROW("{}: round_mode must be \"up\", \"down\" or \"nearest\", got \"{}\"", what, mode);
}

NDArray castLowPrecision(const NDArray& x, DataType to, bool saturate, const std::string& /*what*/, E8M0Round round) {
  GRAFT_ASSERT(isLowPrecision(x.dtype()) || isLowPrecision(to), "castLowPrecision without a low-precision type");
  NDArray wide = x;
  if (isLowPrecision(x.dtype())) {
    wide = NDArray(DataType::Double, x.shape());
    const auto* src = static_cast<const uint8_t*>(x.rawData());
    for (int64_t i = 0; i < x.numel(); ++i) wide.data<double>()[i] = lowPrecisionToDouble(x.dtype(), src[i]);
  } else if (x.dtype() != DataType::Double) {
    wide = castArray(x, DataType::Double);
  }
  if (!isLowPrecision(to)) return to == DataType::Double ? wide : castArray(wide, to);
  NDArray out(to, x.shape());
  auto* dst = static_cast<uint8_t*>(out.rawData());
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = lowPrecisionFromDouble(to, wide.data<double>()[i], saturate, round);
  return out;
}

}  // namespace graft::ops
