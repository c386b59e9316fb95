#pragma once
// Type inference for standard ops newer than some linked ONNX libraries (Debian's onnx 1.12 stops
// at opset 17): used only when ONNX's schema inference infers no output at all, so with a current
// library ONNX's own inference wins. Kept beside the registry rather than in OpDef so that the
// registry's layout does not change for it.
#include <string>

#include "ops/registry.hpp"

namespace graft::ops {

/// Registers `fn` as the fallback inference of (domain, type).
void setFallbackInfer(const std::string& domain, const std::string& type, InferFn fn);
/// The fallback inference of (domain, type), or nullptr.
const InferFn* findFallbackInfer(const std::string& domain, const std::string& type);
/// Every output has input `i`'s type (shape-preserving ops).
InferFn sameTypeAsInput(size_t i);
/// Output 0 has input 0's element type and the inputs' broadcast shape.
InferFn broadcastOfInputs();

}  // namespace graft::ops
