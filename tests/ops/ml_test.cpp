// Tests of src/ops/ml.cpp: the ai.onnx.ml ops Binarizer, ArrayFeatureExtractor and LabelEncoder,
// against hand-computed values (the ONNX node cases' own examples among them).
#include <cmath>

#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray ml1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return runReference(OpCase{type, std::move(in), std::move(a), 1, "ai.onnx.ml"}).at(0);
}

TEST(ML_Binarizer, OneAboveTheThreshold) {
  auto x = arr<float>({5}, {-1, 1, 1.5f, NAN, 3});
  EXPECT_TRUE(allClose(ml1("Binarizer", {x}, attrs({{"threshold", 1.0f}})), arr<float>({5}, {0, 0, 1, 0, 1})));
  EXPECT_TRUE(allClose(ml1("Binarizer", {arr<int64_t>({3}, {-2, 0, 5})}), arr<int64_t>({3}, {0, 0, 1})));
}

TEST(ML_ArrayFeatureExtractor, GathersAlongTheLastAxis) {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
  auto x = arr<float>({3, 4}, v);
  EXPECT_TRUE(
      allClose(ml1("ArrayFeatureExtractor", {x, arr<int64_t>({2}, {0, 1})}), arr<float>({3, 2}, {0, 1, 4, 5, 8, 9})));
  // A 1-D X gives one row; the indices are flattened.
  EXPECT_TRUE(
      allClose(ml1("ArrayFeatureExtractor", {arr<std::string>({3}, {"a", "b", "c"}), arr<int64_t>({1, 2}, {2, 0})}),
               arr<std::string>({1, 2}, {"c", "a"})));
  EXPECT_THROW(ml1("ArrayFeatureExtractor", {x, arr<int64_t>({1}, {4})}), Error);
}

TEST(ML_LabelEncoder, ListsAndTensors) {
  auto x = arr<std::string>({5}, {"a", "b", "d", "c", "g"});
  auto keys = std::vector<std::string>{"a", "b", "c"};
  EXPECT_TRUE(allClose(ml1("LabelEncoder", {x},
                           attrs({{"keys_strings", keys},
                                  {"values_int64s", std::vector<int64_t>{0, 1, 2}},
                                  {"default_int64", int64_t{42}}})),
                       arr<int64_t>({5}, {0, 1, 42, 2, 42})));
  // Without a default: -1.
  EXPECT_TRUE(allClose(
      ml1("LabelEncoder", {x}, attrs({{"keys_strings", keys}, {"values_int64s", std::vector<int64_t>{0, 1, 2}}})),
      arr<int64_t>({5}, {0, 1, -1, 2, -1})));
  // Tensor values of another type, with their default tensor.
  EXPECT_TRUE(allClose(ml1("LabelEncoder", {x},
                           attrs({{"keys_tensor", arr<std::string>({3}, keys)},
                                  {"values_tensor", arr<int16_t>({3}, {0, 1, 2})},
                                  {"default_tensor", arr<int16_t>({1}, {42})}})),
                       arr<int16_t>({5}, {0, 1, 42, 2, 42})));
  // Float keys: NaN matches NaN.
  EXPECT_TRUE(allClose(ml1("LabelEncoder", {arr<float>({3}, {NAN, 2, 7})},
                           attrs({{"keys_floats", std::vector<float>{2, NAN}},
                                  {"values_strings", std::vector<std::string>{"two", "nan"}}})),
                       arr<std::string>({3}, {"nan", "two", "_Unused"})));
  EXPECT_THROW(ml1("LabelEncoder", {x}, attrs({{"keys_strings", keys}})), Error);  // no values
  EXPECT_THROW(ml1("LabelEncoder", {arr<int64_t>({1}, {1})},
                   attrs({{"keys_strings", keys}, {"values_int64s", std::vector<int64_t>{0, 1, 2}}})),
               Error);  // int64 input, string keys
}

}  // namespace
}  // namespace graft::testing
