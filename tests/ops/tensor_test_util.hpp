#pragma once
// Small helpers shared by the tests of the data-movement op families (indexing, select,
// slicing, generate, einsum, shape).
#include <string>
#include <vector>

#include "op_case_util.hpp"

namespace graft::testing {

/// An OpCase with every field set (brace-initialising one leaves fields out, which -Wextra flags).
inline OpCase op(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}, int outputs = 1) {
  return opCase(type, std::move(in), std::move(a), outputs);
}

/// Passes when running `c` throws graft::Error (not InternalError) whose message names the node
/// ("node 'node'", the name the test graphs give it) and contains `fragment`.
inline ::testing::AssertionResult throwsNamingNode(const OpCase& c, const std::string& fragment = "") {
  try {
    runReference(c);
  } catch (const InternalError& e) {
    return ::testing::AssertionFailure() << "threw InternalError: " << e.what();
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.find("node 'node'") == std::string::npos)
      return ::testing::AssertionFailure() << "message does not name the node: " << m;
    if (!fragment.empty() && m.find(fragment) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << fragment << "': " << m;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-graft exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

/// A 1-D INT64 tensor.
inline NDArray i64(std::vector<int64_t> v) {
  auto n = static_cast<int64_t>(v.size());
  return arr<int64_t>({n}, std::move(v));
}

/// 0, 1, 2, ... as T in the given shape.
template <class T>
NDArray iota(Shape shape) {
  NDArray a(ops::dtypeOf<T>(), std::move(shape));
  for (int64_t i = 0; i < a.numel(); ++i) a.data<T>()[i] = static_cast<T>(i);
  return a;
}

/// Strings "s0", "s1", ... in the given shape.
inline NDArray strIota(Shape shape) {
  NDArray a(DataType::String, std::move(shape));
  for (int64_t i = 0; i < a.numel(); ++i) a.data<std::string>()[i] = "s" + std::to_string(i);
  return a;
}

}  // namespace graft::testing
