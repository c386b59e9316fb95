#include "idx.hpp"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "npy.hpp"
#include "support/check.hpp"
#include "support/file_util.hpp"

namespace graft::tools {
namespace {

struct IdxType {
  uint8_t code;
  DataType dtype;
};
constexpr IdxType kTypes[] = {{0x08, DataType::UInt8}, {0x09, DataType::Int8},  {0x0B, DataType::Int16},
                              {0x0C, DataType::Int32}, {0x0D, DataType::Float}, {0x0E, DataType::Double}};

uint32_t bigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

NDArray parseIdx(const std::string& bytes, const std::string& what) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  GRAFT_CHECK(bytes.size() >= 4 && p[0] == 0 && p[1] == 0,
              "{} is not an IDX file: it does not start with two zero bytes (nor is it a .npy file)", what);
  const IdxType* type = nullptr;
  for (const auto& t : kTypes)
    if (t.code == p[2]) type = &t;
  GRAFT_CHECK(type,
              "{} is not a valid IDX file: unknown element type code 0x{:02X} (expected 0x08, 0x09, 0x0B, 0x0C, "
              "0x0D or 0x0E)",
              what, p[2]);
  size_t rank = p[3];
  size_t header = 4 + 4 * rank;
  GRAFT_CHECK(bytes.size() >= header, "{} is truncated: its header announces {} dimensions but the file has {} bytes",
              what, rank, bytes.size());
  Shape shape;
  uint64_t numel = 1;
  for (size_t d = 0; d < rank; ++d) {
    uint32_t n = bigEndian32(p + 4 + 4 * d);
    shape.push_back(static_cast<int64_t>(n));
    GRAFT_CHECK(!__builtin_mul_overflow(numel, uint64_t{n}, &numel) && numel < (uint64_t{1} << 48),
                "{}: the shape {} is too large", what, shapeToString(shape));
  }
  size_t elem = dtypeSize(type->dtype);
  uint64_t expected = numel * elem;
  GRAFT_CHECK(bytes.size() - header == expected,
              "{}: the header announces {} {} values ({} bytes of data) but the file "
              "has {} bytes of data",
              what, shapeToString(shape), dtypeName(type->dtype), expected, bytes.size() - header);
  NDArray a = NDArray::uninitialized(type->dtype, shape);
  auto* dst = static_cast<unsigned char*>(a.rawData());
  const unsigned char* src = p + header;
  if (elem == 1) {
    if (expected) std::memcpy(dst, src, expected);
  } else {
    // IDX stores elements big-endian; the host is little-endian (as npy.cpp asserts).
    for (uint64_t i = 0; i < numel; ++i)
      for (size_t b = 0; b < elem; ++b) dst[i * elem + b] = src[i * elem + (elem - 1 - b)];
  }
  return a;
}

NDArray readIdx(const std::string& path) {
  support::checkRegularFile("data file", path);  // before the open: a FIFO or a device would block
  // gzread also reads files that are not compressed, as they are.
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  GRAFT_CHECK(f, "cannot open data file '{}'", path);
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    int n = gzread(f.get(), buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(f.get(), &code);
      GRAFT_THROW("cannot read data file '{}': {}", path, msg ? msg : "gzip error");
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  int code = Z_OK;
  const char* msg = gzerror(f.get(), &code);
  GRAFT_CHECK(code == Z_OK, "cannot read data file '{}': {} (a truncated .gz file?)", path, msg ? msg : "gzip error");
  return parseIdx(bytes, "'" + path + "'");
}

NDArray readArrayFile(const std::string& path) {
  if (endsWith(path, ".npy")) return readNpy(path);
  return readIdx(path);
}

}  // namespace graft::tools
