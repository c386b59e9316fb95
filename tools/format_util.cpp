#include "format_util.hpp"

#include <cmath>
#include <limits>

#include "ops/dtype_dispatch.hpp"
#include "support/check.hpp"

namespace graft::tools {

std::string groupDigits(int64_t v) {
  uint64_t magnitude = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string digits = std::to_string(magnitude);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string humanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

std::string humanSeconds(double s) {
  if (s < 1e-3) return fmt::format("{:.0f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

namespace {

template <class T>
std::string valueText(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) return fmt::format("'{}'", v);
  else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (ops::kIsFloat<T>) return fmt::format("{:.6g}", static_cast<double>(static_cast<ops::ComputeType<T>>(v)));
  else return fmt::format("{}", v);
}

}  // namespace

std::string summarizeArray(const NDArray& a, int show) {
  std::string s = fmt::format("{} {}", dtypeName(a.dtype()), shapeToString(a.shape()));
  if (a.dtype() == DataType::Complex64 || a.dtype() == DataType::Complex128) return s;
  ops::dispatch<ops::kAll>(a.dtype(), "summary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = a.data<T>();
    if constexpr (!std::is_same_v<T, std::string>) {
      if (a.numel() > 0) {
        double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
        int64_t nan = 0, inf = 0, finite = 0;
        for (int64_t i = 0; i < a.numel(); ++i) {
          double v;
          if constexpr (std::is_same_v<T, bool>) v = p[i] ? 1 : 0;
          else v = static_cast<double>(static_cast<ops::ComputeType<T>>(p[i]));
          if (std::isnan(v)) {
            ++nan;
            continue;
          }
          if (std::isinf(v)) ++inf;
          else sum += v, ++finite;
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        if (nan < a.numel()) s += fmt::format("  min {:.6g}  max {:.6g}", lo, hi);
        if (finite) s += fmt::format("  mean {:.6g}", sum / static_cast<double>(finite));
        if (nan) s += fmt::format("  NaN: {}", nan);
        if (inf) s += fmt::format("  inf: {}", inf);
      }
    }
    if (show > 0) {
      int64_t n = std::min<int64_t>(show, a.numel());
      std::vector<std::string> vals;
      for (int64_t i = 0; i < n; ++i) vals.push_back(valueText(p[i]));
      s += fmt::format("\n      first values: [{}{}]", fmt::join(vals, ", "), a.numel() > n ? ", ..." : "");
    }
  });
  return s;
}

}  // namespace graft::tools
