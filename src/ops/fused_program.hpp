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
#include "ops/elementwise_table.hpp"

namespace graft::ops::fused {

/// Instruction codes: the rows of GRAFT_EW_PROGRAM (ops/elementwise_table.hpp), whose Code
/// column gives the numbers. They are stored in graphs: append, never renumber.
enum class Code : int32_t {
#define GRAFT_EW_X(Id, Type, Dom, Num, ...) Id = Num,
  GRAFT_EW_PROGRAM(GRAFT_EW_X)
#undef GRAFT_EW_X
      Count
};

/// The table row of each code.
inline constexpr ew::Op kOpOf[] = {
#define GRAFT_EW_X(Id, ...) ew::Op::Id,
    GRAFT_EW_PROGRAM(GRAFT_EW_X)
#undef GRAFT_EW_X
};
constexpr bool codesInOrder() {
  for (size_t i = 0; i < sizeof(kOpOf) / sizeof(kOpOf[0]); ++i)
    if (ew::row(kOpOf[i]).code != static_cast<int32_t>(i)) return false;
  return true;
}
static_assert(codesInOrder(), "GRAFT_EW_PROGRAM rows must have the codes 0, 1, 2, ... in order");

/// The table row of an instruction code.
const ew::Row& row(Code c);
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
