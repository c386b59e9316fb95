#pragma once
// Node attributes: a name-ordered map of typed values. Ops parse them once, at compile time,
// into typed structs; kernels never look attributes up by name.
#include <graft/ndarray.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/value_type.hpp"

namespace graft::ir {

class Graph;
using GraphPtr = std::shared_ptr<Graph>;

using AttrValue = std::variant<int64_t, float, std::string, NDArray, GraphPtr, ValueType, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, std::vector<NDArray>, std::vector<GraphPtr>>;

/// Human-readable name of the alternative held: "int", "float", "string", "tensor", "graph", "type",
/// "ints", "floats", "strings", "tensors", "graphs".
std::string_view attrKindName(const AttrValue& v);

class Attributes {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  void erase(const std::string& name) { values_.erase(name); }
  const AttrValue* find(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, AttrValue>& all() const { return values_; }
  bool empty() const { return values_.empty(); }
  size_t size() const { return values_.size(); }

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace graft::ir
