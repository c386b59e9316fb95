#pragma once
// Sharding and pipelining on the graph: PopART's annotations (__ipu_number, __pipeline_stage)
// checked against the session options, Auto mode's cost-balanced split, the assignment of every
// node to a program (a part of the graph that one virtual device runs once per micro-batch) and
// the split of a graph into one graph per program. Tensors that cross programs become the inputs
// and outputs of the program graphs: they are the inter-device copies, made explicit.
#include <graft/options.hpp>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.hpp"

namespace graft::passes {

/// What the session options and the device say about sharding and pipelining.
struct StageConfig {
  VirtualGraphMode mode = VirtualGraphMode::Off;
  bool pipelining = false;
  /// Virtual devices of the session's device.
  int numVirtualDevices = 1;
  bool training = false;
  /// Micro-batches per weight update (training; 1 otherwise).
  int accumulationFactor = 1;
  /// Pipelined training: recompute forward activations in the backward programs instead of
  /// stashing them (SessionOptions::autoRecomputation other than None).
  bool recompute = false;
};

/// Estimated cost of one node: floating-point operations (multiply-adds count 2: the op's own
/// estimate, OpDef::cost, ops/cost.hpp) and bytes read and written. Shapes must be inferred;
/// unknown shapes count as 0.
struct NodeCost {
  double flops = 0;
  double bytes = 0;
  /// The quantity Auto mode balances.
  double weight() const { return flops + bytes; }
};
NodeCost estimateCost(const ir::Node& n);

/// Checks the annotations of a model (the graph as loaded) against `c`; throws graft::Error
/// naming the node: pipelining without a virtual graph mode, ops without a virtual graph in Manual
/// mode, virtual graphs the device does not have, pipeline stages set on some ops only, a stage on
/// two virtual graphs, a stage reading a tensor of a later stage, and accumulationFactor smaller
/// than the number of stages in pipelined training.
void checkStageAnnotations(const ir::Graph& g, const StageConfig& c);

/// Auto mode: cuts the nodes of `g` (in schedule order; shapes inferred) into `parts` contiguous
/// parts of about equal estimated cost and sets each node's virtualGraph and pipelineStage to its
/// part. Returns a readable description of the split (one line per part).
std::string autoAssignStages(ir::Graph& g, int parts);

/// One program: run on virtual device `device` once per micro-batch.
struct Program {
  int device = 0;
  /// The pipeline stage (pipelining) or the position in the sharded order.
  int stage = 0;
  /// Training: true for the backward part of a stage.
  bool backward = false;
  std::string name;
};

/// Where every node runs.
struct ProgramAssignment {
  std::vector<Program> programs;
  /// Node -> the programs that run it: the first computes it for everyone; more follow where the
  /// node is recomputed in a backward program instead of being stashed.
  std::unordered_map<const ir::Node*, std::vector<int>> nodePrograms;
  int home(const ir::Node* n) const { return nodePrograms.at(n).front(); }
};

/// Assigns every node of `g` (annotated, or Auto-assigned) to a program. Sharding without
/// pipelining: a new program starts wherever data moves to another virtual graph. Pipelining:
/// one program per forward stage, and in training one per backward stage (nodes that depend on
/// `seed`, the tensor the backward pass starts from), on the stage's virtual graph. Nodes without
/// annotations (added by passes and autodiff) join the latest program among their inputs'. Throws
/// graft::Error naming a node that reads a tensor computed by a later program. Programs are
/// numbered in an order where every program reads only from earlier ones.
ProgramAssignment assignPrograms(const ir::Graph& g, const StageConfig& c, const ir::Tensor* seed);

/// A program's own graph. Its inputs are model inputs and tensors of earlier programs; its
/// outputs are the tensors later programs read and the graph outputs (anchors) it computes.
struct ProgramGraph {
  std::unique_ptr<ir::Graph> graph;
  /// Per input: the program computing it (-1: a model input).
  std::vector<int> inputSources;
};

/// Splits `g` into one graph per program of `a` (weights' buffers are shared with `g`).
std::vector<ProgramGraph> splitPrograms(const ir::Graph& g, const ProgramAssignment& a);

/// A table of the programs: nodes, parameters, FLOPs and memory per program.
std::string describePrograms(const ir::Graph& g, const ProgramAssignment& a);

}  // namespace graft::passes
