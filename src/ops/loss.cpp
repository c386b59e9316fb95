// PopART's losses (domain ai.graphcore): L1 (lambda * |x|), Nll (negative log likelihood over the
// last axis, with ignoreIndex and inputIsLogProbability) and IdentityLoss; and graft's MseLoss
// (domain ai.graft). Reduction is the attribute "reduction": "Sum", "Mean" or "None" (PopART
// also wrote the ints 0, 1, 2). NllGrad (ai.graft) is Nll's gradient kernel.
#include <cctype>
#include <cmath>

#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

enum class Reduction { Sum, Mean, None };

Reduction reductionOf(const ir::Node& n) {
  const ir::AttrValue* v = n.attrs().find("reduction");
  if (!v) return Reduction::Mean;
  if (const auto* i = std::get_if<int64_t>(v)) {
    GRAFT_CHECK(*i >= 0 && *i <= 2, "{}: reduction {} is not 0 (Sum), 1 (Mean) or 2 (None)", n.describe(), *i);
    return static_cast<Reduction>(*i);
  }
  std::string s = n.attrString("reduction");
  if (s == "Sum" || s == "sum") return Reduction::Sum;
  if (s == "Mean" || s == "mean") return Reduction::Mean;
  if (s == "None" || s == "none" || s == "NoReduction") return Reduction::None;
  GRAFT_THROW("{}: unknown reduction '{}' (expected Sum, Mean or None)", n.describe(), s);
}

ir::ValueType reducedType(const ir::ValueType& in, Reduction r) {
  if (r == Reduction::None) return in;
  return ir::ValueType::tensor(TensorInfo(in.info.dataType(), Shape{}));
}

double reduceValues(const std::vector<double>& v, Reduction r, double count) {
  double s = 0;
  for (double x : v) s += x;
  return r == Reduction::Mean ? (count > 0 ? s / count : 0.0) : s;
}

// Writes per-element values, reduced or not, into output 0.
template <class T>
void writeLoss(KernelContext& k, DataType dt, const Shape& shape, const std::vector<double>& v, Reduction r,
               double count) {
  using C = ComputeType<T>;
  if (r == Reduction::None) {
    NDArray& y = k.allocOutputUninit(0, dt, shape);
    for (size_t i = 0; i < v.size(); ++i) y.data<T>()[i] = static_cast<T>(static_cast<C>(v[i]));
  } else {
    NDArray& y = k.allocOutputUninit(0, dt, {});
    y.data<T>()[0] = static_cast<T>(static_cast<C>(reduceValues(v, r, count)));
  }
}

template <class T>
std::vector<double> asDoubles(const NDArray& a) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) v[i] = static_cast<double>(static_cast<ComputeType<T>>(a.data<T>()[i]));
  return v;
}

// ---- L1 ----------------------------------------------------------------------------------------
KernelFn l1Kernel(CompileContext& c) {
  double lambda = c.node().attrFloat("lambda", 1.0f);
  Reduction r = reductionOf(c.node());
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto v = asDoubles<T>(x);
      for (double& e : v) e = lambda * std::abs(e);
      writeLoss<T>(k, x.dtype(), x.shape(), v, r, static_cast<double>(x.numel()));
    });
  };
}

// ---- Nll ---------------------------------------------------------------------------------------
struct NllAttrs {
  Reduction reduction;
  bool hasIgnore;
  int64_t ignoreIndex;
  bool logProb;
};

NllAttrs nllAttrs(const ir::Node& n) {
  NllAttrs a{reductionOf(n), false, 0, n.attrInt("inputIsLogProbability", 0) != 0};
  for (const char* key : {"ignoreIndex", "ignore_index"})
    if (n.attrs().has(key)) {
      a.hasIgnore = true;
      a.ignoreIndex = n.attrInt(key);
    }
  return a;
}

// Checks shapes and reads labels; returns (rows, classes).
std::pair<int64_t, int64_t> nllShapes(const NDArray& probs, const NDArray& labels, const std::string& what) {
  GRAFT_CHECK(probs.rank() >= 1, "{}: probabilities must have a class axis", what);
  Shape lead(probs.shape().begin(), probs.shape().end() - 1);
  GRAFT_CHECK(labels.shape() == lead,
              "{}: labels have shape {}, expected {} (the probabilities' shape {} without the "
              "class axis)",
              what, shapeToString(labels.shape()), shapeToString(lead), shapeToString(probs.shape()));
  GRAFT_CHECK(isInteger(labels.dtype()), "{}: labels must be integers, got {}", what, dtypeName(labels.dtype()));
  return {shapeNumel(lead), probs.dim(-1)};
}

int64_t labelAt(const NDArray& labels, int64_t i) {
  int64_t v = 0;
  dispatch<kInts>(labels.dtype(), "labels", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Sign-extended on purpose: INT8 labels are signed class indices (a negative ignore_index).
    v = static_cast<int64_t>(labels.data<T>()[i]);  // NOLINT(bugprone-signed-char-misuse)
  });
  return v;
}

KernelFn nllKernel(CompileContext& c) {
  NllAttrs a = nllAttrs(c.node());
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& p = k.input(0);
    const NDArray& labels = k.input(1);
    // Not a structured binding: the dispatch lambda below captures them (clang 14 refuses that).
    const std::pair<int64_t, int64_t> shapes = nllShapes(p, labels, what);
    const int64_t rows = shapes.first, classes = shapes.second;
    dispatch<kFloats>(p.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<double> v(static_cast<size_t>(rows), 0.0);
      double counted = 0;
      for (int64_t i = 0; i < rows; ++i) {
        int64_t l = labelAt(labels, i);
        if (a.hasIgnore && l == a.ignoreIndex) continue;
        GRAFT_CHECK(l >= 0 && l < classes, "{}: label {} at position {} is outside [0, {})", what, l, i, classes);
        double pv = static_cast<double>(static_cast<ComputeType<T>>(p.data<T>()[i * classes + l]));
        v[i] = a.logProb ? -pv : -std::log(pv);
        counted += 1;
      }
      writeLoss<T>(k, p.dtype(), labels.shape(), v, a.reduction, counted);
    });
  };
}

// NllGrad(probs, labels, dy) -> dprobs, with Nll's attributes.
KernelFn nllGradKernel(CompileContext& c) {
  NllAttrs a = nllAttrs(c.node());
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& p = k.input(0);
    const NDArray& labels = k.input(1);
    const NDArray& dy = k.input(2);
    // Not a structured binding: the dispatch lambda below captures them (clang 14 refuses that).
    const std::pair<int64_t, int64_t> shapes = nllShapes(p, labels, what);
    const int64_t rows = shapes.first, classes = shapes.second;
    dispatch<kFloats>(p.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      NDArray& dp = k.allocOutput(0, p.dtype(), p.shape());
      double counted = 0;
      for (int64_t i = 0; i < rows; ++i)
        if (!(a.hasIgnore && labelAt(labels, i) == a.ignoreIndex)) counted += 1;
      for (int64_t i = 0; i < rows; ++i) {
        int64_t l = labelAt(labels, i);
        if (a.hasIgnore && l == a.ignoreIndex) continue;
        GRAFT_CHECK(l >= 0 && l < classes, "{}: label {} at position {} is outside [0, {})", what, l, i, classes);
        double g = static_cast<double>(static_cast<C>(dy.data<T>()[a.reduction == Reduction::None ? i : 0]));
        if (a.reduction == Reduction::Mean) g = counted > 0 ? g / counted : 0.0;
        double pv = static_cast<double>(static_cast<C>(p.data<T>()[i * classes + l]));
        dp.data<T>()[i * classes + l] = static_cast<T>(static_cast<C>(a.logProb ? -g : -g / pv));
      }
    });
  };
}

// ---- IdentityLoss ------------------------------------------------------------------------------
KernelFn identityLossKernel(CompileContext& c) {
  Reduction r = reductionOf(c.node());
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    // Integer losses too (PopART trains those; a Mean rounds toward zero).
    dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      writeLoss<T>(k, x.dtype(), x.shape(), asDoubles<T>(x), r, static_cast<double>(x.numel()));
    });
  };
}

// ---- MseLoss -----------------------------------------------------------------------------------
KernelFn mseKernel(CompileContext& c) {
  Reduction r = reductionOf(c.node());
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& t = k.input(1);
    GRAFT_CHECK(x.shape() == t.shape() && x.dtype() == t.dtype(), "{}: prediction {} {} and target {} {} differ", what,
                dtypeName(x.dtype()), shapeToString(x.shape()), dtypeName(t.dtype()), shapeToString(t.shape()));
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto a = asDoubles<T>(x), b = asDoubles<T>(t);
      for (size_t i = 0; i < a.size(); ++i) a[i] = (a[i] - b[i]) * (a[i] - b[i]);
      writeLoss<T>(k, x.dtype(), x.shape(), a, r, static_cast<double>(x.numel()));
    });
  };
}

// dy of a reduced loss, broadcast back over `like` (divided by its size for Mean).
ir::Tensor* spreadDy(GradBuilder& g, ir::Tensor* like, Reduction r) {
  ir::Tensor* dy = g.dy();
  if (r == Reduction::None) return dy;
  ir::Tensor* spread = g.add(g.zerosLike(like), dy);
  if (r == Reduction::Mean) {
    GRAFT_CHECK(like->info().isStatic(), "{}: the gradient of a Mean loss needs the static shape of '{}'",
                g.node().describe(), like->id());
    spread = g.scale(spread, 1.0 / static_cast<double>(std::max<int64_t>(1, like->info().nelms())));
  }
  return spread;
}

InferFn lossInfer(int shapeFrom) {
  return [shapeFrom](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
    ir::ValueType t = in.at(shapeFrom);
    if (shapeFrom == 1) t.info.setDataType(in.at(0).info.dataType());  // Nll: labels' shape, probs' type
    return std::vector<ir::ValueType>{reducedType(t, reductionOf(n))};
  };
}

// PopART's way of printing a shape and a tensor's type: "[2 5]", "INT32   [2 5]".
std::string popartShape(const Shape& shape) {
  std::string dims;
  for (int64_t d : shape) dims += (dims.empty() ? "" : " ") + std::to_string(d);
  return "[" + dims + "]";
}
std::string popartInfo(const TensorInfo& t) {
  std::string type(dtypeName(t.dataType()));
  for (char& ch : type) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  type.resize(std::max<size_t>(type.size(), 8), ' ');
  return type + popartShape(t.shape());
}

// Nll's labels are checked when the op is added, as PopART does: integers, shaped as the
// probabilities without their class axis.
std::vector<ir::ValueType> nllInfer(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                    const std::vector<const NDArray*>& consts) {
  GRAFT_CHECK(in.size() == 2 && in[0].known() && in[1].known(), "{}: takes 2 inputs (probabilities, labels)",
              n.describe());
  const TensorInfo& p = in[0].info;
  const TensorInfo& l = in[1].info;
  GRAFT_CHECK(isInteger(l.dataType()), "{}: the label tensor must hold integers, got {}", n.describe(),
              dtypeName(l.dataType()));
  if (p.hasShape() && l.hasShape() && p.isStatic() && l.isStatic()) {
    GRAFT_CHECK(p.rank() >= 1, "{}: the probabilities must have a class axis, got a scalar", n.describe());
    Shape ps = p.shape();
    Shape lead(ps.begin(), ps.end() - 1);
    GRAFT_CHECK(l.shape() == lead,
                "The label tensor ({}) must have shape {} to match all but the final dimension of the probabilities "
                "tensor ({}) (op {})",
                popartInfo(l), popartShape(lead), popartInfo(p), n.describe());
  }
  return lossInfer(1)(n, in, consts);
}

}  // namespace

GRAFT_REGISTER_OPS(loss) {
  r.add("L1", kGraphcoreDomain).setReference(l1Kernel).setInfer(lossInfer(0)).setVjp([](GradBuilder& g) {
    double lambda = g.node().attrFloat("lambda", 1.0f);
    ir::Tensor* x = g.in(0);
    g.setDx(0, g.mul(spreadDy(g, x, reductionOf(g.node())), g.scale(g.op("Sign", {x}), lambda)));
  });
  r.add("Nll", kGraphcoreDomain).setReference(nllKernel).setInfer(nllInfer).noGradient({1}).setVjp([](GradBuilder& g) {
    g.setDx(0, g.op("NllGrad", {g.in(0), g.in(1), g.dy()}, g.node().attrs(), kGraftDomain));
  });
  r.add("NllGrad", kGraftDomain)
      .setReference(nllGradKernel)
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{in.at(0)};
      });
  r.add("IdentityLoss", kGraphcoreDomain)
      .setReference(identityLossKernel)
      .setInfer(lossInfer(0))
      .setVjp([](GradBuilder& g) { g.setDx(0, spreadDy(g, g.in(0), reductionOf(g.node()))); });
  r.add("MseLoss", kGraftDomain).setReference(mseKernel).setInfer(lossInfer(0)).setVjp([](GradBuilder& g) {
    ir::Tensor* diff = g.sub(g.in(0), g.in(1));
    ir::Tensor* d = g.mul(spreadDy(g, g.in(0), reductionOf(g.node())), g.scale(diff, 2.0));
    if (g.wants(0)) g.setDx(0, d);
    if (g.wants(1)) g.setDx(1, g.neg(d));
  });
}

}  // namespace graft::ops
