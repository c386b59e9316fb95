#pragma once
// Helpers `graft run`, `graft train` and `graft bench` share: a StepIO over prepared arrays,
// option parsing and random inputs (parseDims is in cli.hpp).
#include <graft/graft.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/check.hpp"

namespace graft::tools {

/// A StepIO over prepared per-batch arrays (handed out in order, per input) that keeps every
/// returned anchor chunk.
class ArrayStepIO : public IStepIO {
 public:
  std::map<TensorId, std::vector<NDArray>> inputs;
  std::map<TensorId, std::vector<NDArray>> outputs;

  void reset() {
    next_.clear();
    outputs.clear();
  }
  NDArray in(const TensorId& id, const TensorInfo&, bool) override {
    auto it = inputs.find(id);
    GRAFT_CHECK(it != inputs.end(), "no data for model input '{}'", id);
    size_t& k = next_[id];
    GRAFT_ASSERT(k < it->second.size(), "input '{}' read more than {} times in one step", id, it->second.size());
    return it->second[k++];
  }
  NDArray out(const TensorId& id, DataType dtype, const Shape& shape) override {
    NDArray a(dtype, shape);
    outputs[id].push_back(a);
    return a;
  }

 private:
  std::map<TensorId, size_t> next_;
};

/// The graph output ids of the ONNX file at `path` (throws graft::Error when it cannot be read).
std::vector<TensorId> graphOutputs(const std::string& path);
/// Splits "NAME=VALUE" of `option`; throws graft::Error saying `form` when it is not of that form.
std::pair<std::string, std::string> splitAssignment(const std::string& arg, const char* option, const char* form);
/// The files of `--input NAME=FILE.npy` arguments by input name; throws graft::Error on a malformed
/// or repeated one.
std::map<TensorId, std::string> inputFiles(const std::vector<std::string>& args);
/// The device `--device` names: "cpu" or "reference"; throws graft::Error for any other name.
std::shared_ptr<DeviceInfo> deviceNamed(const std::string& name);
/// Checks before a step that `copies` sets of the session's anchors fit into memory (the anchors
/// whose shapes are known after prepareDevice; symbolic ones are sized when they are produced):
/// graft::Error "<what> (the largest: 'id', FLOAT [..]) needs N bytes, but only M are available".
void checkAnchorMemory(const Session& session, int64_t copies, const std::string& what);
/// Random values for input `id`: floats uniform in [-1, 1), integers in [0, 10), fair bools.
NDArray randomArray(DataType dt, const Shape& shape, std::mt19937_64& rng, const std::string& id);

}  // namespace graft::tools
