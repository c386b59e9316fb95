#pragma once
// Data handling of `graft train`: named data files, element-type conversion to the model's
// inputs, mini-batches gathered by sample index, and classification accuracy.
#include <graft/ndarray.hpp>

#include <string>
#include <vector>

namespace graft::tools {

/// A data array named after the model input it feeds; its first axis counts samples.
struct NamedArray {
  std::string name;
  std::string path;
  NDArray array;
  std::string note;  ///< how it was converted, if it was ("converted from UINT8")
};

/// Parses "NAME=FILE" arguments of `option` (for messages: "--input") and reads each file with
/// readArrayFile. Throws graft::Error for a malformed argument, a name given twice, a file that
/// cannot be read, or an array of rank 0 (there is no samples axis).
std::vector<NamedArray> readNamedArrays(const std::vector<std::string>& args, const std::string& option);

/// `a` converted to `to` for a model input. Integers and bools convert to floating-point types,
/// integers to integer types when every value fits; floats never convert to integers. `what`
/// names the array in messages. Returns `a` itself when it already has type `to`.
NDArray convertForInput(const NDArray& a, DataType to, const std::string& what);

/// Copies rows indices[0..count) of `src` (rows along the first axis) into `dst`, which holds
/// `count` rows of the same size and type.
void gatherRows(const NDArray& src, const int64_t* indices, int64_t count, NDArray& dst);

/// Checks that integer `labels` are class indices in [0, classes); throws graft::Error naming
/// `what`, the first bad value and its position otherwise.
void checkClassLabels(const NDArray& labels, int64_t classes, const std::string& what);

/// Number of positions where the argmax of `scores` along `axis` equals `labels`, whose shape is
/// that of `scores` without `axis` (int64 labels; floating-point scores).
int64_t countCorrect(const NDArray& scores, const NDArray& labels, int64_t axis);

}  // namespace graft::tools
