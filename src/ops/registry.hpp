#pragma once
// The op registry: per op (domain, type) its inference, reference kernel, gradient, cost and traits.
// Each op family registers itself from its own file with GRAFT_REGISTER_OPS; import and
// compilation look ops up by (domain, type) in this table.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "ops/kernel.hpp"

namespace graft::ops {

class GradBuilder;  // ops/grad.hpp: builds an op's vector-Jacobian product with forward ops

/// Output types from input types and (where constant) input data. Used for graft's own ops;
/// standard ai.onnx ops use ONNX's inference functions.
using InferFn = std::function<std::vector<ir::ValueType>(const ir::Node&, const std::vector<ir::ValueType>& inputs,
                                                         const std::vector<const NDArray*>& constInputs)>;
/// Adds the gradient of one node to the backward graph.
using VjpFn = std::function<void(GradBuilder&)>;
/// Estimated floating-point operations of one node (a multiply-add counts 2), from its inferred
/// shapes (unknown ones count 0); ops/cost.hpp has the shared shapes of cost.
using CostFn = std::function<double(const ir::Node&)>;

struct OpTraits {
  /// Output 0 has the shape of the broadcast inputs and each element depends only on the
  /// elements at the same position (fusable into elementwise loops).
  bool elementwise = false;
  /// Output 0 may be a view of this input's buffer (Reshape, Identity, Squeeze...); -1: none.
  int viewOfInput = -1;
  /// Output 0 may overwrite this input's buffer when that input has no other use; -1: none.
  int inplaceInput = -1;
  /// Results vary between runs (random ops): never constant-folded or merged.
  bool nondeterministic = false;
  /// The op writes persistent state in place (weight and optimizer-state updates): it is never
  /// removed as dead code, folded or merged, and it has no outputs that matter.
  bool sideEffects = false;
};

struct OpDef {
  std::string domain;  ///< "" for ai.onnx
  std::string type;
  KernelFactory reference;
  InferFn infer;  ///< empty: ONNX's schema inference
  VjpFn vjp;      ///< empty: not differentiable
  CostFn cost;    ///< empty: one operation per output element (ops::estimateFlops)
  OpTraits traits;
  /// Inputs that carry no gradient (indices, shapes, masks), by index.
  std::vector<int> nonDifferentiableInputs;

  OpDef& setReference(KernelFactory f) { reference = std::move(f); return *this; }
  OpDef& setInfer(InferFn f) { infer = std::move(f); return *this; }
  OpDef& setVjp(VjpFn f) { vjp = std::move(f); return *this; }
  OpDef& setCost(CostFn f) {
    cost = std::move(f);
    return *this;
  }
  OpDef& elementwise() { traits.elementwise = true; return *this; }
  OpDef& viewOf(int input) { traits.viewOfInput = input; return *this; }
  OpDef& inplace(int input) { traits.inplaceInput = input; return *this; }
  OpDef& nondeterministic() { traits.nondeterministic = true; return *this; }
  OpDef& sideEffects() { traits.sideEffects = true; return *this; }
  OpDef& noGradient(std::vector<int> inputs) { nonDifferentiableInputs = std::move(inputs); return *this; }
};

class Registry {
 public:
  static Registry& instance();
  /// Adds (or returns, to extend) the definition of (domain, type).
  OpDef& add(const std::string& type, const std::string& domain = "");
  const OpDef* find(const std::string& domain, const std::string& type) const;
  const OpDef* find(const ir::Node& n) const { return find(n.domain(), n.type()); }
  /// Every registered op, ordered by (domain, type).
  std::vector<const OpDef*> all() const;

 private:
  std::map<std::pair<std::string, std::string>, OpDef> ops_;
};

/// True when running node n once more gives the same results and changes nothing else: its op is
/// registered, neither nondeterministic (random, collective) nor writing state, and the node has
/// no subgraphs (whose nodes could be either). Folding, merging, recomputing and timing trial
/// runs rely on it.
bool repeatable(const ir::Node& n);

/// Domain of PopART's extra ops (nllloss, gelu, ...), accepted in models and the Builder.
inline constexpr const char* kGraphcoreDomain = "ai.graphcore";
/// Domain of graft's internal ops (gradient ops, fused ops).
inline constexpr const char* kGraftDomain = "ai.graft";

}  // namespace graft::ops

/// Registers a family of ops at static-initialisation time:
///   GRAFT_REGISTER_OPS(activation) { r.add("Relu").setReference(...); }
#define GRAFT_REGISTER_OPS(family)                                                          \
  static void graftRegisterOps_##family(::graft::ops::Registry& r);                         \
  [[maybe_unused]] static const bool graftOpsRegistered_##family =                          \
      (graftRegisterOps_##family(::graft::ops::Registry::instance()), true);                \
  static void graftRegisterOps_##family(::graft::ops::Registry& r)
