#pragma once
// What the reference and the vectorised optimizer-update kernels share: reading their
// hyper-parameter inputs, checking state tensors against the weight, and one Adam step's
// scalars (the step counter advanced, bias corrections).
#include <cmath>
#include <string>

#include "ops/kernel.hpp"
#include "support/check.hpp"

namespace graft::ops {

/// Hyper-parameter input i of an update node: a FLOAT scalar.
inline double optimizerScalar(const KernelContext& k, size_t i) {
  const NDArray& a = k.input(i);
  GRAFT_ASSERT(a.numel() == 1 && a.dtype() == DataType::Float, "hyper-parameter input {} must be a FLOAT scalar", i);
  return a.data<float>()[0];
}

/// Throws naming `what` unless x (the gradient or a state tensor called `name`) has w's dtype and shape.
inline void checkLikeWeight(const NDArray& w, const NDArray& x, const std::string& what, const char* name) {
  GRAFT_CHECK(x.dtype() == w.dtype() && x.shape() == w.shape(), "{}: {} is {} {}, the weight {} {}", what, name,
              dtypeName(x.dtype()), shapeToString(x.shape()), dtypeName(w.dtype()), shapeToString(w.shape()));
}

/// SGDOuterUpdate's factors: the weight [I, J], a of I and b of J elements, all of its type.
inline void checkOuterFactors(const NDArray& w, const NDArray& a, const NDArray& b, const std::string& what) {
  GRAFT_CHECK(w.rank() == 2 && a.numel() == w.dim(0) && b.numel() == w.dim(1) && a.dtype() == w.dtype() &&
                  b.dtype() == w.dtype(),
              "{}: the weight must be [I, J] with a of I and b of J elements of its type, got {}, {} and {}", what,
              shapeToString(w.shape()), shapeToString(a.shape()), shapeToString(b.shape()));
}

/// The scalars of one AdamUpdate(w, g, m, v, t, lr, wd, b1, b2, eps, ls, mwn) {mode} step.
struct AdamStep {
  double lr, wd, b1, b2, eps, ls, mwn;
  double c1, c2;  ///< bias corrections 1 - b^t (1 for the modes without them)
  bool lamb, adamax;
};

/// Checks the node's tensors, advances its step counter t and returns the step's scalars. `mode`
/// is PopART's AdamMode: 0 Adam, 1 AdamNoBias, 2 AdaMax, 3 Lamb, 4 LambNoBias.
inline AdamStep beginAdamStep(KernelContext& k, int mode, const std::string& what) {
  const NDArray &w = k.input(0), &g = k.input(1), &m = k.input(2), &v = k.input(3);
  NDArray t = k.input(4);
  checkLikeWeight(w, g, what, "the gradient");
  checkLikeWeight(w, m, what, "the first moment");
  checkLikeWeight(w, v, what, "the second moment");
  GRAFT_ASSERT(t.dtype() == DataType::Float && t.numel() == 1, "{}: step counter must be a FLOAT scalar", what);
  AdamStep s{};
  s.lr = optimizerScalar(k, 5), s.wd = optimizerScalar(k, 6), s.b1 = optimizerScalar(k, 7);
  s.b2 = optimizerScalar(k, 8), s.eps = optimizerScalar(k, 9), s.ls = optimizerScalar(k, 10);
  s.mwn = optimizerScalar(k, 11);
  float& step = t.data<float>()[0];
  step += 1.0f;
  bool bias = mode == 0 || mode == 2 || mode == 3;
  s.lamb = mode == 3 || mode == 4;
  s.adamax = mode == 2;
  s.c1 = bias ? 1.0 - std::pow(s.b1, step) : 1.0;
  s.c2 = bias ? 1.0 - std::pow(s.b2, step) : 1.0;
  return s;
}

}  // namespace graft::ops
