// Cases for the vectorised cpu kernels (src/backends/cpu/vec_*.cpp): many shapes, broadcast
// patterns (same shape, scalar, row, column, middle, both sides, rank mismatch, empty), element
// types and special values, sized so that some run on several threads.
#include <cmath>
#include <limits>

#include "ops/fused_program.hpp"
#include "vec_cases.hpp"

namespace graft::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

NDArray rnd(DataType dt, Shape s, uint64_t seed, double lo = -3, double hi = 3) {
  return randomArray(dt, std::move(s), seed, lo, hi);
}

// Values from a list, converted to dt (cycled to fill the shape).
NDArray values(DataType dt, Shape s, const std::vector<double>& v) {
  NDArray a(dt, std::move(s));
  ops::dispatch<ops::kNumericBool>(dt, "values", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < a.numel(); ++i) {
      double x = v[static_cast<size_t>(i) % v.size()];
      if constexpr (std::is_same_v<T, bool>)
        a.data<T>()[i] = x != 0;
      else
        a.data<T>()[i] = static_cast<T>(static_cast<ops::ComputeType<T>>(x));
    }
  });
  return a;
}

const std::vector<double> kSpecial = {kNaN, kInf, -kInf, 0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6,
                                      0.5,  -0.5, 1,     -1,  3.7,  -3.7,  10,     -10,  50,
                                      -50,  87,   -87,   89,  -89,  100,   -100,   1e30, -1e30};

double tolFor(DataType dt, double floatTol) {
  if (dt == DataType::Float16) return 4e-3;
  if (dt == DataType::BFloat16) return 3e-2;
  if (dt == DataType::Double) return 1e-12;
  return floatTol;
}

VecCase make(std::string label, std::string type, std::vector<NDArray> in, ir::Attributes a = {}, int nout = 1,
             std::string domain = "") {
  VecCase c;
  c.label = std::move(label);
  c.op = OpCase{std::move(type), std::move(in), std::move(a), nout, std::move(domain)};
  return c;
}

const std::vector<Shape> kUnaryShapes = {{}, {7}, {3, 1000}, {257, 300}, {0, 4}};

// ---- unary -----------------------------------------------------------------------------------

struct UnaryOp {
  const char* type;
  double lo, hi;
  ir::Attributes attrs;
  std::string domain = "";
  bool special = true;
};

GRAFT_VEC_CASES(vec_unary) {
  std::vector<UnaryOp> floatOps = {
      {"Exp", -80, 80, {}},
      {"Log", 1e-3, 1e4, {}},
      {"Tanh", -12, 12, {}},
      {"Erf", -5, 5, {}},
      {"Sigmoid", -30, 30, {}},
      {"Softplus", -30, 30, {}},
      {"Sqrt", 0, 100, {}},
      {"Reciprocal", 0.1, 10, {}},
      {"Floor", -10, 10, {}},
      {"Ceil", -10, 10, {}},
      {"Round", -10, 10, {}},
      {"Softsign", -10, 10, {}},
      {"HardSwish", -6, 6, {}},
      {"Sin", -6, 6, {}},
      {"Cos", -6, 6, {}},
      {"Tan", -1.5, 1.5, {}},
      {"Asin", -1, 1, {}},
      {"Acos", -1, 1, {}},
      {"Atan", -10, 10, {}},
      {"Sinh", -5, 5, {}},
      {"Cosh", -5, 5, {}},
      {"Asinh", -10, 10, {}},
      {"Acosh", 1, 10, {}},
      {"Atanh", -0.99, 0.99, {}},
      {"Relu", -3, 3, {}},
      {"Neg", -3, 3, {}},
      {"Abs", -3, 3, {}},
      {"Sign", -3, 3, {}},
      {"LeakyRelu", -3, 3, attrs({{"alpha", 0.2f}})},
      {"ThresholdedRelu", -3, 3, attrs({{"alpha", 0.5f}})},
      {"Elu", -5, 5, attrs({{"alpha", 0.7f}})},
      {"Selu", -5, 5, {}},
      {"Celu", -5, 5, attrs({{"alpha", 1.3f}})},
      {"HardSigmoid", -5, 5, attrs({{"alpha", 0.3f}, {"beta", 0.4f}})},
      {"Gelu", -6, 6, {}, "ai.graphcore"},
      {"GeluErf", -8, 8, {}, "ai.graft"},
  };
  // The opset 18-28 activations (rows of the elementwise table too).
  floatOps.push_back({"Mish", -20, 20, {}});
  floatOps.push_back({"Swish", -20, 20, attrs({{"alpha", 1.5f}})});
  floatOps.push_back({"Gelu", -8, 8, {}});
  floatOps.push_back({"Gelu", -6, 6, attrs({{"approximate", std::string("tanh")}})});
  uint64_t seed = 1;
  for (const UnaryOp& op : floatOps) {
    for (DataType dt : {DataType::Float, DataType::Double, DataType::Float16}) {
      for (const Shape& s : kUnaryShapes) {
        VecCase c = make(fmt::format("{} {}", dtypeName(dt), shapeToString(s)), op.type,
                         {rnd(dt, s, seed++, op.lo, op.hi)}, op.attrs, 1, op.domain);
        c.rtol = tolFor(dt, 2e-6);
        c.atol = dt == DataType::Float ? 1e-6 : c.rtol * 1e-3;
        cases.push_back(c);
      }
      VecCase sp = make(fmt::format("{} special values", dtypeName(dt)), op.type, {values(dt, {27}, kSpecial)},
                        op.attrs, 1, op.domain);
      sp.rtol = tolFor(dt, 2e-6);
      sp.atol = 1e-6;
      cases.push_back(sp);
    }
  }
  cases.push_back(make("BFLOAT16", "Exp", {rnd(DataType::BFloat16, {100}, 9, -5, 5)}));
  cases.back().rtol = tolFor(DataType::BFloat16, 0);
  for (const char* type : {"Relu", "Neg", "Abs", "Sign"})
    for (DataType dt : {DataType::Int32, DataType::Int64, DataType::Int8})
      cases.push_back(make(std::string(dtypeName(dt)), type, {rnd(dt, {5, 300}, seed++, -100, 100)}));
  cases.push_back(make("UINT8", "Abs", {rnd(DataType::UInt8, {50}, 3, 0, 200)}));
  cases.push_back(make("BOOL", "Not", {rnd(DataType::Bool, {3, 40000}, 4)}));
  // Clip: both bounds, one bound, none, and integers.
  for (DataType dt : {DataType::Float, DataType::Float16, DataType::Int32, DataType::Int64}) {
    NDArray x = rnd(dt, {300, 257}, seed++, -10, 10);
    cases.push_back(
        make(fmt::format("{} both", dtypeName(dt)), "Clip", {x, values(dt, {}, {-2}), values(dt, {}, {3})}));
    cases.push_back(make(fmt::format("{} min only", dtypeName(dt)), "Clip", {x, values(dt, {}, {-2})}));
    cases.push_back(make(fmt::format("{} max only", dtypeName(dt)), "Clip", {x, NDArray(), values(dt, {}, {3})}));
    cases.push_back(make(fmt::format("{} no bounds", dtypeName(dt)), "Clip", {x}));
  }
  cases.push_back(make(
      "NaN passes", "Clip",
      {values(DataType::Float, {27}, kSpecial), values(DataType::Float, {}, {-1}), values(DataType::Float, {}, {1})}));
  for (DataType dt : {DataType::Float, DataType::Double, DataType::Float16}) {
    cases.push_back(make(std::string(dtypeName(dt)), "IsNaN", {values(dt, {27}, kSpecial)}));
    for (int64_t pos : {0, 1})
      for (int64_t neg : {0, 1})
        cases.push_back(make(fmt::format("{} pos {} neg {}", dtypeName(dt), pos, neg), "IsInf",
                             {values(dt, {27}, kSpecial)},
                             attrs({{"detect_positive", pos}, {"detect_negative", neg}})));
  }
}

// ---- binary ----------------------------------------------------------------------------------

// Broadcast patterns: (a, b).
const std::vector<std::pair<Shape, Shape>> kPatterns = {
    {{4, 5}, {4, 5}},       {{300, 257}, {300, 257}},     {{4, 5}, {}},           {{}, {4, 5}},
    {{4, 5}, {5}},          {{300, 257}, {257}},          {{4, 5}, {4, 1}},       {{300, 257}, {300, 1}},
    {{3, 4, 5}, {3, 1, 5}}, {{3, 1, 5}, {1, 4, 1}},       {{2, 3, 4, 5}, {4, 1}}, {{1, 5}, {4, 5}},
    {{0, 3}, {3}},          {{64, 1, 128}, {64, 128, 1}},
};

GRAFT_VEC_CASES(vec_binary) {
  uint64_t seed = 100;
  for (const char* type : {"Add", "Sub", "Mul", "Div"}) {
    for (DataType dt : {DataType::Float, DataType::Double, DataType::Float16, DataType::Int32, DataType::Int64}) {
      for (const auto& [sa, sb] : kPatterns) {
        double lo = isFloatingPoint(dt) ? -3 : -5, hi = isFloatingPoint(dt) ? 3 : 5;
        VecCase c = make(fmt::format("{} {} {}", dtypeName(dt), shapeToString(sa), shapeToString(sb)), type,
                         {rnd(dt, sa, seed++, lo, hi), rnd(dt, sb, seed++, lo, hi)});
        c.rtol = tolFor(dt, 1e-6);
        cases.push_back(c);
      }
    }
    cases.push_back(
        make("INT8 wraps", type,
             {rnd(DataType::Int8, {300}, seed++, -127, 127), rnd(DataType::Int8, {300}, seed++, -127, 127)}));
    cases.push_back(make("mixed types", type, {rnd(DataType::Float, {3}, 1), rnd(DataType::Double, {3}, 2)}));
    cases.back().expectFast = false;
    cases.back().expectError = "inputs must have the same type, got FLOAT and DOUBLE";
    cases.push_back(
        make("shapes do not broadcast", type, {rnd(DataType::Float, {3}, 1), rnd(DataType::Float, {4}, 2)}));
    cases.back().expectFast = false;
    // The reference names the shapes; the cpu backend reports ONNX's inference message: both name the node.
    cases.back().expectError = std::string(type) + " node 'node'";
  }
  cases.push_back(make("INT32 extremes", "Div",
                       {values(DataType::Int32, {4}, {2147483647.0, -2147483648.0, 5, -2147483648.0}),
                        values(DataType::Int32, {4}, {1, -1, 0, 2})}));
  cases.push_back(make("FLOAT special", "Div",
                       {values(DataType::Float, {27}, kSpecial), values(DataType::Float, {27, 1}, kSpecial)}));
  for (DataType dt : {DataType::Float, DataType::Double, DataType::Float16}) {
    cases.push_back(make(fmt::format("{} general", dtypeName(dt)), "Pow",
                         {rnd(dt, {40, 50}, seed++, 0.1, 3), rnd(dt, {50}, seed++, -2, 2)}));
    cases.back().rtol = tolFor(dt, 1e-6);
    cases.push_back(make(fmt::format("{} square", dtypeName(dt)), "Pow",
                         {rnd(dt, {300, 257}, seed++, -3, 3), values(dt, {}, {2})}));
    cases.back().rtol = tolFor(dt, 1e-6);
  }
  cases.push_back(make("negative base", "Pow",
                       {values(DataType::Float, {27}, kSpecial), values(DataType::Float, {27, 1}, kSpecial)}));
  for (const char* type : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}) {
    for (DataType dt : {DataType::Float, DataType::Float16, DataType::Int32, DataType::Int64}) {
      for (size_t p : {0, 2, 4, 6, 9})
        cases.push_back(
            make(fmt::format("{} {}", dtypeName(dt), p), type,
                 {rnd(dt, kPatterns[p].first, seed++, -2, 2), rnd(dt, kPatterns[p].second, seed++, -2, 2)}));
    }
    cases.push_back(
        make("NaN", type, {values(DataType::Float, {27}, kSpecial), values(DataType::Float, {27, 1}, kSpecial)}));
  }
  cases.push_back(make("BOOL", "Equal", {rnd(DataType::Bool, {4, 5}, 1), rnd(DataType::Bool, {5}, 2)}));
  for (const char* type : {"And", "Or", "Xor"})
    for (size_t p : {0, 1, 2, 4, 6, 9})
      cases.push_back(
          make(std::to_string(p), type,
               {rnd(DataType::Bool, kPatterns[p].first, seed++), rnd(DataType::Bool, kPatterns[p].second, seed++)}));
  // Variadic ops: one, two, three broadcast inputs.
  for (const char* type : {"Sum", "Mean", "Max", "Min"}) {
    for (DataType dt : {DataType::Float, DataType::Double, DataType::Float16, DataType::Int32, DataType::Int64}) {
      cases.push_back(make(fmt::format("{} one", dtypeName(dt)), type, {rnd(dt, {3, 4}, seed++, -5, 5)}));
      cases.push_back(make(fmt::format("{} two", dtypeName(dt)), type,
                           {rnd(dt, {3, 4}, seed++, -5, 5), rnd(dt, {4}, seed++, -5, 5)}));
      cases.push_back(
          make(fmt::format("{} three", dtypeName(dt)), type,
               {rnd(dt, {3, 1}, seed++, -5, 5), rnd(dt, {300, 3, 257}, seed++, -5, 5), rnd(dt, {257}, seed++, -5, 5)}));
      for (size_t i = cases.size() - 3; i < cases.size(); ++i) cases[i].rtol = tolFor(dt, 1e-6);
    }
    cases.push_back(
        make("NaN", type, {values(DataType::Float, {27}, kSpecial), values(DataType::Float, {27, 1}, kSpecial)}));
  }
  for (DataType dt : {DataType::Float, DataType::Float16, DataType::Int32}) {
    cases.push_back(make(fmt::format("{} channel slope", dtypeName(dt)), "PRelu",
                         {rnd(dt, {2, 3, 40, 40}, seed++, -5, 5), rnd(dt, {3, 1, 1}, seed++, 0, 1)}));
    cases.push_back(make(fmt::format("{} row slope", dtypeName(dt)), "PRelu",
                         {rnd(dt, {300, 257}, seed++, -5, 5), rnd(dt, {257}, seed++, 0, 1)}));
    cases.back().rtol = tolFor(dt, 1e-6);
  }
  // Where: every pattern of which operand broadcasts, several element sizes.
  for (DataType dt :
       {DataType::Float, DataType::Double, DataType::Float16, DataType::Int64, DataType::Bool, DataType::Int8}) {
    cases.push_back(
        make(fmt::format("{} same", dtypeName(dt)), "Where",
             {rnd(DataType::Bool, {300, 257}, seed++), rnd(dt, {300, 257}, seed++), rnd(dt, {300, 257}, seed++)}));
    cases.push_back(make(fmt::format("{} scalar y", dtypeName(dt)), "Where",
                         {rnd(DataType::Bool, {40, 50}, seed++), rnd(dt, {40, 50}, seed++), rnd(dt, {}, seed++)}));
    cases.push_back(make(fmt::format("{} mask row", dtypeName(dt)), "Where",
                         {rnd(DataType::Bool, {50}, seed++), rnd(dt, {40, 1}, seed++), rnd(dt, {40, 50}, seed++)}));
    cases.push_back(make(fmt::format("{} scalar cond", dtypeName(dt)), "Where",
                         {rnd(DataType::Bool, {}, seed++), rnd(dt, {3, 1, 5}, seed++), rnd(dt, {1, 4, 1}, seed++)}));
  }
  // Cast between many types, special values saturating into integers.
  std::vector<DataType> types = {DataType::Float,    DataType::Double, DataType::Float16,
                                 DataType::BFloat16, DataType::Int32,  DataType::Int64,
                                 DataType::Int8,     DataType::UInt8,  DataType::Bool};
  for (DataType from : types) {
    for (DataType to : types) {
      NDArray x = from == DataType::Bool ? rnd(from, {300, 257}, seed++) : rnd(from, {300, 257}, seed++, -100, 100);
      cases.push_back(make(fmt::format("{} to {}", dtypeName(from), dtypeName(to)), "Cast", {x},
                           attrs({{"to", static_cast<int64_t>(to)}})));
    }
    if (isFloatingPoint(from))
      for (DataType to : types)
        cases.push_back(make(fmt::format("special {} to {}", dtypeName(from), dtypeName(to)), "Cast",
                             {values(from, {27}, kSpecial)}, attrs({{"to", static_cast<int64_t>(to)}})));
  }
  cases.push_back(
      make("FLOAT like FLOAT16", "CastLike", {rnd(DataType::Float, {100}, 1), rnd(DataType::Float16, {1}, 2)}));
  cases.push_back(
      make("INT64 like FLOAT", "CastLike", {rnd(DataType::Int64, {100}, 1, -9, 9), rnd(DataType::Float, {}, 2)}));
}

// ---- reductions ------------------------------------------------------------------------------

GRAFT_VEC_CASES(vec_reduce) {
  uint64_t seed = 500;
  const std::vector<std::vector<int64_t>> axesList = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (const char* type : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1",
                           "ReduceL2", "ReduceLogSum"}) {
    bool axesInput = std::string(type) == "ReduceSum";
    for (DataType dt : {DataType::Float, DataType::Double}) {
      for (const Shape& s : std::vector<Shape>{{4, 5, 6}, {2, 300, 257}, {3, 0, 2}, {1, 7, 1}}) {
        for (const auto& axes : axesList) {
          for (int64_t keep : {0, 1}) {
            double lo = std::string(type) == "ReduceLogSum" ? 0.1 : -3;
            std::vector<NDArray> in{rnd(dt, s, seed++, lo, 3)};
            ir::Attributes a = attrs({{"keepdims", keep}});
            if (axesInput) {
              if (!axes.empty()) in.push_back(arr<int64_t>({static_cast<int64_t>(axes.size())}, axes));
            } else if (!axes.empty()) {
              a.set("axes", axes);
            }
            VecCase c = make(
                fmt::format("{} {} axes {} keepdims {}", dtypeName(dt), shapeToString(s), shapeToString(axes), keep),
                type, in, a);
            c.rtol = dt == DataType::Float ? 2e-6 : 1e-12;
            cases.push_back(c);
          }
        }
      }
      cases.push_back(make("NaN", type, {values(dt, {3, 9}, kSpecial)}, attrs({{"axes", std::vector<int64_t>{1}}})));
      if (axesInput) cases.back().op.attrs = {}, cases.back().op.inputs.push_back(arr<int64_t>({1}, {1}));
    }
  }
  cases.push_back(make("noop with empty axes", "ReduceSum", {rnd(DataType::Float, {4, 5}, 1), arr<int64_t>({0}, {})},
                       attrs({{"noop_with_empty_axes", int64_t{1}}})));
  cases.push_back(
      make("one long row", "ReduceSum", {rnd(DataType::Float, {300000}, 2)}, attrs({{"keepdims", int64_t{0}}})));
  cases.back().rtol = 1e-5;
  cases.push_back(make("axis out of range", "ReduceMean", {rnd(DataType::Float, {4, 5}, 1)},
                       attrs({{"axes", std::vector<int64_t>{2}}})));
  cases.back().expectFast = false;
  cases.back().expectError = "ReduceMean node 'node'";
  for (const char* type : {"ArgMax", "ArgMin"}) {
    for (DataType dt : {DataType::Float, DataType::Double, DataType::Int32, DataType::Int64, DataType::Float16}) {
      for (int64_t axis : {0, 1, -1})
        for (int64_t keep : {0, 1})
          for (int64_t last : {0, 1})
            cases.push_back(make(fmt::format("{} axis {} keepdims {} last {}", dtypeName(dt), axis, keep, last), type,
                                 {rnd(dt, {30, 40, 7}, seed++, -3, 3)},
                                 attrs({{"axis", axis}, {"keepdims", keep}, {"select_last_index", last}})));
    }
    cases.push_back(make("NaN", type, {values(DataType::Float, {3, 9}, kSpecial)}, attrs({{"axis", int64_t{1}}})));
    cases.push_back(make("NaN last", type, {values(DataType::Float, {9, 3}, kSpecial)},
                         attrs({{"axis", int64_t{0}}, {"select_last_index", int64_t{1}}})));
  }
}

// ---- normalisation ---------------------------------------------------------------------------

GRAFT_VEC_CASES(vec_norm) {
  uint64_t seed = 900;
  struct LN {
    Shape x, scale, bias;
    int64_t axis;
  };
  for (const LN& l : std::vector<LN>{{{2, 3, 8}, {8}, {8}, -1},
                                     {{2, 3, 8}, {3, 8}, {}, 1},
                                     {{64, 768}, {768}, {768}, -1},
                                     {{4, 16}, {1}, {16}, -1},
                                     {{5}, {5}, {5}, 0},
                                     {{128, 3, 20}, {3, 20}, {1, 20}, -2}}) {
    std::vector<NDArray> in{rnd(DataType::Float, l.x, seed++, -2, 5), rnd(DataType::Float, l.scale, seed++)};
    if (!l.bias.empty()) in.push_back(rnd(DataType::Float, l.bias, seed++));
    VecCase c = make(fmt::format("{} axis {}", shapeToString(l.x), l.axis), "LayerNormalization", in,
                     attrs({{"axis", l.axis}, {"epsilon", 1e-3f}}), 3);
    c.rtol = 1e-5;
    c.atol = 1e-5;
    cases.push_back(c);
  }
  for (const char* type : {"Softmax", "LogSoftmax"}) {
    for (const auto& [s, axis] : std::vector<std::pair<Shape, int64_t>>{
             {{4, 10}, -1}, {{4, 10}, 0}, {{2, 3, 50}, 1}, {{512, 128}, -1}, {{16, 12, 128, 128}, -1}, {{7}, 0}}) {
      VecCase c = make(fmt::format("{} axis {}", shapeToString(s), axis), type,
                       {rnd(DataType::Float, s, seed++, -10, 10)}, attrs({{"axis", axis}}));
      c.rtol = 1e-5;
      c.atol = 1e-6;
      cases.push_back(c);
    }
    cases.push_back(
        make("special values", type, {values(DataType::Float, {3, 9}, kSpecial)}, attrs({{"axis", int64_t{1}}})));
    cases.push_back(make("large values", type, {rnd(DataType::Float, {8, 33}, seed++, 1e4, 1e5)}));
    // Close values far from 0 ([10000, 10003]): the log-probabilities (about -3.44 ... -0.44) keep
    // their fraction, which subtracting max + log(sum) in one step would round away.
    NDArray close(DataType::Float, {2, 4});
    for (int64_t i = 0; i < 8; ++i) {
      int64_t row = i / 4, col = i % 4;
      close.data<float>()[i] = static_cast<float>(row * 10000 + col);
    }
    VecCase c = make("close large values", type, {close}, attrs({{"axis", int64_t{1}}}));
    c.rtol = 1e-6;
    c.atol = 1e-6;
    cases.push_back(c);
  }
  // The gradient op (the VJP of LayerNormalization with Scale and B of the normalised shape):
  // one row, rows of a few elements, bert's [8, 128, 768] over several threads, a vector tail.
  for (const auto& [x, axis] : std::vector<std::pair<Shape, int64_t>>{
           {{7}, 0}, {{5, 3}, -1}, {{4, 3, 6}, 1}, {{8, 128, 768}, -1}, {{33, 100}, 1}, {{0, 4}, 1}}) {
    Shape norm(x.begin() + (axis < 0 ? axis + static_cast<int64_t>(x.size()) : axis), x.end());
    VecCase c = make(fmt::format("gradient {} axis {}", shapeToString(x), axis), "LayerNormalizationGrad",
                     {rnd(DataType::Float, x, seed++), rnd(DataType::Float, x, seed++, -2, 5),
                      rnd(DataType::Float, norm, seed++, 0.5, 1.5)},
                     attrs({{"axis", axis}, {"epsilon", 1e-3f}}), 3, "ai.graft");
    c.rtol = 1e-4;
    c.atol = 1e-5;
    cases.push_back(c);
  }
  cases.push_back(make("gradient, Scale not of the normalised shape", "LayerNormalizationGrad",
                       {rnd(DataType::Float, {2, 3, 4}, seed++), rnd(DataType::Float, {2, 3, 4}, seed++),
                        rnd(DataType::Float, {4}, seed++)},
                       attrs({{"axis", int64_t{1}}}), 3, "ai.graft"));
  cases.back().expectFast = false;
  cases.back().expectError = "Scale must have the normalised shape [3, 4], got [4]";
  cases.push_back(make("scale does not broadcast", "LayerNormalization",
                       {rnd(DataType::Float, {4, 6}, 1), rnd(DataType::Float, {5}, 2)}));
  cases.back().expectFast = false;
  cases.back().expectError = "shapes [5] and [6] do not broadcast";
}

// ---- batch normalisation for training ----------------------------------------------------------

GRAFT_VEC_CASES(vec_batchnorm) {
  uint64_t seed = 1100;
  // Shapes: one channel (rank 1 and 4), [N, C], images (several threads), an empty batch.
  const std::vector<Shape> shapes = {{7},      {16, 5}, {4, 1, 6, 6}, {2, 3, 5, 5}, {8, 32, 28, 28}, {3, 4, 2, 3, 5},
                                     {0, 3, 4}};
  for (const Shape& s : shapes) {
    int64_t C = s.size() >= 2 ? s[1] : 1;
    for (float momentum : {0.0f, 0.9f}) {
      // Data off zero (the mean matters) and positive variances.
      std::vector<NDArray> in{rnd(DataType::Float, s, seed++, -2, 5), rnd(DataType::Float, {C}, seed++),
                              rnd(DataType::Float, {C}, seed++), rnd(DataType::Float, {C}, seed++),
                              rnd(DataType::Float, {C}, seed++, 0.1, 2)};
      VecCase c = make(fmt::format("training {} momentum {}", shapeToString(s), momentum), "BatchNormalization", in,
                       attrs({{"training_mode", int64_t{1}}, {"momentum", momentum}, {"epsilon", 1e-3f}}), 3);
      c.rtol = 1e-5;
      c.atol = 1e-5;
      cases.push_back(c);
    }
    // The gradient, given the statistics (as training graphs do) and computing them.
    NDArray x = rnd(DataType::Float, s, seed++, -2, 5);
    std::vector<NDArray> in{rnd(DataType::Float, s, seed++), x, rnd(DataType::Float, {C}, seed++)};
    VecCase own = make(fmt::format("gradient {}", shapeToString(s)), "BatchNormalizationGrad", in,
                       attrs({{"epsilon", 1e-5f}}), 3, "ai.graft");
    own.rtol = 1e-4;
    own.atol = 1e-4;
    cases.push_back(own);
    std::vector<NDArray> stats =
        runReference(OpCase{"BatchNormalization",
                            {x, rnd(DataType::Float, {C}, 1), rnd(DataType::Float, {C}, 2),
                             rnd(DataType::Float, {C}, 3), rnd(DataType::Float, {C}, 4, 0.1, 2)},
                            attrs({{"training_mode", int64_t{1}}, {"momentum", 0.0f}}),
                            3});
    VecCase given = own;
    given.label = fmt::format("gradient {} with statistics", shapeToString(s));
    given.op.inputs.push_back(stats[1]);
    given.op.inputs.push_back(stats[2]);
    cases.push_back(given);
  }
  // A constant channel: variance 0, normalised by epsilon alone.
  cases.push_back(
      make("constant channel", "BatchNormalization",
           {values(DataType::Float, {4, 2, 3}, {1.5}), values(DataType::Float, {2}, {2}),
            values(DataType::Float, {2}, {0.5}), values(DataType::Float, {2}, {0}), values(DataType::Float, {2}, {1})},
           attrs({{"training_mode", int64_t{1}}}), 3));
  // Special values: a NaN or an infinity spoils its channel's statistics as in the reference;
  // a mean far from zero against the spread keeps its variance.
  for (const auto& [label, v] :
       std::vector<std::pair<const char*, std::vector<double>>>{{"NaN", {1, 2, kNaN, 3, 0.5, -1}},
                                                                {"infinity", {kInf, 2, 1, 3, 0.5, -1}},
                                                                {"large mean", {1e4, 1e4 + 1, 1e4 - 1, 1e4 + 0.5}}}) {
    cases.push_back(make(
        fmt::format("training, {}", label), "BatchNormalization",
        {values(DataType::Float, {2, 1, 12}, v), values(DataType::Float, {1}, {2}), values(DataType::Float, {1}, {0.5}),
         values(DataType::Float, {1}, {0}), values(DataType::Float, {1}, {1})},
        attrs({{"training_mode", int64_t{1}}, {"momentum", 0.5f}}), 3));
    cases.back().rtol = 1e-5;
    cases.back().atol = 1e-5;
  }
  // Bad input: the kernel refuses it as the reference does.
  cases.push_back(make(
      "scale of the wrong length", "BatchNormalization",
      {rnd(DataType::Float, {2, 3, 4}, seed++), rnd(DataType::Float, {4}, seed++), rnd(DataType::Float, {3}, seed++),
       rnd(DataType::Float, {3}, seed++), rnd(DataType::Float, {3}, seed++, 0.1, 1)},
      attrs({{"training_mode", int64_t{1}}}), 3));
  cases.back().expectFast = false;  // shape inference refuses it before any kernel is chosen
  // ONNX's shape inference (cpu) and the reference kernel word it differently; both name the node.
  cases.back().expectError = "BatchNormalization node 'node'";
  cases.push_back(make("gradient, dY of another shape", "BatchNormalizationGrad",
                       {rnd(DataType::Float, {2, 3, 5}, seed++), rnd(DataType::Float, {2, 3, 4}, seed++),
                        rnd(DataType::Float, {3}, seed++)},
                       {}, 3, "ai.graft"));
  cases.back().expectFast = false;
  cases.back().expectError = "dY has shape [2, 3, 5], X has [2, 3, 4]";
}

// ---- fused elementwise -----------------------------------------------------------------------

void program(DataType to, const std::vector<ops::fused::Instr>& instrs, std::vector<int64_t> outputs,
             ir::Attributes& a) {
  ops::fused::Program p;
  p.instrs = instrs;
  p.dtype = to;
  p.outputs.assign(outputs.begin(), outputs.end());
  p.toAttributes(a);
}

GRAFT_VEC_CASES(vec_fused) {
  using ops::fused::Code;
  uint64_t seed = 1300;
  for (DataType dt : {DataType::Float, DataType::Double, DataType::Float16}) {
    // relu(x * y + z), and its input x * y as a second output.
    ir::Attributes a;
    program(dt, {{Code::Mul, 0, 1}, {Code::Add, 3, 2}, {Code::Relu, 4}}, {5, 3}, a);
    for (const auto& [sx, sy] :
         std::vector<std::pair<Shape, Shape>>{{{300, 257}, {257}}, {{4, 5}, {4, 1}}, {{7}, {}}}) {
      VecCase c =
          make(fmt::format("{} mul add relu {} {}", dtypeName(dt), shapeToString(sx), shapeToString(sy)),
               "FusedElementwise", {rnd(dt, sx, seed++), rnd(dt, sy, seed++), rnd(dt, {1}, seed++)}, a, 2, "ai.graft");
      c.rtol = tolFor(dt, 1e-6);
      cases.push_back(c);
    }
    // Every code once: the transcendental ones on x, comparisons into Where, constants.
    ir::Attributes b;
    std::vector<ops::fused::Instr> all;
    int r = 2;  // inputs: x, mask
    auto add = [&](ops::fused::Instr in) {
      all.push_back(in);
      return r++;
    };
    int half = add({Code::Const, -1, -1, -1, 0.5f});
    int acc = add({Code::Mul, 0, half});
    for (Code c : {Code::Neg, Code::Abs, Code::Exp, Code::Tanh, Code::Sigmoid, Code::Relu, Code::Erf, Code::GeluTanh,
                   Code::GeluErf, Code::Softplus, Code::Sign, Code::Floor, Code::Ceil, Code::Square})
      acc = add({Code::Add, acc, add({c, 0})});
    acc = add({Code::Add, acc, add({Code::LeakyRelu, 0, -1, -1, 0.1f})});
    acc = add({Code::Add, acc, add({Code::GeluErfGrad, 0, add({Code::GeluErf, 0})})});
    int pos = add({Code::Abs, 0});
    acc = add({Code::Add, acc, add({Code::Log, add({Code::Add, pos, half})})});
    acc = add({Code::Add, acc, add({Code::Sqrt, pos})});
    acc = add({Code::Add, acc, add({Code::Reciprocal, add({Code::Add, pos, half})})});
    acc = add({Code::Sub, acc, add({Code::Div, 0, add({Code::Add, pos, half})})});
    acc = add({Code::Add, acc, add({Code::Pow, pos, half})});
    acc = add({Code::Add, acc, add({Code::Max, 0, half})});
    acc = add({Code::Add, acc, add({Code::Min, 0, half})});
    int gt = add({Code::Greater, 0, half});
    int le = add({Code::LessOrEqual, 0, half});
    int both = add({Code::Or, add({Code::And, gt, 1}), add({Code::Not, le})});
    int cmp = add({Code::Or, add({Code::Less, 0, half}),
                   add({Code::Or, add({Code::Equal, 0, half}), add({Code::GreaterOrEqual, 0, half})})});
    acc = add({Code::Where, both, acc, add({Code::Neg, acc})});
    acc = add({Code::Add, acc, cmp});
    program(dt, all, {acc}, b);
    VecCase c = make(fmt::format("{} every code", dtypeName(dt)), "FusedElementwise",
                     {rnd(dt, {300, 257}, seed++), rnd(DataType::Bool, {257}, seed++)}, b, 1, "ai.graft");
    c.rtol = tolFor(dt, 1e-5);
    c.atol = dt == DataType::Float16 ? 1e-2 : 1e-5;
    cases.push_back(c);
  }
  // Constants only: the output is a broadcast scalar.
  ir::Attributes k;
  program(DataType::Float, {{Code::Const, -1, -1, -1, 2.5f}, {Code::Exp, 1}, {Code::Add, 0, 2}}, {3}, k);
  cases.push_back(make("scalar chain", "FusedElementwise", {rnd(DataType::Float, {}, 1)}, k, 1, "ai.graft"));
  cases.push_back(make("broadcast", "FusedElementwise", {rnd(DataType::Float, {3, 1}, 1)}, k, 1, "ai.graft"));
}

// ---- training --------------------------------------------------------------------------------

NDArray f(float v) { return NDArray::scalar<float>(DataType::Float, v); }

GRAFT_VEC_CASES(vec_optim) {
  uint64_t seed = 1700;
  for (DataType dt : {DataType::Float, DataType::Double}) {
    Shape s{300, 257};
    auto w = [&] { return rnd(dt, s, seed++); };
    auto pos = [&] { return rnd(dt, s, seed++, 0, 1); };
    // Loss scaling 2 and 1: the kernel multiplies by the exact reciprocal; 3: it divides.
    for (float ls : {2.0f, 3.0f})
      for (int64_t nesterov : {0, 1}) {
        VecCase c = make(fmt::format("{} momentum nesterov {} loss scaling {}", dtypeName(dt), nesterov, ls),
                         "SGDUpdate", {w(), w(), f(0.1f), f(0.01f), f(0.9f), f(0.1f), f(1.0f), f(ls), w()},
                         attrs({{"nesterov", nesterov}}), 0, "ai.graft");
        c.mutatedInputs = {0, 8};
        c.rtol = tolFor(dt, 1e-6);
        cases.push_back(c);
      }
    for (float ls : {1.0f, 3.0f}) {
      VecCase plain = make(fmt::format("{} plain loss scaling {}", dtypeName(dt), ls), "SGDUpdate",
                           {w(), w(), f(0.1f), f(0.01f), f(0.0f), f(0.0f), f(1.0f), f(ls)}, {}, 0, "ai.graft");
      plain.mutatedInputs = {0};
      cases.push_back(plain);
    }
    // SGDOuterUpdate: the gradient a (x) b formed as the weight is updated; the same formula as
    // SGDUpdate's, element for element (a [300, 1] and b [1, 257], as a batch-1 Gemm reads them;
    // and flat vectors).
    for (float ls : {1.0f, 3.0f})
      for (int64_t momentum : {0, 1})
        for (int64_t nesterov : {int64_t{0}, momentum}) {
          std::vector<NDArray> in{w(),
                                  rnd(dt, momentum ? Shape{300} : Shape{300, 1}, seed++),
                                  rnd(dt, momentum ? Shape{257} : Shape{1, 257}, seed++),
                                  f(0.1f),
                                  f(0.01f),
                                  f(momentum ? 0.9f : 0.0f),
                                  f(momentum ? 0.1f : 0.0f),
                                  f(1.0f),
                                  f(ls)};
          if (momentum) in.push_back(w());
          VecCase c = make(
              fmt::format("{} outer momentum {} nesterov {} loss scaling {}", dtypeName(dt), momentum, nesterov, ls),
              "SGDOuterUpdate", in, attrs({{"nesterov", nesterov}}), 0, "ai.graft");
          c.mutatedInputs = momentum ? std::vector<int>{0, 9} : std::vector<int>{0};
          // float32: equal (each double result rounds to the same float); double: contracted
          // multiply-adds in the vector variants move the last bit.
          c.rtol = dt == DataType::Float ? 0 : 1e-14;
          c.atol = dt == DataType::Float ? 0 : 1e-15;
          cases.push_back(c);
          if (momentum && nesterov) {
            VecCase bad = c;
            bad.label += ", b too short";
            bad.op.inputs[2] = rnd(dt, {256}, seed++);
            bad.expectError = "the weight must be [I, J] with a of I and b of J elements";
            cases.push_back(bad);
          }
        }
    for (int64_t mode : {0, 1, 2, 3, 4})
      for (int64_t decay : {0, 1}) {
        VecCase c =
            make(fmt::format("{} mode {} decay {}", dtypeName(dt), mode, decay), "AdamUpdate",
                 {w(), w(), w(), pos(), f(3.0f), f(0.01f), f(0.01f), f(0.9f), f(0.999f), f(1e-6f), f(2.0f), f(5.0f)},
                 attrs({{"mode", mode}, {"decay_mode", decay}}), 0, "ai.graft");
        c.mutatedInputs = {0, 2, 3, 4};
        c.rtol = tolFor(dt, 1e-6);
        c.atol = dt == DataType::Float ? 1e-6 : 1e-12;
        cases.push_back(c);
      }
    for (int64_t mode : {0, 1, 2, 3})
      for (int64_t tf : {0, 1}) {
        bool two = mode == 2 || mode == 3;
        std::vector<NDArray> in{w(),     w(),      pos(),  two ? pos() : NDArray(), w(), f(0.01f), f(0.01f), f(0.9f),
                                f(0.5f), f(1e-6f), f(2.0f)};
        VecCase c = make(fmt::format("{} mode {} tf {}", dtypeName(dt), mode, tf), "AdaptiveUpdate", in,
                         attrs({{"mode", mode}, {"tf_variant", tf}}), 0, "ai.graft");
        c.mutatedInputs = two ? std::vector<int>{0, 2, 3, 4} : std::vector<int>{0, 2, 4};
        c.rtol = tolFor(dt, 1e-5);
        c.atol = 1e-5;
        cases.push_back(c);
      }
    for (int64_t overwrite : {0, 1}) {
      VecCase acc = make(fmt::format("{} overwrite {}", dtypeName(dt), overwrite), "Accumulate", {w(), w()},
                         attrs({{"overwrite", overwrite}}), 0, "ai.graft");
      acc.mutatedInputs = {0};
      cases.push_back(acc);
    }
    for (const auto& [sg, st] : std::vector<std::pair<Shape, Shape>>{{{300, 257}, {257}},
                                                                     {{300, 257}, {300, 1}},
                                                                     {{300, 257}, {}},
                                                                     {{4, 5, 6}, {5, 1}},
                                                                     {{4, 5, 6}, {4, 5, 6}},
                                                                     {{4, 5, 6}, {1, 1, 1}},
                                                                     {{2, 300000}, {1}},
                                                                     {{1, 128, 768}, {768}},
                                                                     {{8, 16, 3000}, {1, 1, 3000}},
                                                                     {{1, 7, 1, 9}, {7, 1, 9}},
                                                                     {{3, 1, 5, 70}, {1, 70}}}) {
      VecCase c = make(fmt::format("{} {} to {}", dtypeName(dt), shapeToString(sg), shapeToString(st)), "UnbroadcastTo",
                       {rnd(dt, sg, seed++), rnd(dt, st, seed++)}, {}, 1, "ai.graft");
      c.rtol = dt == DataType::Float ? 1e-5 : 1e-12;
      cases.push_back(c);
    }
    cases.push_back(make(std::string(dtypeName(dt)), "ZerosLike", {rnd(dt, {300, 257}, seed++)}, {}, 1, "ai.graft"));
  }
  cases.push_back(make("INT64", "ZerosLike", {rnd(DataType::Int64, {5}, 1)}, {}, 1, "ai.graft"));
  cases.push_back(make("not a broadcast", "UnbroadcastTo",
                       {rnd(DataType::Float, {4, 5}, 1), rnd(DataType::Float, {3}, 2)}, {}, 1, "ai.graft"));
  cases.back().expectFast = false;
  cases.back().expectError = "shapes [3] and [4, 5] do not broadcast";
}

}  // namespace
}  // namespace graft::testing
