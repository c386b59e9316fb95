#pragma once
// Small facts about ONNX protos that several import steps share.
#include <onnx/onnx_pb.h>

#include <string>
#include <unordered_map>

namespace graft::onnxio {

/// The default ONNX domain, spelled either way.
inline bool isOnnxDomain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

/// The declared types of a graph's inputs, outputs and value_info, by name (this graph only).
inline void collectTypes(const ::onnx::GraphProto& g, std::unordered_map<std::string, ::onnx::TypeProto>* types) {
  for (const auto& v : g.input()) (*types)[v.name()] = v.type();
  for (const auto& v : g.output()) (*types)[v.name()] = v.type();
  for (const auto& v : g.value_info()) (*types)[v.name()] = v.type();
}

}  // namespace graft::onnxio
