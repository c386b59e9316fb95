// The ops of the ai.onnx.preview.training domain: the optimizers Adagrad, Adam and Momentum, and
// Gradient.
//
// Each optimizer takes a learning rate R and an update count T, then n tensors to optimize and
// their gradients and optimizer states, and returns the new tensors and states.
//
// Gradient is not a kernel: it stands for the backward graph of part of the graph it sits in
// (its attributes name tensors of that graph), which the expand-gradient pass
// (passes/expand_gradient.cpp) builds with graft's autodiff before anything is folded or
// compiled. Its entry here types its outputs (each like the value of the x it belongs to) and
// lets a session accept it; its "kernel" only reports a Gradient node that was not expanded.
#include <cmath>

#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";
constexpr uint32_t kFloatOrDouble = (1u << 1) | (1u << 11);  // the types the schemas allow

// The shared input layout: R, T, then `groups` lists of n tensors each (X, G, and states).
struct OptimizerInputs {
  double lr = 0;
  int64_t step = 0;
  int64_t n = 0;
  DataType dtype = DataType::Undefined;
  // values[g][i]: element values of tensor i of list g, in double.
  std::vector<std::vector<std::vector<double>>> values;
  std::vector<Shape> shapes;
};

OptimizerInputs readInputs(const KernelContext& k, int64_t groups, int64_t outputsPerTensor, const std::string& what) {
  OptimizerInputs in;
  const auto count = static_cast<int64_t>(k.numInputs()) - 2;
  GRAFT_CHECK(count > 0 && count % groups == 0, "{}: expected R, T and {} lists of n tensors, got {} inputs", what,
              groups, k.numInputs());
  in.n = count / groups;
  GRAFT_CHECK(static_cast<int64_t>(k.numOutputs()) == outputsPerTensor * in.n,
              "{}: {} tensors to optimize need {} outputs, got {}", what, in.n, outputsPerTensor * in.n, k.numOutputs());
  const NDArray& R = k.input(0);
  const NDArray& T = k.input(1);
  GRAFT_CHECK(R.numel() == 1 && R.rank() <= 1, "{}: R must be a scalar, got shape {}", what, shapeToString(R.shape()));
  GRAFT_CHECK(T.numel() == 1 && T.rank() <= 1 && T.dtype() == DataType::Int64, "{}: T must be an INT64 scalar, got {} {}",
              what, dtypeName(T.dtype()), shapeToString(T.shape()));
  dispatch<kFloatOrDouble>(R.dtype(), what + " R", [&](auto tag) {
    using V = typename decltype(tag)::type;
    in.lr = static_cast<double>(R.data<V>()[0]);
  });
  in.step = T.data<int64_t>()[0];
  in.values.resize(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < in.n; ++i) {
      const NDArray& a = k.input(static_cast<size_t>(2 + g * in.n + i));
      if (g == 0) {
        in.shapes.push_back(a.shape());
        if (i == 0) in.dtype = a.dtype();
      }
      GRAFT_CHECK(a.shape() == in.shapes[i], "{}: input {} has shape {} but the tensor it belongs to has {}", what,
                  2 + g * in.n + i, shapeToString(a.shape()), shapeToString(in.shapes[i]));
      GRAFT_CHECK(a.dtype() == in.dtype, "{}: input {} has type {}, expected {}", what, 2 + g * in.n + i,
                  dtypeName(a.dtype()), dtypeName(in.dtype));
      std::vector<double> v(static_cast<size_t>(a.numel()));
      dispatch<kFloatOrDouble>(a.dtype(), what, [&](auto tag) {
        using V = typename decltype(tag)::type;
        for (int64_t e = 0; e < a.numel(); ++e) v[e] = static_cast<double>(a.data<V>()[e]);
      });
      in.values[g].push_back(std::move(v));
    }
  return in;
}

void writeOutput(KernelContext& k, size_t index, const OptimizerInputs& in, int64_t tensor, const std::vector<double>& v) {
  NDArray& out = k.allocOutputUninit(index, in.dtype, in.shapes[tensor]);
  dispatch<kFloatOrDouble>(in.dtype, "optimizer output", [&](auto tag) {
    using V = typename decltype(tag)::type;
    for (int64_t e = 0; e < out.numel(); ++e) out.data<V>()[e] = static_cast<V>(v[e]);
  });
}

KernelFn adagradKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double decay = n.attrFloat("decay_factor", 0.0f), eps = n.attrFloat("epsilon", 1e-6f);
  double norm = n.attrFloat("norm_coefficient", 0.0f);
  return [=](KernelContext& k) {
    OptimizerInputs in = readInputs(k, 3, 2, what);
    const double r = in.lr / (1.0 + static_cast<double>(in.step) * decay);
    for (int64_t i = 0; i < in.n; ++i) {
      const auto &X = in.values[0][i], &G = in.values[1][i], &H = in.values[2][i];
      std::vector<double> xNew(X.size()), hNew(X.size());
      for (size_t e = 0; e < X.size(); ++e) {
        double g = norm * X[e] + G[e];
        hNew[e] = H[e] + g * g;
        xNew[e] = X[e] - r * g / (std::sqrt(hNew[e]) + eps);
      }
      writeOutput(k, static_cast<size_t>(i), in, i, xNew);
      writeOutput(k, static_cast<size_t>(in.n + i), in, i, hNew);
    }
  };
}

KernelFn adamKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double alpha = n.attrFloat("alpha", 0.9f), beta = n.attrFloat("beta", 0.999f), eps = n.attrFloat("epsilon", 1e-6f);
  double norm = n.attrFloat("norm_coefficient", 0.0f), normPost = n.attrFloat("norm_coefficient_post", 0.0f);
  return [=](KernelContext& k) {
    OptimizerInputs in = readInputs(k, 4, 3, what);
    const auto t = static_cast<double>(in.step);
    // Bias correction of both moments, folded into the learning rate; none before the first step.
    const double r = in.step > 0 ? in.lr * std::sqrt(1.0 - std::pow(beta, t)) / (1.0 - std::pow(alpha, t)) : in.lr;
    for (int64_t i = 0; i < in.n; ++i) {
      const auto &X = in.values[0][i], &G = in.values[1][i], &V = in.values[2][i], &H = in.values[3][i];
      std::vector<double> xNew(X.size()), vNew(X.size()), hNew(X.size());
      for (size_t e = 0; e < X.size(); ++e) {
        double g = norm * X[e] + G[e];
        vNew[e] = alpha * V[e] + (1 - alpha) * g;
        hNew[e] = beta * H[e] + (1 - beta) * g * g;
        xNew[e] = (1 - normPost) * (X[e] - r * vNew[e] / (std::sqrt(hNew[e]) + eps));
      }
      writeOutput(k, static_cast<size_t>(i), in, i, xNew);
      writeOutput(k, static_cast<size_t>(in.n + i), in, i, vNew);
      writeOutput(k, static_cast<size_t>(2 * in.n + i), in, i, hNew);
    }
  };
}

KernelFn momentumKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double alpha = n.attrFloat("alpha"), beta = n.attrFloat("beta"), norm = n.attrFloat("norm_coefficient");
  std::string mode = n.attrString("mode");
  GRAFT_CHECK(mode == "standard" || mode == "nesterov", "{}: mode must be 'standard' or 'nesterov', got '{}'", what, mode);
  bool nesterov = mode == "nesterov";
  return [=](KernelContext& k) {
    OptimizerInputs in = readInputs(k, 3, 2, what);
    // The first update (T = 0) takes the whole gradient, without beta's scaling.
    const double b = in.step > 0 ? beta : 1.0;
    for (int64_t i = 0; i < in.n; ++i) {
      const auto &X = in.values[0][i], &G = in.values[1][i], &V = in.values[2][i];
      std::vector<double> xNew(X.size()), vNew(X.size());
      for (size_t e = 0; e < X.size(); ++e) {
        double g = norm * X[e] + G[e];
        vNew[e] = alpha * V[e] + b * g;
        xNew[e] = X[e] - in.lr * (nesterov ? g + alpha * vNew[e] : vNew[e]);
      }
      writeOutput(k, static_cast<size_t>(i), in, i, xNew);
      writeOutput(k, static_cast<size_t>(in.n + i), in, i, vNew);
    }
  };
}

// Gradient's inputs are the values of xs and then of zs; output i is d(sum of y) / d(xs[i]).
std::vector<ir::ValueType> inferGradient(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                         const std::vector<const NDArray*>&) {
  GRAFT_CHECK(n.numOutputs() <= in.size(), "{}: {} outputs but only {} inputs; output i is the gradient for input i",
              n.describe(), n.numOutputs(), in.size());
  return {in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n.numOutputs())};
}

KernelFn unexpandedGradient(CompileContext& c) {
  GRAFT_THROW("{}: Gradient has no kernel of its own; the expand-gradient pass, which sessions run before compiling, "
              "replaces it with the graph computing its outputs (Gradient nodes inside subgraphs are not expanded)",
              c.node().describe());
}

}  // namespace

GRAFT_REGISTER_OPS(training_ops) {
  r.add("Gradient", kTrainingDomain).setInfer(inferGradient).setReference(unexpandedGradient);
  r.add("Adagrad", kTrainingDomain).setReference(adagradKernel);
  r.add("Adam", kTrainingDomain).setReference(adamKernel);
  r.add("Momentum", kTrainingDomain).setReference(momentumKernel);
}

}  // namespace graft::ops
