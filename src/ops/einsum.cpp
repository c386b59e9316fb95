// Tensor contractions: Einsum (general: repeated labels take diagonals, "..." broadcasts, the
// implicit form sorts the output labels like numpy) and Det.
#include <algorithm>
#include <cmath>
#include <map>
#include <type_traits>

#include "onnx/schema_infer.hpp"
#include "ops/copy_util.hpp"
#include "ops/cost.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// Labels are letters; each dimension covered by "..." gets a pseudo-label kEllipsisBase + k,
// where k counts from the left of the (right-aligned) broadcast ellipsis shape.
constexpr int kEllipsisMark = -1;
constexpr int kEllipsisBase = 1000;

/// One side of the equation: labels in order, kEllipsisMark where "..." stands.
using Term = std::vector<int>;

struct Equation {
  std::vector<Term> inputs;
  Term output;
  bool explicitOutput = false;
};

Term parseTerm(const std::string& s, const std::string& what) {
  Term t;
  bool seenEllipsis = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
      t.push_back(ch);
    } else if (ch == '.' && s.compare(i, 3, "...") == 0) {
      GRAFT_CHECK(!seenEllipsis, "{}: '{}' has more than one ellipsis", what, s);
      seenEllipsis = true;
      t.push_back(kEllipsisMark);
      i += 2;
    } else {
      GRAFT_THROW("{}: unexpected character '{}' in einsum term '{}'", what, ch, s);
    }
  }
  return t;
}

Equation parseEquation(std::string eq, const std::string& what) {
  eq.erase(std::remove_if(eq.begin(), eq.end(), [](char ch) { return ch == ' ' || ch == '\t'; }), eq.end());
  Equation e;
  std::string lhs = eq;
  size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    e.output = parseTerm(eq.substr(arrow + 2), what);
    e.explicitOutput = true;
  }
  size_t start = 0;
  for (;;) {
    size_t comma = lhs.find(',', start);
    e.inputs.push_back(
        parseTerm(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), what));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return e;
}

/// The contraction plan for concrete input shapes.
struct EinsumPlan {
  std::vector<int64_t> sizes;                 ///< per loop label: output labels first, then summed
  std::vector<std::vector<int64_t>> strides;  ///< per input, per loop label
  Shape outShape;
  int64_t numOut = 0;  ///< how many loop labels are output labels
};

EinsumPlan planEinsum(const Equation& eq, const std::vector<Shape>& shapes, const std::string& what) {
  GRAFT_CHECK(eq.inputs.size() == shapes.size(), "{}: the equation has {} operands but the node has {} inputs", what,
              eq.inputs.size(), shapes.size());
  // Expand each input's term to one label per axis.
  int64_t ellRank = 0;
  std::vector<std::vector<int>> axisLabels(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Term& t = eq.inputs[i];
    auto letters = static_cast<int64_t>(std::count_if(t.begin(), t.end(), [](int l) { return l != kEllipsisMark; }));
    bool hasEll = letters != static_cast<int64_t>(t.size());
    auto r = static_cast<int64_t>(shapes[i].size());
    GRAFT_CHECK(hasEll ? r >= letters : r == letters, "{}: operand {} has rank {} but its term names {} axes{}", what,
                i, r, letters, hasEll ? " plus an ellipsis" : "");
    ellRank = std::max(ellRank, r - letters);
  }
  std::map<int, int64_t> size;  // label -> size (after broadcasting 1s)
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Term& t = eq.inputs[i];
    auto r = static_cast<int64_t>(shapes[i].size());
    int64_t ell = r - static_cast<int64_t>(std::count_if(t.begin(), t.end(), [](int l) { return l != kEllipsisMark; }));
    for (int l : t) {
      if (l == kEllipsisMark) {
        for (int64_t k = 0; k < ell; ++k) axisLabels[i].push_back(kEllipsisBase + static_cast<int>(ellRank - ell + k));
      } else {
        axisLabels[i].push_back(l);
      }
    }
    for (int64_t a = 0; a < r; ++a) {
      int l = axisLabels[i][a];
      int64_t d = shapes[i][a];
      auto it = size.find(l);
      if (it == size.end() || it->second == 1) {
        size[l] = d;
      } else {
        GRAFT_CHECK(d == it->second || d == 1, "{}: label '{}' has size {} in operand {} but {} elsewhere", what,
                    l >= kEllipsisBase ? std::string("...") : std::string(1, static_cast<char>(l)), d, i, it->second);
      }
    }
  }
  // The output's labels.
  std::vector<int> outLabels;
  if (eq.explicitOutput) {
    bool outEll = false;
    for (int l : eq.output) {
      if (l == kEllipsisMark) {
        outEll = true;
        for (int64_t k = 0; k < ellRank; ++k) outLabels.push_back(kEllipsisBase + static_cast<int>(k));
        continue;
      }
      GRAFT_CHECK(size.count(l), "{}: output label '{}' does not appear in any operand", what, static_cast<char>(l));
      GRAFT_CHECK(std::count(eq.output.begin(), eq.output.end(), l) == 1, "{}: output label '{}' appears twice", what,
                  static_cast<char>(l));
      outLabels.push_back(l);
    }
    GRAFT_CHECK(outEll || ellRank == 0,
                "{}: the operands' ellipsis covers {} dimensions but the output has no ellipsis", what, ellRank);
  } else {
    // numpy's implicit output: the broadcast ellipsis, then labels used once, in ASCII order.
    for (int64_t k = 0; k < ellRank; ++k) outLabels.push_back(kEllipsisBase + static_cast<int>(k));
    std::map<int, int> uses;
    for (const Term& t : eq.inputs)
      for (int l : t)
        if (l != kEllipsisMark) ++uses[l];
    for (const auto& [l, n] : uses)
      if (n == 1) outLabels.push_back(l);
  }
  EinsumPlan p;
  std::vector<int> loop = outLabels;
  for (const auto& [l, s] : size)
    if (std::find(outLabels.begin(), outLabels.end(), l) == outLabels.end()) loop.push_back(l);
  p.numOut = static_cast<int64_t>(outLabels.size());
  for (int l : loop) p.sizes.push_back(size.count(l) ? size[l] : 1);
  for (int64_t k = 0; k < p.numOut; ++k) p.outShape.push_back(p.sizes[k]);
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto st = stridesOf(shapes[i]);
    std::vector<int64_t> ls(loop.size(), 0);
    for (size_t a = 0; a < shapes[i].size(); ++a) {
      size_t li = std::find(loop.begin(), loop.end(), axisLabels[i][a]) - loop.begin();
      // A size-1 axis broadcasts against the label's size: it never moves.
      if (shapes[i][a] != 1) ls[li] += st[a];
    }
    p.strides.push_back(std::move(ls));
  }
  return p;
}

KernelFn einsumKernel(CompileContext& c) {
  std::string what = c.node().describe();
  Equation eq = parseEquation(c.node().attrString("equation"), what);
  return [what, eq](KernelContext& k) {
    size_t n = k.numInputs();
    std::vector<Shape> shapes;
    DataType dt = k.input(0).dtype();
    for (size_t i = 0; i < n; ++i) {
      shapes.push_back(k.input(i).shape());
      GRAFT_CHECK(k.input(i).dtype() == dt, "{}: operand {} has dtype {}, expected {}", what, i,
                  dtypeName(k.input(i).dtype()), dtypeName(dt));
    }
    EinsumPlan p = planEinsum(eq, shapes, what);
    NDArray& y = k.allocOutput(0, dt, p.outShape);
    auto loops = static_cast<int64_t>(p.sizes.size());
    int64_t sumTotal = 1;
    for (int64_t l = p.numOut; l < loops; ++l) sumTotal = checkedMul(sumTotal, p.sizes[l], what);
    int64_t total = checkedMul(y.numel(), sumTotal, what);
    if (total == 0) return;
    dispatch<kNumeric>(dt, what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      // Integers accumulate in uint64 (wrapping like the element type would); floats in double.
      using Acc = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;
      auto load = [](const T& v) {
        if constexpr (std::is_integral_v<T>)
          return static_cast<uint64_t>(v);
        else
          return static_cast<double>(static_cast<ComputeType<T>>(v));
      };
      std::vector<const T*> in(n);
      for (size_t i = 0; i < n; ++i) in[i] = k.input(i).template data<T>();
      T* out = y.data<T>();
      std::vector<int64_t> cnt(static_cast<size_t>(loops), 0), off(n, 0);
      Acc acc = 0;
      int64_t o = 0, inner = 0;
      for (int64_t it = 0; it < total; ++it) {
        Acc prod = 1;
        for (size_t i = 0; i < n; ++i) prod *= load(in[i][off[i]]);
        acc += prod;
        if (++inner == sumTotal) {
          out[o++] = static_cast<T>(static_cast<ComputeType<T>>(acc));
          acc = 0;
          inner = 0;
        }
        for (int64_t l = loops - 1; l >= 0; --l) {
          if (++cnt[l] < p.sizes[l]) {
            for (size_t i = 0; i < n; ++i) off[i] += p.strides[i][l];
            break;
          }
          for (size_t i = 0; i < n; ++i) off[i] -= p.strides[i][l] * (p.sizes[l] - 1);
          cnt[l] = 0;
        }
      }
    });
  };
}

KernelFn detKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 2 && x.dim(-1) == x.dim(-2), "{}: input must have shape [*, M, M], got {}", what,
                shapeToString(x.shape()));
    int64_t m = x.dim(-1);
    Shape os(x.shape().begin(), x.shape().end() - 2);
    NDArray& y = k.allocOutputUninit(0, x.dtype(), os);
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<double> a(static_cast<size_t>(m * m));
      for (int64_t b = 0; b < y.numel(); ++b) {
        const T* src = x.data<T>() + b * m * m;
        for (int64_t i = 0; i < m * m; ++i) a[i] = static_cast<double>(static_cast<ComputeType<T>>(src[i]));
        // LU with partial pivoting; det = sign * product of the pivots.
        double det = 1;
        for (int64_t col = 0; col < m && det != 0; ++col) {
          int64_t piv = col;
          for (int64_t r = col + 1; r < m; ++r)
            if (std::abs(a[r * m + col]) > std::abs(a[piv * m + col])) piv = r;
          if (a[piv * m + col] == 0) {
            det = 0;
            break;
          }
          if (piv != col) {
            for (int64_t j = 0; j < m; ++j) std::swap(a[col * m + j], a[piv * m + j]);
            det = -det;
          }
          double d = a[col * m + col];
          det *= d;
          for (int64_t r = col + 1; r < m; ++r) {
            double f = a[r * m + col] / d;
            for (int64_t j = col; j < m; ++j) a[r * m + j] -= f * a[col * m + j];
          }
        }
        y.data<T>()[b] = static_cast<T>(static_cast<ComputeType<T>>(det));
      }
    });
  };
}

// ONNX's inference of Einsum gives the output's rank but not its dimensions; with static inputs
// the plan has them (so shapes downstream, and the backward graph's, stay static).
std::vector<ir::ValueType> einsumInfer(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                       const std::vector<const NDArray*>& consts) {
  std::vector<ir::ValueType> out = onnxio::inferWithOnnxSchema(n, in, consts);
  std::vector<Shape> shapes;
  for (const ir::ValueType& t : in) {
    if (!t.isTensor() || !t.info.isStatic()) return out;
    shapes.push_back(t.info.shape());
  }
  std::string what = n.describe();
  EinsumPlan p = planEinsum(parseEquation(n.attrString("equation"), what), shapes, what);
  if (!out.empty() && out[0].isTensor()) out[0] = ir::ValueType::tensor(TensorInfo(out[0].info.dataType(), p.outShape));
  return out;
}

// One multiply per further operand and one add per point of the loop space (output labels and
// summed labels together).
double einsumCost(const ir::Node& n) {
  std::vector<Shape> shapes;
  for (const ir::Tensor* t : n.inputs()) {
    if (!t || !t->type().isTensor() || !t->info().isStatic()) return cost::outputElements(n);
    shapes.push_back(t->info().shape());
  }
  try {
    std::string what = n.describe();
    EinsumPlan p = planEinsum(parseEquation(n.attrString("equation"), what), shapes, what);
    double points = 1;
    for (int64_t s : p.sizes) points *= static_cast<double>(s);
    return points * static_cast<double>(shapes.size());
  } catch (const Error&) {
    return cost::outputElements(n);  // a bad equation is reported when the node compiles
  }
}

}  // namespace

GRAFT_REGISTER_OPS(einsum) {
  r.add("Einsum").setReference(einsumKernel).setInfer(einsumInfer).setCost(einsumCost);
  r.add("Det").setReference(detKernel);
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {
namespace {

// The equation with every "..." spelled out in letters the equation does not use, and the
// output made explicit (numpy's implicit order), so that terms can be rearranged freely.
struct LetterEquation {
  std::vector<std::string> inputs;
  std::string output;
};

LetterEquation spellOut(GradBuilder& g, const Equation& eq) {
  const std::string what = g.node().describe();
  GRAFT_CHECK(eq.inputs.size() == g.node().numInputs(), "{}: the equation has {} operands but the node has {} inputs",
              what, eq.inputs.size(), g.node().numInputs());
  std::vector<bool> used(128, false);
  auto markUsed = [&](const Term& t) {
    for (int l : t)
      if (l != kEllipsisMark) used[static_cast<size_t>(l)] = true;
  };
  for (const Term& t : eq.inputs) markUsed(t);
  markUsed(eq.output);
  std::vector<int64_t> ell(eq.inputs.size(), 0);
  int64_t ellRank = 0;
  for (size_t i = 0; i < eq.inputs.size(); ++i) {
    const Term& t = eq.inputs[i];
    auto letters = static_cast<int64_t>(std::count_if(t.begin(), t.end(), [](int l) { return l != kEllipsisMark; }));
    bool hasEll = letters != static_cast<int64_t>(t.size());
    int64_t r = gradutil::rankOf(g, g.in(i));
    GRAFT_CHECK(hasEll ? r >= letters : r == letters, "{}: operand {} has rank {} but its term names {} axes{}", what,
                i, r, letters, hasEll ? " plus an ellipsis" : "");
    ell[i] = r - letters;
    ellRank = std::max(ellRank, ell[i]);
  }
  std::string spare;
  for (char ch : std::string("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    if (!used[static_cast<size_t>(ch)] && static_cast<int64_t>(spare.size()) < ellRank) spare.push_back(ch);
  GRAFT_CHECK(static_cast<int64_t>(spare.size()) == ellRank,
              "{}: the gradient of Einsum needs {} unused letters for the ellipsis, only {} are free", what, ellRank,
              spare.size());
  auto spell = [&](const Term& t, int64_t e) {
    std::string s;
    for (int l : t) {
      if (l == kEllipsisMark)
        s += spare.substr(static_cast<size_t>(ellRank - e));
      else
        s.push_back(static_cast<char>(l));
    }
    return s;
  };
  LetterEquation le;
  for (size_t i = 0; i < eq.inputs.size(); ++i) le.inputs.push_back(spell(eq.inputs[i], ell[i]));
  if (eq.explicitOutput) {
    le.output = spell(eq.output, ellRank);
  } else {
    le.output = spare;
    std::map<int, int> uses;
    for (const Term& t : eq.inputs)
      for (int l : t)
        if (l != kEllipsisMark) ++uses[l];
    for (const auto& [l, n] : uses)
      if (n == 1) le.output.push_back(static_cast<char>(l));
  }
  return le;
}

// d/dx_i of an Einsum is another Einsum: dy contracted with the other operands onto x_i's labels.
// Labels that only x_i has were summed away, so they come back by broadcasting; size-1 axes that
// broadcast in the forward pass are summed back. A label repeated within x_i's term (a diagonal)
// would need a write to the diagonal, which no forward op expresses: it is rejected.
void einsumVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  LetterEquation le = spellOut(g, parseEquation(n.attrString("equation"), n.describe()));
  for (size_t i = 0; i < le.inputs.size(); ++i) {
    if (!g.wants(i)) continue;
    const std::string& term = le.inputs[i];
    for (char ch : term)
      GRAFT_CHECK(std::count(term.begin(), term.end(), ch) == 1,
                  "{}: cannot differentiate Einsum with respect to operand {}: label '{}' repeats in its term '{}' "
                  "(a diagonal)",
                  n.describe(), i, ch, term);
    std::string eq = le.output, elsewhere = le.output;
    std::vector<ir::Tensor*> operands{g.dy()};
    for (size_t j = 0; j < le.inputs.size(); ++j) {
      if (j == i) continue;
      eq += "," + le.inputs[j];
      elsewhere += le.inputs[j];
      operands.push_back(g.in(j));
    }
    std::string kept;
    std::vector<int64_t> dropped;
    for (size_t k = 0; k < term.size(); ++k) {
      if (elsewhere.find(term[k]) != std::string::npos)
        kept.push_back(term[k]);
      else
        dropped.push_back(static_cast<int64_t>(k));
    }
    ir::Attributes a;
    a.set("equation", eq + "->" + kept);
    ir::Tensor* x = g.in(i);
    ir::Tensor* dx = g.op("Einsum", operands, a);
    if (!dropped.empty()) dx = g.op("Unsqueeze", {dx, g.int64s(dropped)});
    bool same = dx->info().isStatic() && x->info().isStatic() && dx->info().shape() == x->info().shape();
    if (!same) dx = g.unbroadcast(g.op("Expand", {dx, gradutil::shapeOf(g, x)}), x);
    g.setDx(i, dx);
  }
}

}  // namespace

GRAFT_REGISTER_OPS(einsum_vjp) { r.add("Einsum").setVjp(einsumVjp); }

}  // namespace graft::ops
