// libFuzzer entry point for the ONNX importer: arbitrary bytes go through loadModelBytes and, when
// a model loads, into an InferenceSession on the reference device (fuzz_entries.hpp).
// graft::Error is the only acceptable way to refuse input; any other exception, crash, sanitizer
// report, leak or out-of-memory is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_entries.hpp"
#include "support/logging.hpp"

namespace {

// Also compile the model (shape inference, constant folding, kernel creation) when
// GRAFT_FUZZ_COMPILE=1: deeper, but it reaches the op families' kernels too.
bool compileToo() {
  static const bool on = [] {
    const char* v = std::getenv("GRAFT_FUZZ_COMPILE");
    return v && std::string(v) == "1";
  }();
  return on;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graft::support::setLogLevel(graft::support::LogLevel::Off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    graft::fuzz::importModel(std::string(reinterpret_cast<const char*>(data), size), compileToo());
  } catch (const graft::InternalError&) {
    throw;  // a finding
  } catch (const graft::Error&) {
    // The expected outcome for malformed models.
  }
  return 0;
}
