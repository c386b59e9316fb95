// tools: .npy reading and writing.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "../unit_test_util.hpp"
#include "npy.hpp"
#include "support/float16.hpp"

namespace graft::tools {
namespace {

using testing::errorOf;

// A .npy file as numpy writes it: magic, version, header length, header, data.
std::string npyBytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  size_t pre = major == 1 ? 10 : 12;
  while ((pre + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <class T>
std::string raw(std::vector<T> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

TEST(Npy, ReadsWhatNumpyWrites) {
  NDArray a = parseNpy(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw<float>({1, 2, 3, 4, 5, 6})));
  EXPECT_EQ(a.dtype(), DataType::Float);
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.data<float>()[5], 6.0f);
  NDArray s = parseNpy(npyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", raw<int64_t>({-7})));
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.data<int64_t>()[0], -7);
  NDArray v = parseNpy(npyBytes("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", "abc"));
  EXPECT_EQ(v.dtype(), DataType::UInt8);
  EXPECT_EQ(v.shape(), Shape{3});
  NDArray z = parseNpy(npyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4), }", ""));
  EXPECT_EQ(z.numel(), 0);
  // Version 2 headers, keys in another order, double quotes, Python 2 longs.
  NDArray w = parseNpy(npyBytes("{\"shape\": (2L,), \"fortran_order\": False, \"descr\": \"<i2\"}", raw<int16_t>({3, -4}), 2));
  EXPECT_EQ(w.dtype(), DataType::Int16);
  EXPECT_EQ(w.data<int16_t>()[1], -4);
}

TEST(Npy, EveryDtypeRoundTrips) {
  struct Case {
    DataType dt;
    std::string descr;
  };
  std::vector<Case> cases = {{DataType::Float, "<f4"},      {DataType::Double, "<f8"},    {DataType::Float16, "<f2"},
                             {DataType::Int8, "|i1"},       {DataType::Int16, "<i2"},     {DataType::Int32, "<i4"},
                             {DataType::Int64, "<i8"},      {DataType::UInt8, "|u1"},     {DataType::UInt16, "<u2"},
                             {DataType::UInt32, "<u4"},     {DataType::UInt64, "<u8"},    {DataType::Bool, "|b1"},
                             {DataType::Complex64, "<c8"},  {DataType::Complex128, "<c16"}};
  for (const auto& c : cases) {
    EXPECT_EQ(npyDescr(c.dt), c.descr);
    NDArray a(c.dt, {3, 2});
    auto* bytes = static_cast<unsigned char*>(a.rawData());
    for (size_t i = 0; i < a.nbytes(); ++i) bytes[i] = c.dt == DataType::Bool ? (i % 3 == 0) : static_cast<unsigned char>(i * 37 + 1);
    std::string file = serializeNpy(a);
    EXPECT_EQ(file.find(c.descr), 21u) << c.descr;  // the 10-byte preamble, then "{'descr': '"
    EXPECT_EQ((file.find('\n') + 1) % 64, 0u) << "data is 64-byte aligned";
    NDArray b = parseNpy(file);
    EXPECT_EQ(b.dtype(), c.dt);
    EXPECT_EQ(b.shape(), a.shape());
    EXPECT_EQ(std::memcmp(a.rawData(), b.rawData(), a.nbytes()), 0) << c.descr;
  }
  // Scalars and 1-d arrays use Python's tuple syntax.
  EXPECT_NE(serializeNpy(NDArray(DataType::Float, {})).find("'shape': (), "), std::string::npos);
  EXPECT_NE(serializeNpy(NDArray(DataType::Float, {5})).find("'shape': (5,), "), std::string::npos);
  EXPECT_NE(errorOf([] { serializeNpy(NDArray(DataType::BFloat16, {1})); }).find("numpy has no such type"), std::string::npos);
}

TEST(Npy, Float16ValuesSurvive) {
  NDArray a(DataType::Float16, {2});
  a.data<Half>()[0] = Half(1.5f);
  a.data<Half>()[1] = Half(-65504.0f);
  NDArray b = parseNpy(serializeNpy(a));
  EXPECT_EQ(static_cast<float>(b.data<Half>()[0]), 1.5f);
  EXPECT_EQ(static_cast<float>(b.data<Half>()[1]), -65504.0f);
}

TEST(Npy, BoolBytesAreNormalised) {
  NDArray a = parseNpy(npyBytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x01\x07", 3)));
  const auto* p = static_cast<const unsigned char*>(a.rawData());
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[1], 1);
  EXPECT_EQ(p[2], 1);
}

TEST(Npy, LargeHeadersUseVersion2) {
  Shape many(25000, 1);  // "(1, 1, ...)": a header longer than 64 KiB
  NDArray a(DataType::Int8, many);
  std::string file = serializeNpy(a);
  EXPECT_EQ(file[6], 2);
  NDArray b = parseNpy(file);
  EXPECT_EQ(b.rank(), 25000);
}

TEST(Npy, ClearErrors) {
  auto err = [](const std::string& bytes) { return errorOf([&] { parseNpy(bytes, "'in.npy'"); }); };
  std::string f4 = raw<float>({1, 2});
  EXPECT_NE(err(npyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", f4)).find("Fortran"),
            std::string::npos);
  std::string be = err(npyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f4));
  EXPECT_NE(be.find("big-endian"), std::string::npos) << be;
  EXPECT_NE(be.find("'in.npy'"), std::string::npos) << be;
  // A big-endian byte order means nothing for 1-byte types.
  EXPECT_EQ(parseNpy(npyBytes("{'descr': '>i1', 'fortran_order': False, 'shape': (1,), }", "x")).dtype(), DataType::Int8);
  std::string trunc = err(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4));
  EXPECT_NE(trunc.find("truncated"), std::string::npos) << trunc;
  EXPECT_NE(trunc.find("needs 3 elements of 4 bytes, the file has 8"), std::string::npos) << trunc;
  std::string whole = npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f4);
  EXPECT_NE(err(whole.substr(0, 9)).find("truncated"), std::string::npos);
  EXPECT_NE(err(whole.substr(0, 40)).find("truncated"), std::string::npos);
  EXPECT_NE(err("PK\x03\x04 a zip file").find("not a .npy file"), std::string::npos);
  EXPECT_NE(err("").find("not a .npy file"), std::string::npos);
  std::string v9 = whole;
  v9[6] = 9;
  EXPECT_NE(err(v9).find("version 9.0"), std::string::npos);
  EXPECT_NE(err(npyBytes("{'descr': '<U5', 'fortran_order': False, 'shape': (1,), }", std::string(20, 'a'))).find("strings"),
            std::string::npos);
  EXPECT_NE(err(npyBytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", f4)).find("structured"),
            std::string::npos);
  EXPECT_NE(err(npyBytes("{'descr': '<f4', 'shape': (2,), }", f4)).find("incomplete header"), std::string::npos);
  EXPECT_NE(err(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", f4)).find("malformed shape"),
            std::string::npos);
  EXPECT_NE(err(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", f4))
                .find("does not fit in int64"),
            std::string::npos);
  std::string overflow =
      err(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", f4));
  EXPECT_NE(overflow.find("int64"), std::string::npos) << overflow;
  EXPECT_NE(err(npyBytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", f4)).find("True or False"),
            std::string::npos);
  EXPECT_NE(err(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", f4)).find("'extra'"),
            std::string::npos);
  EXPECT_NE(err(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", f4)).find("malformed"),
            std::string::npos);
}

TEST(Npy, FilesOnDisk) {
  testing::TempDir dir;
  NDArray a(DataType::Int32, {2, 2});
  for (int i = 0; i < 4; ++i) a.data<int32_t>()[i] = i * i;
  writeNpy(dir.file("a.npy"), a);
  NDArray b = readNpy(dir.file("a.npy"));
  EXPECT_EQ(b.data<int32_t>()[3], 9);
  std::string msg = errorOf([&] { readNpy(dir.file("missing.npy")); });
  EXPECT_NE(msg.find("missing.npy"), std::string::npos) << msg;
  msg = errorOf([&] { writeNpy(dir.file("no/such/dir/a.npy"), a); });
  EXPECT_NE(msg.find("cannot write"), std::string::npos) << msg;
}

}  // namespace
}  // namespace graft::tools
