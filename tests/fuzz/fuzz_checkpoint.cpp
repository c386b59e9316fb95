// libFuzzer entry point for checkpoint loading: arbitrary bytes as the weights of a training
// session (resetHostWeights) and as a checkpoint a new TrainingSession resumes from, optimizer
// state included (fuzz_entries.hpp). graft::Error is the only acceptable way to refuse input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_entries.hpp"
#include "support/logging.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graft::support::setLogLevel(graft::support::LogLevel::Off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    graft::fuzz::loadCheckpoint(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const graft::InternalError&) {
    throw;  // a finding
  } catch (const graft::Error&) {
    // The expected outcome for malformed checkpoints.
  }
  return 0;
}
