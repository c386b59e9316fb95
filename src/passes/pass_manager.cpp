#include "passes/pass.hpp"

#include <cstdlib>

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

namespace {
std::string envString(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
}  // namespace

void runPipeline(ir::Graph& g, const std::vector<std::string>& pipeline, PassContext& ctx) {
  static const bool envVerify = !envString("GRAFT_VERIFY_PASSES").empty() && envString("GRAFT_VERIFY_PASSES") != "0";
  static const std::string envDump = envString("GRAFT_DUMP_AFTER_PASS"), envStop = envString("GRAFT_STOP_AFTER_PASS");
  bool verify = ctx.verifyEachPass || envVerify;
  const std::string& dumpAfter = ctx.dumpAfter.empty() ? envDump : ctx.dumpAfter;
  const std::string& stopAfterPass = ctx.stopAfterPass.empty() ? envStop : ctx.stopAfterPass;
  int count = 0;
  for (const auto& id : pipeline) {
    if (ctx.stopAfter >= 0 && count >= ctx.stopAfter) break;
    auto pass = createPass(id);
    bool changed = pass->run(g, ctx);
    ++count;
    GRAFT_LOG_DEBUG("pass {}: {}", id, changed ? "changed the graph" : "no change");
    if (verify) {
      try {
        ir::verifyGraph(g);
      } catch (const Error& e) {
        throw InternalError(fmt::format("graph invalid after pass '{}': {}", id, e.what()));
      }
    }
    if (dumpAfter == id) {
      std::string text = ir::printGraph(g);
      if (ctx.dump) ctx.dump(id, text);
      else support::logMessage(support::LogLevel::Info, "graph after pass " + id + ":\n" + text);
    }
    if (stopAfterPass == id) {
      GRAFT_LOG_INFO("pipeline stopped after pass {} (stopAfterPass / GRAFT_STOP_AFTER_PASS)", id);
      break;
    }
  }
}

const std::vector<std::string>& commonPrefix() {
  static const std::vector<std::string> p = {
      "infer-shapes",     // exact dtypes and shapes for the input shapes being compiled
      "expand-gradient",  // Gradient nodes become backward graphs (before folding: it reads the forward graph)
      "fold-constants",   // evaluate what depends only on constants (Shape of static tensors too)
      "infer-shapes",     // shapes that depended on folded values (Reshape targets, ...)
      "dce",              // drop what no output needs
  };
  return p;
}

std::vector<std::string> withCommonPrefix(const std::vector<std::string>& rest) {
  std::vector<std::string> p = commonPrefix();
  p.insert(p.end(), rest.begin(), rest.end());
  return p;
}

}  // namespace graft::passes
