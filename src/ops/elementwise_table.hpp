#pragma once
// The table of elementwise and activation ops: every fact about one of these ops that more than
// one file needs, in one row. What reads it:
//   - ops/elementwise_table.cpp registers each unary row's reference kernel (and its traits);
//   - ops/fused_program.hpp derives the FusedElementwise instruction codes from the rows with a
//     code, and ops/fused_elementwise.cpp its interpreter (the reference formula of each row);
//   - passes/fuse_elementwise.cpp maps nodes to instructions, passes/fuse_util.cpp and
//     ops/fused.cpp decide and expand the activations fused into Conv / MatMul / Gemm;
//   - the cpu backend: vec_unary.cpp registers a vectorised kernel per unary row, vec_fused.cpp
//     interprets programs with the same formulas (vecmath's functions for float, see
//     backends/cpu/vec_math.hpp), onednn_common.cpp maps fused activations to oneDNN post-ops and
//     onednn_layout.cpp lets ops with f(0) = 0 run on channel-blocked data.
// Adding an activation: a row here, its VJP (ops/activation.cpp) and its tests.
//
// Columns of GRAFT_EW_PROGRAM / GRAFT_EW_OTHER rows:
//   Id     C++ name: ew::Op::Id, and fused::Code::Id for program rows
//   Type   the op type; "" for an instruction that is no op of its own (Const, Square)
//   Dom    the op's domain: "" (ai.onnx), "ai.graphcore" or "ai.graft"
//   Code   the FusedElementwise instruction code (program rows only). Codes are stored in graphs:
//          append, never renumber
//   Ar     number of operands
//   Pred   1 when the result is a truth value (1 or 0): comparisons and logic
//   Zero   1 when f(0) = 0 (f(0, 0) = 0 for two operands): such an op keeps zero padding zero
//   Types  element types of the unary kernels: Floats, SignedNumeric, Numeric or Bool (ops::k<Types>)
//   Cost   1 for transcendental functions (costly per element: a smaller parallel grain)
//   Inpl   1 when the output may overwrite input 0
//   Dnnl   the oneDNN eltwise post-op (a dnnl::algorithm enumerator) when the activation fuses into
//          Conv / MatMul / Gemm, undef when it does not. HardSigmoid: eltwise_linear, then a clip to
//          [0, 1] (oneDNN 2.6 has no hardsigmoid)
//   P0 D0  the first float parameter: attribute name and default ("" when none). It is the
//          instruction's immediate in programs and activation_alpha in fused nodes. A name of the
//          form "attr=v0|v1|..." is a string attribute with those values: the parameter is the
//          index of the node's value (D: the default's index; another value is an Error)
//   P1 D1  the second (activation_beta in fused nodes)
//   F      the value: an expression over the operands a, b, c and the parameters p0, p1 of the
//          compute type C, with the math functions of M (StdMath below for the reference)
// NaN propagates as IEEE 754 and torch say: every formula returns NaN for a NaN operand (Relu,
// Sign, HardSigmoid and ThresholdedRelu test for it; comparisons are false for NaN, as they must be).
// Clip (bounds are inputs, not attributes), Celu (alpha must not be 0), Round, PRelu and the
// ai.graphcore extras are written by hand where they are used.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ir/graph.hpp"
#include "support/check.hpp"

// clang-format off
#define GRAFT_EW_PROGRAM(X) \
  /* Id          Type              Dom             Code Ar Pred Zero Types          Cost Inpl Dnnl                P0       D0     P1      D1    F */ \
  X(Const,       "",               "",             0,   0, 0,   0,   Floats,        0,   0,   undef,              "",      0.f,   "",     0.f,  p0) \
  X(Add,         "Add",            "",             1,   2, 0,   1,   Numeric,       0,   1,   undef,              "",      0.f,   "",     0.f,  a + b) \
  X(Sub,         "Sub",            "",             2,   2, 0,   1,   Numeric,       0,   1,   undef,              "",      0.f,   "",     0.f,  a - b) \
  X(Mul,         "Mul",            "",             3,   2, 0,   1,   Numeric,       0,   1,   undef,              "",      0.f,   "",     0.f,  a * b) \
  X(Div,         "Div",            "",             4,   2, 0,   0,   Numeric,       0,   1,   undef,              "",      0.f,   "",     0.f,  a / b) \
  X(Pow,         "Pow",            "",             5,   2, 0,   0,   Numeric,       1,   0,   undef,              "",      0.f,   "",     0.f,  M::pow(a, b)) \
  X(Max,         "Max",            "",             6,   2, 0,   1,   Numeric,       0,   0,   undef,              "",      0.f,   "",     0.f,  (a != a || b != b) ? M::template nan<C>() : (a > b ? a : b)) \
  X(Min,         "Min",            "",             7,   2, 0,   1,   Numeric,       0,   0,   undef,              "",      0.f,   "",     0.f,  (a != a || b != b) ? M::template nan<C>() : (a < b ? a : b)) \
  X(Neg,         "Neg",            "",             8,   1, 0,   1,   SignedNumeric, 0,   1,   undef,              "",      0.f,   "",     0.f,  -a) \
  X(Abs,         "Abs",            "",             9,   1, 0,   1,   Numeric,       0,   1,   undef,              "",      0.f,   "",     0.f,  M::abs(a)) \
  X(Exp,         "Exp",            "",             10,  1, 0,   0,   Floats,        1,   1,   undef,              "",      0.f,   "",     0.f,  M::exp(a)) \
  X(Log,         "Log",            "",             11,  1, 0,   0,   Floats,        1,   1,   undef,              "",      0.f,   "",     0.f,  M::log(a)) \
  X(Sqrt,        "Sqrt",           "",             12,  1, 0,   1,   Floats,        0,   1,   undef,              "",      0.f,   "",     0.f,  std::sqrt(a)) \
  X(Reciprocal,  "Reciprocal",     "",             13,  1, 0,   0,   Floats,        0,   1,   undef,              "",      0.f,   "",     0.f,  C(1) / a) \
  X(Tanh,        "Tanh",           "",             14,  1, 0,   1,   Floats,        1,   1,   eltwise_tanh,       "",      0.f,   "",     0.f,  M::tanh(a)) \
  X(Sigmoid,     "Sigmoid",        "",             15,  1, 0,   0,   Floats,        1,   1,   eltwise_logistic,   "",      0.f,   "",     0.f,  M::sigmoid(a)) \
  X(Relu,        "Relu",           "",             16,  1, 0,   1,   SignedNumeric, 0,   1,   eltwise_relu,       "",      0.f,   "",     0.f,  a < C(0) ? C(0) : a) \
  X(Erf,         "Erf",            "",             17,  1, 0,   1,   Floats,        1,   1,   undef,              "",      0.f,   "",     0.f,  M::erf(a)) \
  X(LeakyRelu,   "LeakyRelu",      "",             18,  1, 0,   1,   Floats,        0,   1,   eltwise_relu,       "alpha", 0.01f, "",     0.f,  a >= C(0) ? a : p0 * a) \
  X(GeluTanh,    "Gelu",           "ai.graphcore", 19,  1, 0,   1,   Floats,        1,   0,   eltwise_gelu_tanh,  "",      0.f,   "",     0.f,  M::geluTanh(a)) \
  X(GeluErf,     "GeluErf",        "ai.graft",     20,  1, 0,   1,   Floats,        1,   1,   eltwise_gelu_erf,   "",      0.f,   "",     0.f,  M::geluErf(a)) \
  X(Softplus,    "Softplus",       "",             21,  1, 0,   0,   Floats,        1,   1,   eltwise_soft_relu,  "",      0.f,   "",     0.f,  M::softplus(a)) \
  X(Where,       "Where",          "",             22,  3, 0,   0,   Numeric,       0,   0,   undef,              "",      0.f,   "",     0.f,  a != C(0) ? b : c) \
  X(Greater,     "Greater",        "",             23,  2, 1,   0,   Numeric,       0,   0,   undef,              "",      0.f,   "",     0.f,  a > b ? C(1) : C(0)) \
  X(Less,        "Less",           "",             24,  2, 1,   0,   Numeric,       0,   0,   undef,              "",      0.f,   "",     0.f,  a < b ? C(1) : C(0)) \
  X(GreaterOrEqual, "GreaterOrEqual", "",          25,  2, 1,   0,   Numeric,       0,   0,   undef,              "",      0.f,   "",     0.f,  a >= b ? C(1) : C(0)) \
  X(LessOrEqual, "LessOrEqual",    "",             26,  2, 1,   0,   Numeric,       0,   0,   undef,              "",      0.f,   "",     0.f,  a <= b ? C(1) : C(0)) \
  X(Equal,       "Equal",          "",             27,  2, 1,   0,   Numeric,       0,   0,   undef,              "",      0.f,   "",     0.f,  a == b ? C(1) : C(0)) \
  X(Not,         "Not",            "",             28,  1, 1,   0,   Bool,          0,   0,   undef,              "",      0.f,   "",     0.f,  a == C(0) ? C(1) : C(0)) \
  X(And,         "And",            "",             29,  2, 1,   0,   Bool,          0,   0,   undef,              "",      0.f,   "",     0.f,  (a != C(0) && b != C(0)) ? C(1) : C(0)) \
  X(Or,          "Or",             "",             30,  2, 1,   0,   Bool,          0,   0,   undef,              "",      0.f,   "",     0.f,  (a != C(0) || b != C(0)) ? C(1) : C(0)) \
  X(Sign,        "Sign",           "",             31,  1, 0,   1,   Numeric,       0,   0,   undef,              "",      0.f,   "",     0.f,  a > C(0) ? C(1) : (a < C(0) ? C(-1) : a)) \
  X(Floor,       "Floor",          "",             32,  1, 0,   1,   Floats,        0,   0,   undef,              "",      0.f,   "",     0.f,  std::floor(a)) \
  X(Ceil,        "Ceil",           "",             33,  1, 0,   1,   Floats,        0,   0,   undef,              "",      0.f,   "",     0.f,  std::ceil(a)) \
  X(Square,      "",               "",             34,  1, 0,   1,   Floats,        0,   0,   undef,              "",      0.f,   "",     0.f,  a * a) \
  /* GELU's derivative Phi(x) + x phi(x) given x (a) and y = GeluErf(x) (b): Phi(x) = y / x, so that  */ \
  /* a loop computing both evaluates erf once; Phi = 1/2 for |x| < 1e-30 (where y may be denormal),   */ \
  /* NaN at x = +-inf as in the composed form                                                          */ \
  X(GeluErfGrad, "GeluErfGrad",    "ai.graft",     35,  2, 0,   0,   Floats,        1,   1,   undef,              "",      0.f,   "",     0.f, \
    (M::abs(a) < C(1e-30) ? C(0.5) : b / a) + a * C(0.3989422804014327) * M::exp(C(-0.5) * a * a))

// Rows outside FusedElementwise programs (Code is unused). Their two-operand rows (SwiGLU) take
// operands of one shape and type: no broadcasting.
#define GRAFT_EW_OTHER(X) \
  X(Elu,         "Elu",            "",             -1,  1, 0,   1,   Floats,        1,   1,   eltwise_elu,        "alpha", 1.0f,  "",     0.f,  a >= C(0) ? a : p0 * (M::exp(a) - C(1))) \
  X(Selu,        "Selu",           "",             -1,  1, 0,   1,   Floats,        1,   1,   undef,              "alpha", 1.67326319217681884765625f, "gamma", 1.05070102214813232421875f, \
    p1 * (a > C(0) ? a : p0 * (M::exp(a) - C(1)))) \
  X(HardSigmoid, "HardSigmoid",    "",             -1,  1, 0,   0,   Floats,        0,   1,   eltwise_linear,     "alpha", 0.2f,  "beta", 0.5f, a != a ? a : std::max(C(0), std::min(C(1), p0 * a + p1))) \
  X(HardSwish,   "HardSwish",      "",             -1,  1, 0,   1,   Floats,        0,   1,   eltwise_hardswish,  "",      0.f,   "",     0.f,  a * std::max(C(0), std::min(C(1), a / C(6) + C(0.5)))) \
  X(Softsign,    "Softsign",       "",             -1,  1, 0,   1,   Floats,        0,   1,   undef,              "",      0.f,   "",     0.f,  a / (C(1) + std::abs(a))) \
  X(ThresholdedRelu, "ThresholdedRelu", "",        -1,  1, 0,   1,   Floats,        0,   0,   undef,              "alpha", 1.0f,  "",     0.f,  a > p0 || a != a ? a : C(0)) \
  X(Sin,         "Sin",            "",             -1,  1, 0,   1,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::sin(a)) \
  X(Cos,         "Cos",            "",             -1,  1, 0,   0,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::cos(a)) \
  X(Tan,         "Tan",            "",             -1,  1, 0,   1,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::tan(a)) \
  X(Asin,        "Asin",           "",             -1,  1, 0,   1,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::asin(a)) \
  X(Acos,        "Acos",           "",             -1,  1, 0,   0,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::acos(a)) \
  X(Atan,        "Atan",           "",             -1,  1, 0,   1,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::atan(a)) \
  X(Sinh,        "Sinh",           "",             -1,  1, 0,   1,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::sinh(a)) \
  X(Cosh,        "Cosh",           "",             -1,  1, 0,   0,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::cosh(a)) \
  X(Asinh,       "Asinh",          "",             -1,  1, 0,   1,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::asinh(a)) \
  X(Acosh,       "Acosh",          "",             -1,  1, 0,   0,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::acosh(a)) \
  X(Atanh,       "Atanh",          "",             -1,  1, 0,   1,   Floats,        1,   0,   undef,              "",      0.f,   "",     0.f,  std::atanh(a)) \
  X(Mish,        "Mish",           "",             -1,  1, 0,   1,   Floats,        1,   1,   undef,              "",      0.f,   "",     0.f,  a * M::tanh(M::softplus(a))) \
  X(Swish,       "Swish",          "",             -1,  1, 0,   1,   Floats,        1,   1,   undef,              "alpha", 1.0f,  "",     0.f,  a * M::sigmoid(p0 * a)) \
  X(Gelu,        "Gelu",           "",             -1,  1, 0,   1,   Floats,        1,   1,   undef,              "approximate=none|tanh", 0.f, "", 0.f, \
    p0 != C(0) ? M::geluTanh(a) : M::geluErf(a)) \
  X(SwiGLU,      "SwiGLU",         "",             -1,  2, 0,   1,   Floats,        1,   0,   undef,              "alpha", 1.0f,  "",     0.f,  a * M::sigmoid(p0 * a) * b)

#define GRAFT_EW_ALL(X) GRAFT_EW_PROGRAM(X) GRAFT_EW_OTHER(X)
// clang-format on

namespace graft::ops::ew {

/// Every row of the table.
enum class Op : int32_t {
#define GRAFT_EW_X(Id, ...) Id,
  GRAFT_EW_ALL(GRAFT_EW_X)
#undef GRAFT_EW_X
      Count
};

/// Element-type sets of the Types column (ops/dtype_dispatch.hpp's kFloats, ...).
enum class Types { Floats, SignedNumeric, Numeric, Bool };

/// One row's facts (all but the formula).
struct Row {
  Op op;
  const char* name;    ///< Id
  const char* type;    ///< op type, "" when none
  const char* domain;  ///< "" for ai.onnx
  int32_t code;        ///< FusedElementwise code, -1 when none
  int arity;
  bool predicate;
  bool zeroAtZero;
  Types types;
  bool costly;
  bool inplace;
  const char* dnnl;  ///< oneDNN algorithm enumerator ("undef": not a fusable activation)
  const char* p0;
  float d0;
  const char* p1;
  float d1;
  /// True when the row fuses into Conv / MatMul / Gemm as an activation.
  constexpr bool postOp() const { return std::string_view(dnnl) != "undef"; }
  struct Params {
    float p0 = 0, p1 = 0;
  };
};

inline constexpr Row kRows[] = {
#define GRAFT_EW_X(Id, Type, Dom, Code, Ar, Pred, Zero, Ty, Cost, Inpl, Dnnl, P0, D0, P1, D1, ...) \
  {Op::Id, #Id, Type, Dom, Code, Ar, Pred != 0, Zero != 0, Types::Ty, Cost != 0, Inpl != 0, #Dnnl, P0, D0, P1, D1},
    GRAFT_EW_ALL(GRAFT_EW_X)
#undef GRAFT_EW_X
};
static_assert(sizeof(kRows) / sizeof(kRows[0]) == static_cast<size_t>(Op::Count));

/// The row of `op`.
constexpr const Row& row(Op op) { return kRows[static_cast<int>(op)]; }

/// The row of the op (domain, type), or nullptr when the table has none.
inline const Row* find(std::string_view domain, std::string_view type) {
  if (type.empty()) return nullptr;
  for (const Row& r : kRows)
    if (type == r.type && domain == r.domain) return &r;
  return nullptr;
}

/// True when the parameter column `spec` names a string attribute ("approximate=none|tanh").
constexpr bool isChoice(std::string_view spec) { return spec.find('=') != std::string_view::npos; }

// A fused activation's parameters travel as floats (activation_alpha / _beta).
static_assert([] {
  for (const Row& r : kRows)
    if (r.postOp() && (isChoice(r.p0) || isChoice(r.p1))) return false;
  return true;
}());

/// One parameter of a row as the node's attributes give it (the default where absent).
inline float param(const char* spec, float dflt, const ir::Node& n) {
  std::string_view s(spec);
  if (s.empty()) return 0.f;
  size_t eq = s.find('=');
  if (eq == std::string_view::npos) return n.attrFloat(spec, dflt);
  std::string name(s.substr(0, eq));
  std::vector<std::string_view> values;
  for (size_t b = eq + 1;;) {
    size_t e = s.find('|', b);
    values.push_back(s.substr(b, e == std::string_view::npos ? e : e - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  std::string v = n.attrString(name, std::string(values.at(static_cast<size_t>(dflt))));
  for (size_t i = 0; i < values.size(); ++i)
    if (v == values[i]) return static_cast<float>(i);
  GRAFT_THROW("{}: {} must be one of '{}', got '{}'", n.describe(), name, fmt::join(values, "', '"), v);
}

/// The row's parameters as the node's attributes give them (the defaults where absent).
inline Row::Params params(const Row& r, const ir::Node& n) { return {param(r.p0, r.d0, n), param(r.p1, r.d1, n)}; }

/// The math the reference formulas use; the cpu backend substitutes its vectorisable float
/// functions (backends/cpu/vec_math.hpp) for the transcendental ones.
struct StdMath {
  template <class C>
  static C nan() {
    return std::numeric_limits<C>::quiet_NaN();
  }
  template <class C>
  static C abs(C x) {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return static_cast<C>(x < 0 ? -x : x);
  }
  template <class C>
  static C pow(C a, C b) {
    return static_cast<C>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  }
  template <class C>
  static C exp(C x) {
    return std::exp(x);
  }
  template <class C>
  static C log(C x) {
    return std::log(x);
  }
  template <class C>
  static C tanh(C x) {
    return std::tanh(x);
  }
  template <class C>
  static C erf(C x) {
    return std::erf(x);
  }
  template <class C>
  static C sigmoid(C x) {
    return x >= C(0) ? C(1) / (C(1) + std::exp(-x)) : std::exp(x) / (C(1) + std::exp(x));
  }
  template <class C>
  static C softplus(C x) {
    return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
  template <class C>
  static C geluTanh(C x) {
    const C k = C(0.7978845608028654);  // sqrt(2/pi)
    return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
  }
  template <class C>
  static C geluErf(C x) {
    return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
  }
};

/// The formula of row R: Formula<R>::eval<M>(a, b, c, p0, p1) in the compute type C. Always
/// inlined, like vecmath's functions (backends/cpu/vec_math.hpp): the cpu kernels' loops are
/// compiled again for AVX-512 and AVX2, and GCC did not inline a plain inline eval into those
/// variants (FusedElementwise called Erf's, Tanh's, Exp's ... eval once per float).
template <Op R>
struct Formula;

#define GRAFT_EW_X(Id, Type, Dom, Code, Ar, Pred, Zero, Ty, Cost, Inpl, Dnnl, P0, D0, P1, D1, ...)         \
  template <>                                                                                              \
  struct Formula<Op::Id> {                                                                                 \
    template <class M, class C>                                                                            \
    [[gnu::always_inline]] static C eval([[maybe_unused]] C a, [[maybe_unused]] C b, [[maybe_unused]] C c, \
                                         [[maybe_unused]] C p0, [[maybe_unused]] C p1) {                   \
      return static_cast<C>(__VA_ARGS__);                                                                  \
    }                                                                                                      \
  };
GRAFT_EW_ALL(GRAFT_EW_X)
#undef GRAFT_EW_X

/// A unary row as a functor over the compute type, with its parameters bound.
template <Op R, class M = StdMath>
struct Unary {
  float p0 = 0, p1 = 0;
  template <class C>
  [[gnu::always_inline]] C operator()(C x) const {
    return Formula<R>::template eval<M, C>(x, C(0), C(0), static_cast<C>(p0), static_cast<C>(p1));
  }
};

}  // namespace graft::ops::ew
