#include "passes/pass.hpp"
#include "support/check.hpp"
#include "support/logging.hpp"

namespace graft::passes {
namespace {
std::map<std::string, PassFactory>& table() {
  static std::map<std::string, PassFactory> t;
  return t;
}
}  // namespace

void registerPass(const std::string& id, PassFactory f) { table()[id] = std::move(f); }

std::vector<std::string> passIds() {
  std::vector<std::string> ids;
  for (const auto& [id, f] : table()) ids.push_back(id);
  return ids;
}

std::unique_ptr<Pass> createPass(const std::string& id) {
  auto it = table().find(id);
  GRAFT_CHECK(it != table().end(), "unknown pass '{}'; known passes: {}", id, fmt::join(passIds(), ", "));
  return it->second();
}

void runPipeline(ir::Graph& g, const std::vector<std::string>& pipeline, PassContext& ctx) {
  int count = 0;
  for (const auto& id : pipeline) {
    if (ctx.stopAfter >= 0 && count >= ctx.stopAfter) break;
    auto pass = createPass(id);
    bool changed = pass->run(g, ctx);
    ++count;
    GRAFT_LOG_DEBUG("pass {}: {}", id, changed ? "changed the graph" : "no change");
    if (ctx.verifyEachPass) {
      try {
        ir::verifyGraph(g);
      } catch (const Error& e) {
        throw InternalError(fmt::format("graph invalid after pass '{}': {}", id, e.what()));
      }
    }
    if (ctx.dumpAfter == id) {
      std::string text = ir::printGraph(g);
      if (ctx.dump) ctx.dump(id, text);
      else support::logMessage(support::LogLevel::Info, "graph after pass " + id + ":\n" + text);
    }
  }
}

const std::vector<std::string>& inferencePipeline() {
  static const std::vector<std::string> p = {
      "infer-shapes",     // exact dtypes and shapes for the input shapes being compiled
      "expand-gradient",  // Gradient nodes become backward graphs (before folding: it reads the forward graph)
      "fold-constants",   // evaluate what depends only on constants (Shape of static tensors too)
      "infer-shapes",     // shapes that depended on folded values (Reshape targets, ...)
      "dce",              // drop what no output needs
  };
  return p;
}

// The fusions of kernel libraries (conv/matmul + bias + activation) go before fuse-elementwise,
// which then takes the elementwise ops that remain (on blocked arrays too: it runs position-wise).
const std::vector<std::string>& cpuInferencePipeline() {
  static const std::vector<std::string> p = {
      "infer-shapes",      // exact dtypes and shapes for the input shapes being compiled
      "expand-gradient",   // Gradient nodes become backward graphs (before folding: it reads the forward graph)
      "fold-constants",    // evaluate what depends only on constants (Shape of static tensors too)
      "infer-shapes",      // shapes that depended on folded values (Reshape targets, ...)
      "dce",               // drop what no output needs
      "cse",               // compute equal expressions once (equal small constants merged first)
      "constant-weights",  // constantWeights sessions: weights become constants (packed once)
      "fold-batchnorm",    // BatchNormalization after Conv folded into its weights and bias
      "fuse-layernorm",    // mean/variance/normalise/scale/shift chains -> LayerNormalization
      "fuse-gelu",         // x/2 (1 + erf(x / sqrt 2)) -> ai.graft::GeluErf
      "fuse-conv",         // Conv + Add + activation -> ai.graft::FusedConv (oneDNN post-ops)
      "fuse-matmul",       // MatMul + bias + activation, Gemm + activation -> FusedMatMul/FusedGemm
      "fold-transpose",    // Transposes around matrix products become strides (perm_a/b/y, transA/B)
      "cpu-layout",        // channel-blocked activations between oneDNN ops, reorders at the edges
      "fuse-elementwise",  // chains of elementwise ops -> ai.graft::FusedElementwise (one loop)
      "dce",               // weights folding left unused, reorders nobody reads
  };
  return p;
}

const std::vector<std::string>& cpuTrainingPipeline() {
  static const std::vector<std::string> p = {
      "infer-shapes",      // exact dtypes and shapes (the backward graph's too)
      "expand-gradient",   // Gradient nodes become backward graphs (before folding: it reads the forward graph)
      "fold-constants",    // constants only: weights change every step
      "infer-shapes",      // shapes that depended on folded values
      "dce",               // drop what no output or update needs
      "cse",               // autodiff repeats subexpressions and constants
      "fuse-layernorm",    // only where the backward pass reads no intermediate
      "fuse-gelu",         // likewise
      "fold-transpose",    // the VJPs' Transposes around matrix products become strides
      "fuse-elementwise",  // forward and backward elementwise chains, several outputs each
      "dce",               // what the rewrites left unused
  };
  return p;
}

}  // namespace graft::passes
