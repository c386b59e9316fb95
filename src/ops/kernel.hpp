#pragma once
// What a kernel sees at run time (KernelContext) and at compile time (CompileContext).
// Kernels do not validate: inputs were checked once, when the graph was compiled.
#include <graft/ndarray.hpp>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "ir/graph.hpp"
#include "support/check.hpp"
#include "support/thread_pool.hpp"

namespace graft::ops {

/// A run-time value: a tensor, a sequence of tensors, or an absent optional (None).
struct Value {
  enum class Kind : uint8_t { Empty, Tensor, Sequence, None };
  Kind kind = Kind::Empty;
  NDArray tensor;
  std::shared_ptr<const std::vector<NDArray>> sequence;

  static Value fromTensor(NDArray a) {
    Value v;
    v.kind = Kind::Tensor;
    v.tensor = std::move(a);
    return v;
  }
  static Value fromSequence(std::vector<NDArray> s) {
    Value v;
    v.kind = Kind::Sequence;
    v.sequence = std::make_shared<const std::vector<NDArray>>(std::move(s));
    return v;
  }
  static Value none() {
    Value v;
    v.kind = Kind::None;
    return v;
  }
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isSequence() const { return kind == Kind::Sequence; }
  bool isNone() const { return kind == Kind::None; }
  bool empty() const { return kind == Kind::Empty; }
};

class KernelContext;

/// Where the static memory plan (plan/memory.hpp) puts one output of a step: allocOutput hands
/// out this region when the kernel asks for exactly this dtype and shape.
struct PlannedOutput {
  void* data = nullptr;  ///< nullptr: not planned (heap)
  DataType dtype = DataType::Undefined;
  Shape shape;
  /// The region is an input's buffer (in place): it must not be zero-filled.
  bool inplace = false;
};

/// Runs a compiled subgraph (If/Loop/Scan/SequenceMap bodies). The subgraph is compiled once, when
/// the owning node is; run() may then be called any number of times (a Loop body once per
/// iteration) and reuses the compiled plan and its slots.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  /// Binds the subgraph's formal inputs to `inputs` (in order; moved in, so that values only the
  /// body holds are released as soon as the body is done with them) and its outer-scope reads to
  /// the owning node's implicit inputs in `owner`; returns the subgraph's outputs in order.
  virtual std::vector<Value> run(std::vector<Value> inputs, const KernelContext& owner) = 0;
  virtual size_t numInputs() const = 0;
  virtual size_t numOutputs() const = 0;
};

/// The run-time view of one op application: its input and output slots.
class KernelContext {
 public:
  KernelContext(Value* slots, const int* in, size_t nin, const int* out, size_t nout, const int* implicit, size_t nimp,
                support::ThreadPool* pool, const PlannedOutput* planned = nullptr,
                const std::shared_ptr<void>* arena = nullptr)
      : slots_(slots), in_(in), out_(out), implicit_(implicit), nin_(nin), nout_(nout), nimp_(nimp), pool_(pool),
        planned_(planned), arena_(arena) {}

  size_t numInputs() const { return nin_; }
  size_t numOutputs() const { return nout_; }
  /// True when input i was given (not omitted) and is not an absent optional.
  bool hasInput(size_t i) const { return i < nin_ && in_[i] >= 0 && !slots_[in_[i]].isNone() && !slots_[in_[i]].empty(); }
  const Value& inputValue(size_t i) const {
    static const Value kNone = Value::none();
    return (i < nin_ && in_[i] >= 0) ? slots_[in_[i]] : kNone;
  }
  const NDArray& input(size_t i) const {
    const Value& v = inputValue(i);
    GRAFT_ASSERT(v.isTensor(), "input {} is not a tensor", i);
    return v.tensor;
  }
  /// True when output i is consumed or returned (not omitted in the model).
  bool wantsOutput(size_t i) const { return i < nout_ && out_[i] >= 0; }
  /// Allocates output i zero-filled and returns it (in its planned arena region when the memory
  /// plan has one for this dtype and shape).
  NDArray& allocOutput(size_t i, DataType dt, Shape shape) {
    if (const PlannedOutput* p = plannedFor(i, dt, shape); p && !p->inplace) {
      NDArray& a = setOutput(i, NDArray::wrap(p->data, dt, std::move(shape), *arena_));
      if (a.nbytes()) std::memset(a.rawData(), 0, a.nbytes());
      return a;
    }
    return setOutput(i, NDArray(dt, std::move(shape)));
  }
  /// Allocates output i without zero-filling; the kernel must write every element. For an op
  /// with the inplaceInput trait the region may be that input's buffer: the kernel must then
  /// read each input element before writing the output element at the same position.
  NDArray& allocOutputUninit(size_t i, DataType dt, Shape shape) {
    if (const PlannedOutput* p = plannedFor(i, dt, shape)) return setOutput(i, NDArray::wrap(p->data, dt, std::move(shape), *arena_));
    return setOutput(i, NDArray::uninitialized(dt, std::move(shape)));
  }
  /// Sets output i (for example to a view of an input: Reshape, Identity).
  NDArray& setOutput(size_t i, NDArray a) {
    if (!wantsOutput(i)) {
      scratch_ = std::move(a);
      return scratch_;
    }
    Value& v = slots_[out_[i]];
    v = Value::fromTensor(std::move(a));
    return v.tensor;
  }
  void setOutputValue(size_t i, Value v) {
    if (wantsOutput(i)) slots_[out_[i]] = std::move(v);
  }
  size_t numImplicitInputs() const { return nimp_; }
  const Value& implicitInput(size_t i) const { return slots_[implicit_[i]]; }
  support::ThreadPool& pool() const { return *pool_; }

 private:
  const PlannedOutput* plannedFor(size_t i, DataType dt, const Shape& shape) const {
    if (!planned_ || i >= nout_ || !wantsOutput(i)) return nullptr;
    const PlannedOutput& p = planned_[i];
    return p.data && p.dtype == dt && p.shape == shape ? &p : nullptr;
  }
  Value* slots_;
  const int *in_, *out_, *implicit_;
  size_t nin_, nout_, nimp_;
  support::ThreadPool* pool_;
  const PlannedOutput* planned_;
  const std::shared_ptr<void>* arena_;
  NDArray scratch_;
};

using KernelFn = std::function<void(KernelContext&)>;

/// What a kernel factory sees when the graph is compiled: the node (with typed, inferred inputs
/// and outputs), constant input data, and a way to compile subgraphs.
class CompileContext {
 public:
  virtual ~CompileContext() = default;
  virtual const ir::Node& node() const = 0;
  /// Data of input i when it is constant at compile time (nullptr otherwise).
  virtual const NDArray* constantInput(size_t i) const = 0;
  /// Compiles a subgraph held by this node's attributes.
  virtual std::shared_ptr<SubgraphRunner> compileSubgraph(const ir::Graph& g) = 0;
  /// The pool kernels use for data-parallel loops.
  virtual support::ThreadPool& pool() = 0;

  const ir::ValueType& inputType(size_t i) const { return node().input(i)->type(); }
  const ir::ValueType& outputType(size_t i) const { return node().output(i)->type(); }
};

/// Turns a node into a kernel: parse attributes into a typed struct once, return a closure.
using KernelFactory = std::function<KernelFn(CompileContext&)>;

}  // namespace graft::ops
