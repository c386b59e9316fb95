#pragma once
// Optimizers from a one-line spec, as `graft train --optimizer` takes them:
//   sgd:lr=0.01,momentum=0.9,wd=1e-4,nesterov    adam:lr=1e-3    adamw:lr=1e-3,wd=0.01
#include <graft/optimizer.hpp>

#include <memory>
#include <string>

namespace graft::tools {

/// An optimizer and a one-line description of it ("SGD: lr 0.01, momentum 0.9").
struct ParsedOptimizer {
  std::unique_ptr<Optimizer> optimizer;
  std::string description;
};

/// Parses KIND[:KEY=VALUE,...]. Kinds and keys (lr is required; the others default as in the
/// optimizer classes of optimizer.hpp):
///   sgd                      lr momentum dampening wd nesterov clip
///   adam adamw adamax lamb   lr beta1 beta2 eps wd clip
///   rmsprop centered-rmsprop adagrad adadelta   lr alpha momentum eps wd clip
/// wd is L2 regularization (added to the gradient, as torch's SGD, Adam, RMSprop and Adagrad)
/// except for adamw and lamb, whose decay is decoupled; adamw's wd defaults to 0.01 (as
/// torch.optim.AdamW). clip=N clips the global gradient norm to N. `nesterov` needs no value.
/// Throws graft::Error naming the spec for an unknown kind or key, a value that is not a finite
/// number, a missing lr, or a value out of range (lr <= 0, momentum outside [0, 1), ...).
ParsedOptimizer parseOptimizerSpec(const std::string& spec);

}  // namespace graft::tools
