#pragma once
// The cpu backend's kernel table: fast kernels (oneDNN primitives, vectorised loops) register
// here per op, each with a predicate saying which nodes (types, shapes, attributes) it handles.
// The backend takes the first matching entry of highest priority and falls back to the op's
// reference kernel.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "ops/kernel.hpp"

namespace graft::backends::cpu {

struct CpuKernelDef {
  std::string domain;  ///< "" for ai.onnx
  std::string type;
  /// A short name for profiles and `graft inspect` ("onednn_conv", "vec_binary", ...).
  std::string name;
  /// Whether this kernel handles the node (typed, shapes inferred for the plan's input shapes).
  std::function<bool(const ir::Node&)> supports;
  /// Builds the kernel. It may still decline (return an empty KernelFn) when it finds at compile
  /// time that it cannot serve the node (oneDNN has no implementation for that combination): the
  /// backend then tries the next registered kernel, and the reference kernel after the last. A
  /// factory never calls the reference itself, so that the recorded choice is the real one.
  ops::KernelFactory factory;
  int priority = 0;
  /// Honours bf16Compute() (backends/cpu/bf16.hpp). In a bf16 backend, the kernels that do are
  /// tried before the others of the same op and priority.
  bool bf16 = false;
  /// Takes nodes only under bf16Compute() (a bf16 kernel of graft's own with no float32 form):
  /// the backend test matrix groups its cases under a bf16 backend.
  bool bf16Only = false;
};

class CpuKernelRegistry {
 public:
  static CpuKernelRegistry& instance();
  void add(CpuKernelDef def);
  /// The first kernel whose supports() accepts `n`, or nullptr when only the reference kernel
  /// applies. (Its factory may still decline: the kernel that runs is the compiled step's.)
  const CpuKernelDef* find(const ir::Node& n) const;
  /// Every kernel whose supports() accepts `n`, in the order the backend tries them.
  std::vector<const CpuKernelDef*> candidates(const ir::Node& n) const;
  std::vector<const CpuKernelDef*> all() const;

 private:
  std::map<std::pair<std::string, std::string>, std::vector<CpuKernelDef>> defs_;
};

/// Called by a factory: the implementation its kernel library picked (oneDNN's impl_info_str()).
/// The backend records it, with the kernel's name, in the compiled step. Per thread: a factory
/// runs on the compiling thread.
void noteImplementation(std::string name);
/// What the last factory on this thread noted ("" when none), clearing it.
std::string takeImplementation();

}  // namespace graft::backends::cpu

/// Registers fast cpu kernels at static-initialisation time:
///   GRAFT_REGISTER_CPU_KERNELS(onednn_conv) { r.add({"", "Conv", "onednn_conv", supportsConv, makeConv}); }
#define GRAFT_REGISTER_CPU_KERNELS(name)                                                             \
  static void graftRegisterCpu_##name(::graft::backends::cpu::CpuKernelRegistry& r);                 \
  [[maybe_unused]] static const bool graftCpuRegistered_##name =                                     \
      (graftRegisterCpu_##name(::graft::backends::cpu::CpuKernelRegistry::instance()), true);       \
  static void graftRegisterCpu_##name(::graft::backends::cpu::CpuKernelRegistry& r)
