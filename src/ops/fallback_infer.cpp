#include "ops/fallback_infer.hpp"

#include <map>

#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

std::map<std::pair<std::string, std::string>, InferFn>& table() {
  static std::map<std::pair<std::string, std::string>, InferFn> t;
  return t;
}

}  // namespace

void setFallbackInfer(const std::string& domain, const std::string& type, InferFn fn) {
  table()[{domain, type}] = std::move(fn);
}

const InferFn* findFallbackInfer(const std::string& domain, const std::string& type) {
  auto it = table().find({domain == "ai.onnx" ? "" : domain, type});
  return it == table().end() ? nullptr : &it->second;
}

InferFn sameTypeAsInput(size_t i) {
  return [i](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
    return std::vector<ir::ValueType>(n.numOutputs(), in.at(i));
  };
}

InferFn broadcastOfInputs() {
  return [](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
    DataType dt = in.at(0).info.dataType();
    std::vector<Shape> shapes;
    for (const auto& t : in) {
      if (!t.info.isStatic()) return std::vector<ir::ValueType>{ir::ValueType::tensor(TensorInfo::unranked(dt))};
      shapes.push_back(t.info.shape());
    }
    return std::vector<ir::ValueType>{ir::ValueType::tensor(TensorInfo(dt, broadcastShapes(shapes, n.describe())))};
  };
}

}  // namespace graft::ops
