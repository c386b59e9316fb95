// The vectorised FusedElementwise kernel: the program (ops/fused_program.hpp) runs over blocks of
// the output that fit in L1; each instruction is one vector loop over the block, so a chain of n
// ops reads its inputs and writes its outputs once instead of n times. Registers whose operands
// are all broadcast scalars are computed once per block as scalars.
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/vec_common.hpp"
#include "backends/cpu/vec_math.hpp"
#include "ops/fused_program.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::backends::cpu {
namespace {

using ops::fused::Code;
constexpr int64_t kFuseBlock = 256;

// out[0..n) = code(a, b, c) elementwise; every operand is a full block. Each code's formula is
// its row's in the elementwise table, with vecmath's functions for float.
template <class C>
GRAFT_VEC_LOOP void apply(Code code, const C* __restrict a, const C* __restrict b, const C* __restrict c,
                          C* __restrict o, int64_t n, C imm) {
  switch (code) {
#define GRAFT_EW_X(Id, ...)                                                                    \
  case Code::Id:                                                                               \
    for (int64_t i = 0; i < n; ++i)                                                            \
      o[i] = ops::ew::Formula<ops::ew::Op::Id>::eval<VecMath, C>(a[i], b[i], c[i], imm, C(0)); \
    break;
    GRAFT_EW_PROGRAM(GRAFT_EW_X)
#undef GRAFT_EW_X
    case Code::Count: break;
  }
}

// A compiled program: each register's scratch slot (reused once dead) and whether it is a
// scalar in every block (all its operands are constants).
struct Compiled {
  ops::fused::Program prog;
  std::vector<int> slot;            // per register; -1 for scalar-only registers
  std::vector<bool> constant;       // per register: same value everywhere (Const chains)
  std::vector<std::vector<int>> outputsAt;  // per register: node outputs it feeds
  int numSlots = 0;
  bool costly = false;
};

Compiled compileProgram(const ir::Node& n) {
  Compiled c;
  c.prog = ops::fused::Program::fromNode(n);
  const auto& p = c.prog;
  int nr = p.numRegisters();
  c.constant.assign(nr, false);
  c.outputsAt.resize(nr);
  for (size_t o = 0; o < p.outputs.size(); ++o) c.outputsAt[p.outputs[o]].push_back(static_cast<int>(o));
  std::vector<int> lastUse(nr, -1);
  for (size_t i = 0; i < p.instrs.size(); ++i)
    for (int r : {p.instrs[i].a, p.instrs[i].b, p.instrs[i].c})
      if (r >= 0) lastUse[r] = static_cast<int>(i);
  c.slot.assign(nr, -1);
  std::vector<int> freeSlots;
  auto take = [&] {
    if (!freeSlots.empty()) {
      int s = freeSlots.back();
      freeSlots.pop_back();
      return s;
    }
    return c.numSlots++;
  };
  for (int r = 0; r < p.numInputs; ++r) c.slot[r] = take();  // inputs may need converting
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const auto& in = p.instrs[i];
    int r = p.numInputs + static_cast<int>(i);
    bool allConst = true;
    for (int x : {in.a, in.b, in.c})
      if (x >= 0) allConst = allConst && c.constant[x];
    c.constant[r] = allConst;
    c.slot[r] = take();
    for (int x : {in.a, in.b, in.c})
      if (x >= 0 && lastUse[x] == static_cast<int>(i) && c.outputsAt[x].empty() && x >= p.numInputs) {
        freeSlots.push_back(c.slot[x]);
        lastUse[x] = -2;  // freed once even when read twice
      }
    c.costly = c.costly || ops::fused::row(in.code).costly;
  }
  return c;
}

template <class T>
void runFused(const Compiled& cp, ops::KernelContext& k, const std::string& what) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const auto& p = cp.prog;
  size_t nin = k.numInputs();
  std::vector<Shape> shapes;
  std::vector<const Shape*> shapePtrs;
  for (size_t i = 0; i < nin; ++i) {
    const NDArray& x = k.input(i);
    GRAFT_CHECK(x.dtype() == p.dtype || x.dtype() == DataType::Bool, "{}: input {} is {}, expected {} or BOOL", what, i,
                dtypeName(x.dtype()), dtypeName(p.dtype));
    shapes.push_back(x.shape());
  }
  Shape os = ops::broadcastShapes(shapes, what);
  shapePtrs.reserve(shapes.size());
  for (const Shape& s : shapes) shapePtrs.push_back(&s);
  std::vector<T*> outs;
  for (size_t o = 0; o < p.outputs.size(); ++o) outs.push_back(k.allocOutputUninit(o, p.dtype, os).template data<T>());
  Broadcast bc = Broadcast::make(os, shapePtrs);
  if (bc.numel == 0) return;
  int nr = p.numRegisters();
  parallelRanges(k.pool(), bc.numel, cp.costly ? kGrainCostly : kGrainCheap, [&](int64_t begin, int64_t end) {
    std::vector<C> scratch(static_cast<size_t>((cp.numSlots + 3) * kFuseBlock));
    C* splat[3];
    for (int s = 0; s < 3; ++s) splat[s] = scratch.data() + (cp.numSlots + s) * kFuseBlock;
    std::vector<const C*> reg(nr);
    std::vector<C> scalar(nr);
    std::vector<bool> isScalar(nr);
    bc.forEachRun(begin, end, [&](int64_t outOff, const int64_t* off, int64_t runLen) {
      for (int64_t b0 = 0; b0 < runLen; b0 += kFuseBlock) {
        int64_t len = std::min(kFuseBlock, runLen - b0);
        for (size_t i = 0; i < nin; ++i) {
          const NDArray& x = k.input(i);
          bool vec = bc.innerStride(i) != 0;
          int64_t at = off[i] + (vec ? b0 : 0);
          isScalar[i] = !vec;
          C* buf = scratch.data() + cp.slot[i] * kFuseBlock;
          if (x.dtype() == DataType::Bool) {
            const bool* src = x.data<bool>() + at;
            if (vec) {
              for (int64_t j = 0; j < len; ++j) buf[j] = src[j] ? C(1) : C(0);
              reg[i] = buf;
            } else {
              scalar[i] = *src ? C(1) : C(0);
            }
          } else if constexpr (kIsHalfType<T>) {
            const T* src = x.data<T>() + at;
            if (vec) {
              toFloat(src, buf, len);
              reg[i] = buf;
            } else {
              scalar[i] = static_cast<C>(*src);
            }
          } else {
            const T* src = x.data<T>() + at;
            if (vec) reg[i] = src;
            else scalar[i] = *src;
          }
        }
        for (size_t j = 0; j < p.instrs.size(); ++j) {
          const auto& in = p.instrs[j];
          int r = static_cast<int>(nin + j);
          int ops[3] = {in.a, in.b, in.c};
          bool allScalar = true;
          for (int x : ops)
            if (x >= 0) allScalar = allScalar && isScalar[x];
          isScalar[r] = allScalar;
          if (allScalar) {
            C s[3] = {0, 0, 0}, res;
            for (int q = 0; q < 3; ++q)
              if (ops[q] >= 0) s[q] = scalar[ops[q]];
            apply<C>(in.code, &s[0], &s[1], &s[2], &res, 1, static_cast<C>(in.imm));  // one value: no variant
            scalar[r] = res;
            continue;
          }
          const C* operand[3] = {nullptr, nullptr, nullptr};
          for (int q = 0; q < 3; ++q) {
            if (ops[q] < 0) {
              operand[q] = splat[q];
            } else if (isScalar[ops[q]]) {
              std::fill(splat[q], splat[q] + len, scalar[ops[q]]);
              operand[q] = splat[q];
            } else {
              operand[q] = reg[ops[q]];
            }
          }
          C* dst = scratch.data() + cp.slot[r] * kFuseBlock;
          GRAFT_VEC_RUN(apply<C>(in.code, operand[0], operand[1], operand[2], dst, len, static_cast<C>(in.imm)));
          reg[r] = dst;
        }
        for (size_t o = 0; o < p.outputs.size(); ++o) {
          int r = p.outputs[o];
          T* dst = outs[o] + outOff + b0;
          if (isScalar[r]) {
            std::fill(dst, dst + len, static_cast<T>(scalar[r]));
          } else if constexpr (kIsHalfType<T>) {
            fromFloat(reg[r], dst, len);
          } else {
            std::memmove(dst, reg[r], static_cast<size_t>(len) * sizeof(T));
          }
        }
      }
    });
  });
}

ops::KernelFn fusedKernel(ops::CompileContext& c) {
  Compiled cp = compileProgram(c.node());
  std::string what = c.node().describe();
  return [cp, what](ops::KernelContext& k) {
    ops::dispatch<ops::kFloats>(cp.prog.dtype, what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      runFused<T>(cp, k, what);
    });
  };
}

}  // namespace

GRAFT_REGISTER_CPU_KERNELS(vec_fused) {
  r.add({ops::kGraftDomain, "FusedElementwise", "vec_fused", [](const ir::Node&) { return true; }, fusedKernel});
}

}  // namespace graft::backends::cpu
