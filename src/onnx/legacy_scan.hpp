#pragma once
// Scan before opset 9 (import.cpp calls these around the opset conversion).
// Scan-8 has a leading batch axis (and an optional sequence_lens input). ONNX 1.12's 8->9 adapter
// only strips the first dimension from the recorded shapes and drops inputs whose shapes it does
// not know, which changes what the model computes. graft instead remembers each Scan-8 node before
// conversion and afterwards rewrites it exactly: an outer Scan over the batch axis whose body runs
// the original Scan over the sequence axis.

#include <onnx/onnx_pb.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace graft::onnxio {

struct LegacyScan {
  std::vector<std::string> inputs;                           // as written: sequence_lens, states, scan inputs
  std::unordered_map<std::string, ::onnx::TypeProto> types;  // declared types of its inputs and outputs
};
using LegacyScans = std::unordered_map<std::string, LegacyScan>;  // keyed by first output

/// Remembers every Scan node of `g` and its subgraphs (before the opset conversion).
void recordLegacyScans(const ::onnx::GraphProto& g, LegacyScans* out);
/// Rewrites each remembered Scan-8 node (after the conversion) as an outer Scan over the batch
/// axis whose body runs the original Scan over the sequence axis; `counter` numbers new names.
void rewriteLegacyScans(::onnx::GraphProto* g, const LegacyScans& scans, const std::string& source, int* counter);

}  // namespace graft::onnxio
