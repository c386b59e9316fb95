#pragma once
// Training mode for the graphs of a TrainingSession: BatchNormalization normalizes with batch
// statistics and updates its running statistics in place, as PyTorch's BatchNorm does in
// train(); Dropout drops with masks drawn from a seed Variable saved with the weights, so that a
// run resumed from a checkpoint draws the masks the uninterrupted run would have drawn.
// Inference sessions never run it: their BatchNormalization and Dropout keep eval semantics.
#include "ir/graph.hpp"

namespace graft::passes {

/// Id of the INT64 [2] Variable (seed, step) from which training-mode Dropout draws its masks;
/// the step advances by one at every run of the training graph.
inline constexpr const char* kRandomSeedId = "randomSeed___";

/// Prepares the persistent state the "training-mode" pass updates, in a session's source graph
/// (whose Variables the compiled graphs share and checkpoints save): the kRandomSeedId Variable
/// when the graph has Dropout nodes (kept from a checkpoint, made a Variable again on import),
/// and own Variables for running statistics that are an Identity of an initializer or a
/// constant (torch.onnx.export shares initializers of equal value, e.g. a fresh running_var
/// with the weight). Throws graft::Error when the model has a tensor with the reserved id that
/// is not INT64 [2] data.
void prepareTrainingMode(ir::Graph& source);

}  // namespace graft::passes
