#include "backends/cpu/bf16.hpp"

namespace graft::backends::cpu {
namespace {
thread_local bool bf16On = false;
}  // namespace

bool bf16Compute() { return bf16On; }

Bf16Scope::Bf16Scope(bool on) : saved_(bf16On) { bf16On = on; }
Bf16Scope::~Bf16Scope() { bf16On = saved_; }

std::string bf16ImplementationNote(const std::string& impl, bool ranBf16, const std::string& why) {
  return impl + (ranBf16 ? ", bf16" : ", f32: " + why);
}

bool isReferenceImplementation(const std::string& impl) { return impl.rfind("ref", 0) == 0; }

}  // namespace graft::backends::cpu
