#pragma once
// Graph passes. A pipeline is data: an ordered list of pass ids, run by runPipeline.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.hpp"

namespace graft::passes {

struct PassContext {
  /// Treat Variables (weights) as constants: inference sessions whose weights never change
  /// after compilation may fold them.
  bool weightsAreConstant = false;
  /// Fold only results up to this many bytes (larger results stay computed at run time).
  size_t foldLimitBytes = size_t{64} << 20;
  /// Debug switches: verify the graph after every pass; dump it after the pass with this id;
  /// stop after this many passes (-1: run all); stop after the first run of the pass with this
  /// id. The environment sets them too (runPipeline reads it): GRAFT_VERIFY_PASSES=1 (make test
  /// sets it), GRAFT_DUMP_AFTER_PASS=<id>, GRAFT_STOP_AFTER_PASS=<id>.
  bool verifyEachPass = false;
  std::string dumpAfter;
  int stopAfter = -1;
  std::string stopAfterPass;
  /// Where dumps go (default: the log at info level).
  std::function<void(const std::string& passId, const std::string& text)> dump;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  /// Returns true when it changed the graph.
  virtual bool run(ir::Graph& g, PassContext& ctx) = 0;
};

using PassFactory = std::function<std::unique_ptr<Pass>()>;

/// Registers a pass under its id (done by each pass's file).
void registerPass(const std::string& id, PassFactory f);
/// Every registered pass id.
std::vector<std::string> passIds();
/// Creates the pass; throws graft::Error listing the known ids when `id` is unknown.
std::unique_ptr<Pass> createPass(const std::string& id);
/// Runs the passes in order (with the debug switches of `ctx` and of the environment).
void runPipeline(ir::Graph& g, const std::vector<std::string>& pipeline, PassContext& ctx);

// Pipelines. Each backend owns its own (backends::Backend::passes); they all begin with the
// common prefix.
/// What every pipeline begins with: exact types and shapes, gradients expanded, constants folded,
/// dead ops gone. Also the whole pipeline of a backend without passes of its own (reference).
const std::vector<std::string>& commonPrefix();
/// commonPrefix() followed by `rest`.
std::vector<std::string> withCommonPrefix(const std::vector<std::string>& rest);

}  // namespace graft::passes

#define GRAFT_REGISTER_PASS(id, Class)                                                              \
  [[maybe_unused]] static const bool graftPassRegistered_##Class =                                  \
      (::graft::passes::registerPass(id, [] { return std::unique_ptr<::graft::passes::Pass>(new Class()); }), true)
