#pragma once
// Bytes read from a model file are never trusted as text: every name (tensors, nodes, attributes,
// graphs, domains, metadata) must be valid UTF-8 before the importer or the Python bindings use it.
#include <string>
#include <string_view>

namespace onnx {
class ModelProto;
}

namespace graft::onnxio {

/// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool isValidUtf8(std::string_view s);
/// `s` with every byte outside printable ASCII written as \xNN (and backslashes doubled).
std::string escapeBytes(std::string_view s);
/// Throws graft::Error naming `source`, the node (or graph, initializer, attribute...) and the
/// offending bytes, escaped, at the first name of `m` that is not valid UTF-8.
void checkNamesAreUtf8(const ::onnx::ModelProto& m, const std::string& source);

}  // namespace graft::onnxio
