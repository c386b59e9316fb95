#pragma once
// Reading data files for `graft train`: numpy's .npy and the IDX format of MNIST-style datasets
// (gzip-compressed or not), as Debian's dataset-fashion-mnist ships them.
#include <graft/ndarray.hpp>

#include <string>

namespace graft::tools {

/// Parses the bytes of an IDX file: a big-endian header (two zero bytes, a type code, the rank,
/// then one 32-bit size per dimension) followed by the elements, big-endian. Element types:
/// 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64. Throws
/// graft::Error naming `what` for a bad magic number, an unknown type code, a size that overflows,
/// or a length that differs from what the header announces.
NDArray parseIdx(const std::string& bytes, const std::string& what = "<idx bytes>");
/// Reads an IDX file; gzip-compressed files (.gz) are decompressed on the fly.
NDArray readIdx(const std::string& path);

/// Reads a data array: .npy files with readNpy, anything else as IDX (optionally gzip-compressed).
/// Throws graft::Error naming the file when it is neither.
NDArray readArrayFile(const std::string& path);

}  // namespace graft::tools
