#pragma once
// Small text helpers shared by the graft command's subcommands.
#include <graft/ndarray.hpp>

#include <cstdint>
#include <string>

namespace graft::tools {

/// 1234567 -> "1,234,567".
std::string groupDigits(int64_t v);
/// Bytes as "512 B", "1.5 KiB", "3.2 MiB", ...
std::string humanBytes(double bytes);
/// Seconds as "850 us", "12.3 ms", "1.20 s".
std::string humanSeconds(double s);
/// One line about an array: dtype and shape, min/max/mean (numeric types), NaN/inf counts, and
/// the first `show` values.
std::string summarizeArray(const NDArray& a, int show);

}  // namespace graft::tools
