#pragma once
// Reading and writing numpy's .npy files (format versions 1.0, 2.0 and 3.0): little-endian,
// C-order arrays of every element type graft and numpy share.
#include <graft/ndarray.hpp>

#include <string>

namespace graft::tools {

/// Parses the bytes of a .npy file. `what` names the source in messages (its path). Supported
/// element types: float16/32/64, int8..int64, uint8..uint64, bool, complex64/128. Throws
/// graft::Error naming `what` for a bad magic string, an unsupported version, a malformed header,
/// Fortran order, a big-endian or unsupported dtype, a shape that overflows, or too few bytes.
NDArray parseNpy(const std::string& bytes, const std::string& what = "<npy bytes>");
/// Reads a .npy file (see parseNpy).
NDArray readNpy(const std::string& path);

/// The .npy encoding of `a` (version 1.0, or 2.0 when the header needs more than 64 KiB).
/// Throws graft::Error for element types numpy has no .npy code for (bfloat16, string).
std::string serializeNpy(const NDArray& a);
/// Writes `a` to `path` as .npy.
void writeNpy(const std::string& path, const NDArray& a);

/// numpy's type code of a dtype ("<f4", "|b1", ...); throws graft::Error when it has none.
std::string npyDescr(DataType dt);

}  // namespace graft::tools
