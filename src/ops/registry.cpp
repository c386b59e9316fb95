#include "ops/registry.hpp"

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

bool repeatable(const ir::Node& n) {
  const OpDef* d = Registry::instance().find(n);
  return d && !d->traits.nondeterministic && !d->traits.sideEffects && n.subgraphs().empty();
}

std::vector<const OpDef*> Registry::all() const {
  std::vector<const OpDef*> out;
  for (const auto& [k, d] : ops_) out.push_back(&d);
  return out;
}

}  // namespace graft::ops
