#pragma once
// Helpers `graft run` and `graft bench` share: option parsing and random inputs (parseDims is in
// cli.hpp).
#include <graft/graft.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace graft::tools {

/// The graph output ids of the ONNX file at `path` (throws graft::Error when it cannot be read).
std::vector<TensorId> graphOutputs(const std::string& path);
/// Splits "NAME=VALUE" of `option`; throws graft::Error saying `form` when it is not of that form.
std::pair<std::string, std::string> splitAssignment(const std::string& arg, const char* option, const char* form);
/// Random values for input `id`: floats uniform in [-1, 1), integers in [0, 10), fair bools.
NDArray randomArray(DataType dt, const Shape& shape, std::mt19937_64& rng, const std::string& id);

}  // namespace graft::tools
