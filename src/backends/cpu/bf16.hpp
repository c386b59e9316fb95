#pragma once
// bf16 compute for the cpu backend's matmuls and convolutions (SessionOptions.enableBf16): the
// backend sets the switch while a kernel factory runs, and the kernels that honour it (their
// CpuKernelDef::bf16) build oneDNN primitives that read bf16 operands, accumulate in float32 and
// write float32 outputs. Operands are converted where they enter the primitive: constant weights
// once at compile time, activations (and weights a training step updates) on every run. Every
// other op, and every tensor between ops, stays float32 (docs/cpu-backend.md).
#include <string>

namespace graft::backends::cpu {

/// True while a kernel for a bf16 session is being compiled on this thread (the cpu backend's
/// chooseKernel); kernels read it in their factory, never at run time.
bool bf16Compute();

/// Sets bf16Compute() on this thread for its lifetime (restoring the previous value).
class Bf16Scope {
 public:
  explicit Bf16Scope(bool on);
  ~Bf16Scope();
  Bf16Scope(const Bf16Scope&) = delete;
  Bf16Scope& operator=(const Bf16Scope&) = delete;

 private:
  bool saved_;
};

/// What a kernel records as its implementation under bf16Compute(): oneDNN's name and ", bf16"
/// when the primitive computes in bf16, or ", f32: <why>" when the kernel runs this node in
/// float32 (by default: oneDNN has no fast bf16 implementation).
std::string bf16ImplementationNote(const std::string& impl, bool ranBf16,
                                   const std::string& why = "oneDNN has no fast bf16 implementation");

/// True for oneDNN's reference implementations ("ref:any", "ref_int8:..."): a bf16 primitive that
/// gets one is slower than the float32 kernel, so kernels fall back to float32 then.
bool isReferenceImplementation(const std::string& impl);

}  // namespace graft::backends::cpu
