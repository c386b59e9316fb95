#include "npy.hpp"

#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>

#include "support/check.hpp"
#include "support/file_util.hpp"

namespace graft::tools {
namespace {

static_assert(std::endian::native == std::endian::little, "graft's .npy IO assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct TypeCode {
  char kind;  // numpy's kind character
  int size;
  DataType dtype;
};
constexpr TypeCode kCodes[] = {
    {'f', 2, DataType::Float16}, {'f', 4, DataType::Float},     {'f', 8, DataType::Double},
    {'i', 1, DataType::Int8},    {'i', 2, DataType::Int16},     {'i', 4, DataType::Int32},
    {'i', 8, DataType::Int64},   {'u', 1, DataType::UInt8},     {'u', 2, DataType::UInt16},
    {'u', 4, DataType::UInt32},  {'u', 8, DataType::UInt64},    {'b', 1, DataType::Bool},
    {'c', 8, DataType::Complex64}, {'c', 16, DataType::Complex128},
};

// A tiny parser for the Python dict literal of a .npy header. Only what numpy writes is accepted:
// string keys, and values that are strings, True/False or tuples of integers.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  void parse(std::string* descr, bool* fortran, Shape* shape) {
    bool haveDescr = false, haveFortran = false, haveShape = false;
    skipSpace();
    expect('{');
    for (;;) {
      skipSpace();
      if (peek() == '}') break;
      std::string key = parseString();
      skipSpace();
      expect(':');
      skipSpace();
      if (key == "descr") {
        if (peek() == '[') fail("has a structured dtype (a list of fields); only plain arrays are supported");
        *descr = parseString();
        haveDescr = true;
      } else if (key == "fortran_order") {
        *fortran = parseBool();
        haveFortran = true;
      } else if (key == "shape") {
        *shape = parseShape();
        haveShape = true;
      } else {
        fail(fmt::format("has an unexpected header key '{}'", key));
      }
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skipSpace();
      if (peek() != '}') fail("has a malformed header (expected ',' or '}')");
    }
    expect('}');
    if (!haveDescr || !haveFortran || !haveShape)
      fail("has an incomplete header: it needs 'descr', 'fortran_order' and 'shape'");
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const { GRAFT_THROW("{} is not a valid .npy file: it {}", what_, msg); }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("has a malformed header (expected '{}' at offset {})", c, pos_));
    ++pos_;
  }
  std::string parseString() {
    char q = peek();
    if (q != '\'' && q != '"') fail(fmt::format("has a malformed header (expected a quoted string at offset {})", pos_));
    size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail("has a malformed header (an unterminated string)");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  bool parseBool() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("has a malformed header ('fortran_order' must be True or False)");
  }
  Shape parseShape() {
    expect('(');
    Shape shape;
    for (;;) {
      skipSpace();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("has a malformed shape (expected a non-negative integer)");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        int digit = peek() - '0';
        if (v > (INT64_MAX - digit) / 10) fail("has a dimension that does not fit in int64");
        v = v * 10 + digit;
        ++pos_;
      }
      if (peek() == 'L') ++pos_;  // Python 2's long literals
      shape.push_back(v);
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail("has a malformed shape (expected ',' or ')')");
    }
    expect(')');
    return shape;
  }

  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;
};

DataType dtypeFromDescr(const std::string& descr, const std::string& what) {
  auto bad = [&](const std::string& why) -> DataType { GRAFT_THROW("{}: unsupported .npy dtype '{}': {}", what, descr, why); };
  if (descr.size() < 3) return bad("expected a type code such as '<f4'");
  char order = descr[0], kind = descr[1];
  int size = 0;
  for (size_t i = 2; i < descr.size(); ++i) {
    if (descr[i] < '0' || descr[i] > '9' || size > 1000) return bad("expected a type code such as '<f4'");
    size = size * 10 + (descr[i] - '0');
  }
  if (order != '<' && order != '>' && order != '|' && order != '=')
    return bad("expected a byte order of '<', '>', '|' or '='");
  for (const auto& c : kCodes) {
    if (c.kind != kind || c.size != size) continue;
    if (order == '>' && size > 1)
      GRAFT_THROW("{} holds big-endian data ('{}'); graft reads little-endian .npy files only (convert with "
                  "a.astype(a.dtype.newbyteorder('<')))",
                  what, descr);
    return c.dtype;
  }
  if (kind == 'U' || kind == 'S' || kind == 'O')
    return bad("strings and Python objects are not supported (only numeric and bool arrays)");
  return bad("graft supports float16/32/64, int8..int64, uint8..uint64, bool and complex64/128");
}

}  // namespace

std::string npyDescr(DataType dt) {
  for (const auto& c : kCodes)
    if (c.dtype == dt) return fmt::format("{}{}{}", c.size == 1 ? '|' : '<', c.kind, c.size);
  GRAFT_THROW("{} arrays cannot be stored as .npy: numpy has no such type", dtypeName(dt));
}

NDArray parseNpy(const std::string& bytes, const std::string& what) {
  GRAFT_CHECK(bytes.size() >= kMagicLen + 2 && std::memcmp(bytes.data(), kMagic, kMagicLen) == 0,
              "{} is not a .npy file (it does not start with \\x93NUMPY)", what);
  auto major = static_cast<unsigned char>(bytes[6]);
  size_t lenBytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  GRAFT_CHECK(lenBytes, "{}: unsupported .npy format version {}.{} (graft reads 1.0, 2.0 and 3.0)", what, major,
              static_cast<unsigned char>(bytes[7]));
  size_t pre = kMagicLen + 2 + lenBytes;
  GRAFT_CHECK(bytes.size() >= pre, "{} is truncated: it ends inside the .npy preamble", what);
  uint64_t headerLen = 0;
  for (size_t i = 0; i < lenBytes; ++i)
    headerLen |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  GRAFT_CHECK(headerLen <= bytes.size() - pre, "{} is truncated: its header needs {} bytes, {} are left", what, headerLen,
              bytes.size() - pre);
  std::string descr;
  bool fortran = false;
  Shape shape;
  HeaderParser(std::string_view(bytes).substr(pre, headerLen), what).parse(&descr, &fortran, &shape);
  DataType dtype = dtypeFromDescr(descr, what);
  GRAFT_CHECK(!fortran, "{} is stored in Fortran (column-major) order; graft reads C-order arrays only (save "
              "np.ascontiguousarray(a) instead)", what);
  int64_t n;
  try {
    n = shapeNumel(shape);
  } catch (const Error& e) {
    GRAFT_THROW("{}: {}", what, e.what());
  }
  size_t esize = dtypeSize(dtype);
  uint64_t have = bytes.size() - pre - headerLen;
  GRAFT_CHECK(static_cast<uint64_t>(n) <= have / esize,
              "{} is truncated: shape {} of {} needs {} elements of {} bytes, the file has {} bytes of data", what,
              shapeToString(shape), dtypeNumpyName(dtype), n, esize, have);
  NDArray a = NDArray::uninitialized(dtype, shape);
  const char* src = bytes.data() + pre + headerLen;
  if (dtype == DataType::Bool) {
    // Bytes other than 0 and 1 are not valid bools in C++; numpy treats them as true.
    auto* dst = a.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] != 0;
  } else if (n) {
    std::memcpy(a.rawData(), src, static_cast<size_t>(n) * esize);
  }
  return a;
}

NDArray readNpy(const std::string& path) {
  support::checkRegularFile(".npy file", path);  // before the open: a FIFO or a device would block
  std::ifstream f(path, std::ios::binary);
  GRAFT_CHECK(f, "cannot open .npy file '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  GRAFT_CHECK(!f.bad(), "error reading .npy file '{}'", path);
  return parseNpy(ss.str(), "'" + path + "'");
}

std::string serializeNpy(const NDArray& a) {
  GRAFT_CHECK(a.valid(), "cannot write an empty (invalid) array as .npy");
  std::string shape;
  if (a.rank() == 1) shape = fmt::format("({},)", a.dim(0));
  else shape = fmt::format("({})", fmt::join(a.shape(), ", "));
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npyDescr(a.dtype()), shape);
  // numpy pads the header with spaces and a newline so that the data starts 64-byte aligned.
  size_t pre = kMagicLen + 2 + 2;
  size_t total = (pre + header.size() + 1 + 63) / 64 * 64;
  bool v2 = total - pre > 65535;
  if (v2) {
    pre += 2;
    total = (pre + header.size() + 1 + 63) / 64 * 64;
  }
  header.append(total - pre - header.size() - 1, ' ');
  header += '\n';
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  uint64_t len = header.size();
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  out += header;
  out.append(static_cast<const char*>(a.rawData()), a.nbytes());
  return out;
}

void writeNpy(const std::string& path, const NDArray& a) {
  std::string bytes = serializeNpy(a);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  GRAFT_CHECK(f, "cannot write '{}'", path);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.flush();
  GRAFT_CHECK(f.good(), "error writing '{}'", path);
}

}  // namespace graft::tools
