#pragma once
// The program of an ai.graft::FusedElementwise node: a chain of elementwise ops evaluated in one
// loop. Registers 0..numInputs-1 hold the node's inputs (broadcast to the output shape); each
// instruction writes the next register. Values are of the output's floating-point type,
// computed in ComputeType (float for half types); comparisons produce 1 or 0, and BOOL inputs
// load as 1 or 0. Stored in the node's attributes:
//   codes (ints, one per instruction), args (ints, three per instruction: register operands or
//   -1), imms (floats, one per instruction: constants and parameters), outputs (ints: the
//   register of each node output), to (int: the outputs' DataType).
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace graft::ops::fused {

/// Instruction codes. Their numbers are stored in graphs: append, never renumber.
enum class Code : int32_t {
  Const = 0,  ///< imm
  Add = 1,
  Sub = 2,
  Mul = 3,
  Div = 4,
  Pow = 5,  ///< as the Pow op: computed in double
  Max = 6,  ///< NaN if either is NaN
  Min = 7,
  Neg = 8,
  Abs = 9,
  Exp = 10,
  Log = 11,
  Sqrt = 12,
  Reciprocal = 13,
  Tanh = 14,
  Sigmoid = 15,
  Relu = 16,
  Erf = 17,
  LeakyRelu = 18,  ///< imm: alpha
  GeluTanh = 19,   ///< ai.graphcore Gelu
  GeluErf = 20,    ///< ai.graft GeluErf
  Softplus = 21,
  Where = 22,  ///< a ? b : c
  Greater = 23,
  Less = 24,
  GreaterOrEqual = 25,
  LessOrEqual = 26,
  Equal = 27,
  Not = 28,
  And = 29,
  Or = 30,
  Sign = 31,
  Floor = 32,
  Ceil = 33,
  Square = 34,  ///< a * a (Pow with the exponent 2)
  Count = 35,
};

/// Number of register operands of an instruction.
int arity(Code c);
/// Readable name ("Add", "LeakyRelu", ...).
const char* codeName(Code c);
/// True when the result is a truth value (1 or 0): comparisons and logic.
bool isPredicate(Code c);

struct Instr {
  Code code = Code::Const;
  int32_t a = -1, b = -1, c = -1;
  float imm = 0;
};

struct Program {
  int numInputs = 0;
  std::vector<Instr> instrs;
  std::vector<int32_t> outputs;
  DataType dtype = DataType::Float;

  int numRegisters() const { return numInputs + static_cast<int>(instrs.size()); }
  /// Reads the program from a FusedElementwise node; throws graft::Error naming the node when it
  /// is malformed (unknown code, operand not yet computed, output out of range).
  static Program fromNode(const ir::Node& n);
  /// Writes codes, args, imms, outputs and to.
  void toAttributes(ir::Attributes& attrs) const;
  /// One instruction per line: "r3 = Mul r0 r2".
  std::string str() const;
};

}  // namespace graft::ops::fused
