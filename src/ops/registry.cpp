#include "ops/registry.hpp"

#include "ops/shape_util.hpp"

namespace graft::ops {

Registry& Registry::instance() {
  static Registry r;
  return r;
}

OpDef& Registry::add(const std::string& type, const std::string& domain) {
  auto& d = ops_[{domain, type}];
  d.domain = domain;
  d.type = type;
  return d;
}

const OpDef* Registry::find(const std::string& domain, const std::string& type) const {
  auto it = ops_.find({domain == "ai.onnx" ? "" : domain, type});
  return it == ops_.end() ? nullptr : &it->second;
}

std::vector<const OpDef*> Registry::all() const {
  std::vector<const OpDef*> out;
  for (const auto& [k, d] : ops_) out.push_back(&d);
  return out;
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
