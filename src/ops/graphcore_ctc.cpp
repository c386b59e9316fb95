// PopART's CtcLoss (ai.graphcore): the connectionist temporal classification loss of
// torch.nn.CTCLoss. Inputs: log_probs [T, N, C] (log-softmaxed), targets [N, S] (integers, no
// blank), input_lengths [N], target_lengths [N]. Per sample the loss is -log p(target | input),
// summed over alignments by the forward (alpha) recursion in log space over the target with
// blanks interleaved. `reduction` "Mean" divides each loss by its target length (at least 1) and
// averages over the batch, "Sum" adds, "None" gives [N]; `zeroInfinity` turns infinite losses
// (impossible alignments) and their gradients into 0. `blank` is the blank class.
// CtcLossGrad (ai.graft) is the gradient with respect to log_probs, from the forward and
// backward (beta) recursions: d loss_n / d lp[t, n, c] = -exp(logsumexp over the positions s
// with label c of (alpha + beta) - lp[t, n, c] + loss_n).
#include <cmath>
#include <limits>

#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/graphcore_util.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double logAdd(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  double m = std::max(a, b);
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

enum class Reduction { Sum, Mean, None };

Reduction reductionOf(const ir::Node& n) {
  std::string r = n.attrString("reduction", "Mean");
  if (r == "Sum") return Reduction::Sum;
  if (r == "Mean") return Reduction::Mean;
  GRAFT_CHECK(r == "None", "{}: reduction must be Sum, Mean or None, got '{}'", n.describe(), r);
  return Reduction::None;
}

struct CtcAttrs {
  Reduction reduction;
  int64_t blank;
  bool zeroInfinity;
  std::string what;
};

CtcAttrs ctcAttrs(const ir::Node& n) {
  return {reductionOf(n), n.attrInt("blank", 0), n.attrInt("zeroInfinity", 0) != 0, n.describe()};
}

// One sample: log_probs as doubles [T][C] (row t at lp + t * stride), its labels.
struct Sample {
  const std::vector<double>* lp;
  int64_t offset, stride, classes, length;
  std::vector<int64_t> ext;  // the target with blanks interleaved: blank, l1, blank, l2, ..., blank
  double at(int64_t t, int64_t s) const { return (*lp)[offset + t * stride + ext[s]]; }
};

// alpha[t][s] (forward) or beta[t][s] (backward), in log space.
std::vector<double> recursion(const Sample& x, int64_t blank, bool forward) {
  int64_t t1 = x.length, s1 = static_cast<int64_t>(x.ext.size());
  std::vector<double> a(static_cast<size_t>(std::max<int64_t>(t1, 1) * s1), kNegInf);
  if (t1 == 0) return a;
  auto idx = [s1](int64_t t, int64_t s) { return static_cast<size_t>(t * s1 + s); };
  auto skips = [&](int64_t s, int64_t other) {
    return other >= 0 && other < s1 && x.ext[s] != blank && x.ext[s] != x.ext[other];
  };
  int64_t t0 = forward ? 0 : t1 - 1;
  if (forward) {
    a[idx(0, 0)] = x.at(0, 0);
    if (s1 > 1) a[idx(0, 1)] = x.at(0, 1);
  } else {
    a[idx(t0, s1 - 1)] = x.at(t0, s1 - 1);
    if (s1 > 1) a[idx(t0, s1 - 2)] = x.at(t0, s1 - 2);
  }
  for (int64_t k = 1; k < t1; ++k) {
    int64_t t = forward ? k : t1 - 1 - k, prev = forward ? t - 1 : t + 1;
    for (int64_t s = 0; s < s1; ++s) {
      int64_t step = forward ? -1 : 1;
      double v = a[idx(prev, s)];
      if (s + step >= 0 && s + step < s1) v = logAdd(v, a[idx(prev, s + step)]);
      if (skips(s, s + 2 * step)) v = logAdd(v, a[idx(prev, s + 2 * step)]);
      a[idx(t, s)] = v == kNegInf ? kNegInf : v + x.at(t, s);
    }
  }
  return a;
}

struct Batch {
  std::vector<double> lp;
  std::vector<Sample> samples;
  std::vector<int64_t> targetLengths;
};

template <class T>
Batch readBatch(KernelContext& k, const CtcAttrs& a) {
  const NDArray& lpIn = k.input(0);
  GRAFT_CHECK(lpIn.rank() == 3, "{}: log_probs must be [T, N, C], got {}", a.what, shapeToString(lpIn.shape()));
  int64_t tMax = lpIn.dim(0), n = lpIn.dim(1), c = lpIn.dim(2);
  const NDArray& targets = k.input(1);
  GRAFT_CHECK(targets.rank() == 2 && targets.dim(0) == n, "{}: targets must be [N, S] with N = {}, got {}", a.what, n,
              shapeToString(targets.shape()));
  std::vector<int64_t> tg = anyIntToInt64Vector(targets), inLen = anyIntToInt64Vector(k.input(2)),
                       tgLen = anyIntToInt64Vector(k.input(3));
  GRAFT_CHECK(static_cast<int64_t>(inLen.size()) == n && static_cast<int64_t>(tgLen.size()) == n,
              "{}: input_lengths and target_lengths must have N = {} entries", a.what, n);
  GRAFT_CHECK(a.blank >= 0 && a.blank < c, "{}: blank {} is not a class (C = {})", a.what, a.blank, c);
  Batch b;
  b.lp.resize(static_cast<size_t>(lpIn.numel()));
  for (int64_t i = 0; i < lpIn.numel(); ++i)
    b.lp[i] = static_cast<double>(static_cast<ComputeType<T>>(lpIn.data<T>()[i]));
  int64_t s = targets.dim(1);
  for (int64_t j = 0; j < n; ++j) {
    GRAFT_CHECK(inLen[j] >= 0 && inLen[j] <= tMax && tgLen[j] >= 0 && tgLen[j] <= s,
                "{}: sample {} has input length {} (max {}) and target length {} (max {})", a.what, j, inLen[j], tMax,
                tgLen[j], s);
    Sample x{&b.lp, j * c, n * c, c, inLen[j], {a.blank}};
    for (int64_t i = 0; i < tgLen[j]; ++i) {
      int64_t label = tg[j * s + i];
      GRAFT_CHECK(label >= 0 && label < c && label != a.blank,
                  "{}: target {} of sample {} is {}, not a class other "
                  "than the blank",
                  a.what, i, j, label);
      x.ext.push_back(label);
      x.ext.push_back(a.blank);
    }
    b.samples.push_back(std::move(x));
    b.targetLengths.push_back(tgLen[j]);
  }
  return b;
}

// -log p(target) of one sample from its alpha.
double lossOf(const Sample& x, const std::vector<double>& alpha) {
  if (x.length == 0) return x.ext.size() == 1 ? 0.0 : std::numeric_limits<double>::infinity();
  int64_t s1 = static_cast<int64_t>(x.ext.size());
  size_t last = static_cast<size_t>((x.length - 1) * s1);
  double ll = alpha[last + s1 - 1];
  if (s1 > 1) ll = logAdd(ll, alpha[last + s1 - 2]);
  return -ll;
}

KernelFn ctcKernel(CompileContext& c) {
  CtcAttrs a = ctcAttrs(c.node());
  return [a](KernelContext& k) {
    dispatch<kFloats>(k.input(0).dtype(), a.what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      Batch b = readBatch<T>(k, a);
      std::vector<double> losses;
      for (const Sample& x : b.samples) {
        double l = lossOf(x, recursion(x, a.blank, true));
        if (a.zeroInfinity && std::isinf(l)) l = 0;
        losses.push_back(l);
      }
      DataType dt = k.input(0).dtype();
      auto put = [](T* p, double v) { *p = static_cast<T>(static_cast<ComputeType<T>>(v)); };
      if (a.reduction == Reduction::None) {
        NDArray& y = k.allocOutputUninit(0, dt, {static_cast<int64_t>(losses.size())});
        for (size_t i = 0; i < losses.size(); ++i) put(y.data<T>() + i, losses[i]);
        return;
      }
      double total = 0;
      for (size_t i = 0; i < losses.size(); ++i)
        total += a.reduction == Reduction::Mean
                     ? losses[i] / static_cast<double>(std::max<int64_t>(1, b.targetLengths[i]))
                     : losses[i];
      if (a.reduction == Reduction::Mean && !losses.empty()) total /= static_cast<double>(losses.size());
      put(k.allocOutputUninit(0, dt, {}).data<T>(), total);
    });
  };
}

// CtcLossGrad(log_probs, targets, input_lengths, target_lengths, dy) -> d log_probs.
KernelFn ctcGradKernel(CompileContext& c) {
  CtcAttrs a = ctcAttrs(c.node());
  return [a](KernelContext& k) {
    dispatch<kFloats>(k.input(0).dtype(), a.what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      Batch b = readBatch<T>(k, a);
      std::vector<double> dy = [&] {
        const NDArray& g = k.input(4);
        std::vector<double> v(static_cast<size_t>(g.numel()));
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(static_cast<C>(g.data<T>()[i]));
        return v;
      }();
      const NDArray& lpIn = k.input(0);
      NDArray& dx = k.allocOutput(0, lpIn.dtype(), lpIn.shape());
      int64_t n = static_cast<int64_t>(b.samples.size());
      for (int64_t j = 0; j < n; ++j) {
        const Sample& x = b.samples[j];
        double scale = a.reduction == Reduction::None ? dy.at(j) : dy.at(0);
        if (a.reduction == Reduction::Mean)
          scale /= static_cast<double>(n) * static_cast<double>(std::max<int64_t>(1, b.targetLengths[j]));
        std::vector<double> alpha = recursion(x, a.blank, true), beta = recursion(x, a.blank, false);
        double loss = lossOf(x, alpha);
        if (std::isinf(loss)) {
          GRAFT_CHECK(a.zeroInfinity || x.length == 0,
                      "{}: sample {} has no alignment (infinite loss); its gradient is "
                      "undefined (set zeroInfinity)",
                      a.what, j);
          continue;
        }
        int64_t s1 = static_cast<int64_t>(x.ext.size());
        for (int64_t t = 0; t < x.length; ++t) {
          std::vector<double> acc(static_cast<size_t>(x.classes), kNegInf);
          for (int64_t s = 0; s < s1; ++s) {
            size_t i = static_cast<size_t>(t * s1 + s);
            acc[static_cast<size_t>(x.ext[s])] = logAdd(acc[static_cast<size_t>(x.ext[s])], alpha[i] + beta[i]);
          }
          for (int64_t cl = 0; cl < x.classes; ++cl) {
            double lp = b.lp[x.offset + t * x.stride + cl];
            double g = acc[cl] == kNegInf ? 0.0 : -std::exp(acc[cl] - lp + loss);
            dx.data<T>()[x.offset + t * x.stride + cl] = static_cast<T>(static_cast<C>(scale * g));
          }
        }
      }
    });
  };
}

std::vector<ir::ValueType> inferCtc(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                    const std::vector<const NDArray*>&) {
  GRAFT_CHECK(in.size() == 4 && in[0].known(),
              "{}: takes 4 inputs (log_probs, targets, input_lengths, "
              "target_lengths)",
              n.describe());
  const TensorInfo& lp = in[0].info;
  GRAFT_CHECK(isFloatingPoint(lp.dataType()), "{}: log_probs must be floating-point, got {}", n.describe(),
              dtypeName(lp.dataType()));
  if (reductionOf(n) != Reduction::None) return {ir::ValueType::tensor(TensorInfo(lp.dataType(), Shape{}))};
  if (!lp.hasShape()) return {ir::ValueType::tensor(TensorInfo(lp.dataType(), std::vector<Dim>{Dim()}))};
  GRAFT_CHECK(lp.rank() == 3, "{}: log_probs must be [T, N, C], got {}", n.describe(), lp.str());
  return {ir::ValueType::tensor(TensorInfo(lp.dataType(), std::vector<Dim>{lp.dims()[1]}))};
}

}  // namespace

GRAFT_REGISTER_OPS(graphcore_ctc) {
  r.add("CtcLoss", kGraphcoreDomain)
      .setReference(ctcKernel)
      .setInfer(inferCtc)
      .noGradient({1, 2, 3})
      .setVjp([](GradBuilder& g) {
        g.setDx(0, g.op("CtcLossGrad", {g.in(0), g.in(1), g.in(2), g.in(3), g.dy()}, g.node().attrs(), kGraftDomain));
      });
  r.add("CtcLossGrad", kGraftDomain)
      .setReference(ctcGradKernel)
      .noGradient({0, 1, 2, 3, 4})
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{in.at(0)};
      });
}

}  // namespace graft::ops
