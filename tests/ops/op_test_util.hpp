#pragma once
// Helpers for op tests: build a one-node graph, run it on the reference kernels or through a
// backend, compare results. Test suites are named after the op they test (TEST(Relu, ...)),
// which is how the op-coverage check finds an op's tests.
#include <gtest/gtest.h>

#include <graft/ndarray.hpp>

#include <random>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "ir/graph.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/evaluate.hpp"

namespace graft::testing {

/// One op application: type, inputs (an invalid NDArray for an omitted optional input),
/// attributes and the number of outputs.
struct OpCase {
  std::string type;
  std::vector<NDArray> inputs;
  ir::Attributes attrs = {};
  int numOutputs = 1;
  std::string domain = {};  // empty: the default ONNX domain
  /// The graph's ai.onnx opset (what ONNX's shape inference reads the node as); 0: ir::Graph's
  /// default. Cases of opset 18-28 attributes set it (kCanonicalOpset).
  int64_t opset = 0;
};

/// A graph holding the single node of `c`, with typed inputs (constant when `constInputs`).
std::unique_ptr<ir::Graph> singleNodeGraph(const OpCase& c, bool constInputs = false);
/// Same, choosing per input whether it is a constant (true) or a graph input.
std::unique_ptr<ir::Graph> singleNodeGraph(const OpCase& c, const std::vector<bool>& constInputs);
/// Runs the reference kernel of c's op on c's inputs.
std::vector<NDArray> runReference(const OpCase& c);
/// Runs c through shape inference and a backend's compiled plan (as a session would).
std::vector<NDArray> runOnBackend(const OpCase& c, backends::Backend& backend);
/// Output types ONNX (or the op's InferFn) infers for c.
std::vector<ir::ValueType> inferTypes(const OpCase& c);

/// An array from values: arr<float>({2, 2}, {1, 2, 3, 4}).
template <class T>
NDArray arr(Shape shape, std::vector<T> values) {
  NDArray a(ops::dtypeOf<T>(), std::move(shape));
  EXPECT_EQ(static_cast<int64_t>(values.size()), a.numel()) << "arr(): wrong number of values";
  for (int64_t i = 0; i < a.numel() && i < static_cast<int64_t>(values.size()); ++i) a.data<T>()[i] = values[i];
  return a;
}
template <class T>
NDArray scalar(T v) {
  return arr<T>({}, {v});
}
/// Uniform random values in [lo, hi) (integers: rounded), reproducible from `seed`.
NDArray randomArray(DataType dt, Shape shape, uint64_t seed, double lo = -1.0, double hi = 1.0);
/// Element values as doubles (for comparisons and messages).
std::vector<double> toDoubles(const NDArray& a);

/// Fails the test unless `got` matches `want` in dtype, shape, and every element within
/// atol + rtol * |want| (NaN matches NaN).
::testing::AssertionResult allClose(const NDArray& got, const NDArray& want, double rtol = 1e-5, double atol = 1e-6);

/// Checks the gradient (VJP) of c's op against central finite differences: the scalar function
/// is sum_i sum(out_i * r_i) over the floating-point outputs with fixed random r_i; the inputs
/// in `wrt` (which must be DOUBLE) are differentiated. Passes when every gradient element is
/// within atol + rtol * |numeric|.
::testing::AssertionResult gradCheck(const OpCase& c, const std::vector<int>& wrt, double rtol = 1e-5, double atol = 1e-7,
                                     double eps = 1e-6);
/// gradCheck with every input (indices, shapes, pads...) fed at run time instead of constant, so
/// that VJPs also take their paths for computed (non-constant) inputs.
::testing::AssertionResult gradCheckFed(const OpCase& c, const std::vector<int>& wrt, double rtol = 1e-5,
                                        double atol = 1e-7, double eps = 1e-6);

/// The analytic gradients (VJPs) of loss = sum_i sum(out_i * dys[i]) with respect to the inputs
/// in `wrt`, in order (an invalid dys[i] leaves output i out of the loss). Inputs in `wrt` and
/// `fed` are graph inputs fed at run time (so the VJP cannot read their values), the others
/// constants.
std::vector<NDArray> vjpOf(const OpCase& c, const std::vector<int>& wrt, const std::vector<NDArray>& dys,
                           const std::vector<int>& fed = {});

/// Attribute helpers.
ir::Attributes attrs(std::initializer_list<std::pair<std::string, ir::AttrValue>> list);

}  // namespace graft::testing
