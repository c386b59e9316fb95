#pragma once
// A compiled graph: a fixed schedule of kernels over numbered value slots, with liveness-based
// release of intermediate values. Subgraphs compile to nested Executables.
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.hpp"
#include "ops/kernel.hpp"
#include "plan/memory.hpp"

namespace graft::plan {

/// Supplies kernels for nodes; implemented by the backends.
/// Which kernel a provider chose for a node: its name ("reference", "onednn_conv", ...) and the
/// implementation a kernel library picked inside it (oneDNN's impl_info_str(); "" when none).
struct KernelChoice {
  std::string kernel, implementation;
};

class KernelProvider {
 public:
  virtual ~KernelProvider() = default;
  virtual std::string name() const = 0;
  /// True when a kernel exists for this node.
  virtual bool supports(const ir::Node& n) const = 0;
  virtual ops::KernelFn createKernel(ops::CompileContext& ctx) = 0;
  /// createKernel, saying which kernel it chose (compile() records it in the step; profiles and
  /// `graft inspect --kernels` read it there). By default: the provider's name.
  virtual ops::KernelFn chooseKernel(ops::CompileContext& ctx, KernelChoice& choice) {
    choice = {name(), ""};
    return createKernel(ctx);
  }
};

struct Step {
  ops::KernelFn fn;
  std::vector<int> in, out, implicit;
  std::vector<int> release;  ///< slots whose last use is this step
  const ir::Node* node = nullptr;
  /// The kernel the step runs (CompileContext::kernelName) and the library's implementation
  /// inside it ("" when none).
  std::string kernel, implementation;
  std::string kernelLabel;  ///< "kernel" or "kernel (implementation)": what profiles show
  /// The op type profiles file the step under: the node's type, a ChannelBlocked one with the op
  /// it wraps ("ChannelBlocked(ConvGradInput)").
  std::string profileType;
  /// Its entry in the profile (setProfiling): profileType, or with the node's name when by node.
  std::string profileKey;
  /// Per output: its region of the arena (data set once the arena exists).
  std::vector<ops::PlannedOutput> planned;
  std::vector<int64_t> plannedOffset;  ///< -1: not planned
  /// The pool the step's kernel runs on when not the executable's (adoptStep).
  support::ThreadPool* pool = nullptr;
};

/// How compile() prepares an executable.
struct CompileOptions {
  /// Place values with static sizes in one arena (plan/memory.hpp).
  bool planMemory = true;
  /// Let ops with the inplaceInput trait overwrite a dying input (needs planMemory).
  bool inplace = true;
  /// Check that no two live buffers overlap (slow for large graphs; for debugging and tests).
  bool verifyPlan = false;
};

/// Per-op-type timing of runs, collected when profiling is on.
struct ProfileEntry {
  std::string opType;
  /// The node's name when profiling by node (setProfiling's byNode); empty per op type.
  std::string node;
  int64_t calls = 0;
  double seconds = 0;
  /// The kernels the op type's steps ran ("name" or "name (implementation)").
  std::set<std::string> kernels;
};

/// The kernel a compiled step runs, for `graft inspect` and tests.
struct StepKernel {
  std::string node;  ///< Node::describe()
  std::string opType;
  std::string kernel, implementation;
};

class Executable {
 public:
  /// Runs the graph. `inputs` bind the graph inputs in order; `outer` binds the OuterScope
  /// tensors (subgraphs) in outerIds() order. Returns the graph outputs in order.
  std::vector<ops::Value> run(std::vector<ops::Value> inputs, const std::vector<const ops::Value*>& outer = {});

  const std::vector<std::string>& inputIds() const { return inputIds_; }
  /// The gradients computed straight into their accumulators (see placeGradientsInAccumulators).
  const std::vector<std::string>& gradientsInAccumulators() const { return inAccumulators_; }
  const std::vector<std::string>& outputIds() const { return outputIds_; }
  const std::vector<std::string>& outerIds() const { return outerIds_; }
  size_t numSteps() const { return steps_.size(); }
  /// The kernel of every step, in order (nested subgraphs' steps not included).
  std::vector<StepKernel> stepKernels() const;
  /// The live value of a Variable or Constant tensor (weights IO reads and writes it), or nullptr.
  ops::Value* persistent(const std::string& id);

  /// Called on the running thread after each node of this graph (not of its subgraphs) has run;
  /// replication starts a gradient's all-reduce there as soon as the gradient is complete.
  void setAfterNode(std::function<void(const ir::Node&)> fn) { afterNode_ = std::move(fn); }
  /// Turns timing on or off, for this graph and its subgraphs.
  /// byNode: one entry per node (ProfileEntry::node) instead of one per op type.
  void setProfiling(bool on, bool byNode = false);
  /// Times every step of this graph's next runs (wall time of its kernel); stepSeconds() holds the
  /// last run's, per step, in schedule order.
  void setStepTiming(bool on) { stepTiming_ = on; }
  const std::vector<double>& stepSeconds() const { return stepSeconds_; }
  /// Makes step i run `other`'s kernel for the same node, on `other`'s pool: `other` is this
  /// graph compiled by another provider (the same graph object, so the same nodes and memory
  /// plan). Only where both chose the same kernel (the same outputs, in-place behaviour and
  /// layouts); returns whether it did. The kernel keeps its compiled state alive.
  bool adoptStep(size_t i, const Executable& other, const std::string& note);
  /// Frees the activation arena (a later run allocates it again).
  void releaseArena();
  /// Accumulated per-op-type times (slowest first), including nested subgraphs' ops.
  std::vector<ProfileEntry> profile() const;
  /// The static memory plan of the values this executable produces.
  const MemoryPlan& memoryPlan() const { return memory_; }

 private:
  friend std::unique_ptr<Executable> compile(const ir::Graph&, KernelProvider&, support::ThreadPool&,
                                             const CompileOptions&);
  void allocateArena();
  /// Plans the gradients of overwriting Accumulates into their accumulators (executable.cpp).
  void placeGradientsInAccumulators();
  /// Moves a value that points into the arena outside the region planned for `slot` to the heap.
  void keepOutOfArena(ops::Value& v, int slot) const;
  std::vector<Step> steps_;
  std::vector<ops::Value> slots_;
  std::vector<int> inputSlots_, outputSlots_, outerSlots_;
  std::vector<bool> outputPersistent_;
  std::vector<std::string> inputIds_, outputIds_, outerIds_;
  std::unordered_map<std::string, int> persistentSlots_;
  support::ThreadPool* pool_ = nullptr;
  bool profiling_ = false, profileByNode_ = false;
  bool stepTiming_ = false;
  std::vector<double> stepSeconds_;
  std::function<void(const ir::Node&)> afterNode_;
  std::unordered_map<std::string, ProfileEntry> profile_;
  /// Executables of subgraphs compiled for this graph's nodes (shared with their kernels).
  std::vector<std::shared_ptr<Executable>> children_;
  void collectProfile(std::unordered_map<std::string, ProfileEntry>& into) const;
  bool running_ = false;
  MemoryPlan memory_;
  std::vector<std::string> inAccumulators_;
  std::shared_ptr<void> arena_;
  std::byte* arenaBase_ = nullptr;
  /// Per slot: the arena byte range [first, second) its value may point into; (0, 0) if none.
  std::vector<std::pair<int64_t, int64_t>> region_;
};

/// Compiles `g` (types already inferred) with kernels from `provider`. Throws graft::Error naming
/// the node when a kernel cannot be created.
std::unique_ptr<Executable> compile(const ir::Graph& g, KernelProvider& provider, support::ThreadPool& pool,
                                    const CompileOptions& options = {});

/// Every node of `g` (and its subgraphs) that `provider` has no kernel for.
std::vector<const ir::Node*> unsupportedNodes(const ir::Graph& g, const KernelProvider& provider);

/// "2 ops of this model are not supported by graft: Foo (2 nodes: 'a', 'b'), Bar (1 node: ...)".
std::string unsupportedOpsMessage(const std::vector<const ir::Node*>& nodes);

}  // namespace graft::plan
