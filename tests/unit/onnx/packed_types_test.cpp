// onnx: tensors of the 4-bit types (INT4, UINT4, FLOAT4E2M1: two elements a byte) unpacked on
// import, one element per byte in memory (INT4 sign-extended), and packed again, first element in
// the low nibble, on export.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <graft/error.hpp>

#include <string>
#include <vector>

#include "onnx/proto_convert.hpp"

namespace graft::onnxio {
namespace {

::onnx::TensorProto packedProto(DataType dt, Shape shape, std::string raw) {
  ::onnx::TensorProto t;
  t.set_name("t");
  t.set_data_type(static_cast<int32_t>(dt));
  for (int64_t d : shape) t.add_dims(d);
  t.set_raw_data(std::move(raw));
  return t;
}

std::vector<uint8_t> bytesOf(const NDArray& a) {
  const auto* p = static_cast<const uint8_t*>(a.rawData());
  return std::vector<uint8_t>(p, p + a.numel());
}

TEST(OnnxPackedTypes, FourBitUnpacksLowNibbleFirstAndRoundTrips) {
  // INT4 [3]: 0x8F holds -1 (low nibble 0xF) then -8 (0x8); 0x07 holds 7 and a pad nibble.
  NDArray a = tensorFromProto(packedProto(DataType::Int4, {3}, std::string("\x8F\x07", 2)), "int4 tensor");
  EXPECT_EQ(a.dtype(), DataType::Int4);
  EXPECT_EQ(bytesOf(a), (std::vector<uint8_t>{0xFF, 0xF8, 0x07}));  // sign-extended bytes
  ::onnx::TensorProto back;
  tensorToProto(a, "t", &back);
  EXPECT_EQ(back.raw_data(), std::string("\x8F\x07", 2));
  // UINT4 does not sign-extend.
  NDArray u = tensorFromProto(packedProto(DataType::UInt4, {2}, std::string("\x8F", 1)), "uint4 tensor");
  EXPECT_EQ(bytesOf(u), (std::vector<uint8_t>{0x0F, 0x08}));
  tensorToProto(u, "t", &back);
  EXPECT_EQ(back.raw_data(), std::string("\x8F", 1));
  // A wrong byte count is refused by name.
  EXPECT_THROW(tensorFromProto(packedProto(DataType::Int4, {3}, std::string("\x01", 1)), "int4 tensor"), Error);
}

}  // namespace
}  // namespace graft::onnxio
