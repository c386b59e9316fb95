// graft's fused elementwise ops (domain ai.graft), created by the passes fuse-elementwise and
// fuse-gelu, never by models: FusedElementwise (a chain of elementwise ops in one loop, see
// fused_program.hpp). GeluErf (GELU in its erf form, x/2 (1 + erf(x / sqrt 2))) is a row of the
// elementwise table; so is GeluErfGrad, its derivative, which autodiff writes.
#include "ops/fused_program.hpp"

#include <cmath>
#include <limits>

#include "ops/dtype_dispatch.hpp"
#include "ops/elementwise.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace fused {

const ew::Row& row(Code c) {
  GRAFT_ASSERT(c >= Code::Const && c < Code::Count, "FusedElementwise: bad instruction code {}", static_cast<int>(c));
  return ew::row(kOpOf[static_cast<int>(c)]);
}
int arity(Code c) { return row(c).arity; }
const char* codeName(Code c) { return row(c).name; }
bool isPredicate(Code c) { return row(c).predicate; }

Program Program::fromNode(const ir::Node& n) {
  Program p;
  p.numInputs = static_cast<int>(n.numInputs());
  std::vector<int64_t> codes = n.attrInts("codes");
  std::vector<int64_t> args = n.attrInts("args");
  std::vector<float> imms = n.attrFloats("imms");
  std::vector<int64_t> outs = n.attrInts("outputs");
  p.dtype = static_cast<DataType>(n.attrInt("to"));
  GRAFT_CHECK(args.size() == 3 * codes.size() && imms.size() == codes.size(),
              "{}: a program of {} instructions needs {} args and {} imms, got {} and {}", n.describe(), codes.size(),
              3 * codes.size(), codes.size(), args.size(), imms.size());
  GRAFT_CHECK(isFloatingPoint(p.dtype), "{}: outputs must be of a floating-point type, got {}", n.describe(),
              dtypeName(p.dtype));
  GRAFT_CHECK(outs.size() == n.numOutputs(), "{}: {} output registers for {} outputs", n.describe(), outs.size(),
              n.numOutputs());
  for (size_t i = 0; i < codes.size(); ++i) {
    GRAFT_CHECK(codes[i] >= 0 && codes[i] < static_cast<int64_t>(Code::Count),
                "{}: instruction {} has the unknown code {}", n.describe(), i, codes[i]);
    Instr in;
    in.code = static_cast<Code>(codes[i]);
    int32_t* ops[3] = {&in.a, &in.b, &in.c};
    int64_t limit = p.numInputs + static_cast<int64_t>(i);
    for (int k = 0; k < 3; ++k) {
      int64_t r = args[3 * i + k];
      bool used = k < arity(in.code);
      GRAFT_CHECK(used ? (r >= 0 && r < limit) : r == -1, "{}: instruction {} ({}) operand {} is {}, expected {}",
                  n.describe(), i, codeName(in.code), k, r, used ? fmt::format("a register below {}", limit) : "-1");
      *ops[k] = static_cast<int32_t>(r);
    }
    in.imm = imms[i];
    p.instrs.push_back(in);
  }
  for (int64_t o : outs) {
    GRAFT_CHECK(o >= 0 && o < p.numRegisters(), "{}: output register {} is out of range [0, {})", n.describe(), o,
                p.numRegisters());
    p.outputs.push_back(static_cast<int32_t>(o));
  }
  return p;
}

void Program::toAttributes(ir::Attributes& attrs) const {
  std::vector<int64_t> codes, args, outs(outputs.begin(), outputs.end());
  std::vector<float> imms;
  for (const Instr& in : instrs) {
    codes.push_back(static_cast<int64_t>(in.code));
    args.insert(args.end(), {in.a, in.b, in.c});
    imms.push_back(in.imm);
  }
  attrs.set("codes", codes);
  attrs.set("args", args);
  attrs.set("imms", imms);
  attrs.set("outputs", outs);
  attrs.set("to", static_cast<int64_t>(dtype));
}

std::string Program::str() const {
  std::string s;
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr& in = instrs[i];
    s += fmt::format("r{} = {}", numInputs + i, codeName(in.code));
    for (int32_t r : {in.a, in.b, in.c})
      if (r >= 0) s += fmt::format(" r{}", r);
    if (in.code == Code::Const || row(in.code).p0[0]) s += fmt::format(" {}", in.imm);
    s += "\n";
  }
  return s;
}

}  // namespace fused

namespace {

using fused::Code;

// One instruction on compute-type values: the row's reference formula.
template <class C>
C evalInstr(const fused::Instr& in, const C* r) {
  C a = in.a >= 0 ? r[in.a] : C(0), b = in.b >= 0 ? r[in.b] : C(0), c = in.c >= 0 ? r[in.c] : C(0);
  C imm = static_cast<C>(in.imm);
  switch (in.code) {
#define GRAFT_EW_X(Id, ...) \
  case Code::Id:            \
    return ew::Formula<ew::Op::Id>::eval<ew::StdMath, C>(a, b, c, imm, C(0));
    GRAFT_EW_PROGRAM(GRAFT_EW_X)
#undef GRAFT_EW_X
    case Code::Count:
      break;
  }
  GRAFT_THROW("FusedElementwise: bad instruction code {}", static_cast<int>(in.code));
}

// The golden model: every output element evaluates the whole program in ComputeType.
KernelFn fusedReference(CompileContext& c) {
  fused::Program prog = fused::Program::fromNode(c.node());
  std::string what = c.node().describe();
  return [prog, what](KernelContext& k) {
    std::vector<Shape> shapes;
    for (size_t i = 0; i < k.numInputs(); ++i) shapes.push_back(k.input(i).shape());
    Shape os = broadcastShapes(shapes, what);
    dispatch<kFloats>(prog.dtype, what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      size_t nin = k.numInputs();
      std::vector<std::vector<int64_t>> strides;
      for (size_t i = 0; i < nin; ++i) {
        const NDArray& x = k.input(i);
        GRAFT_CHECK(x.dtype() == prog.dtype || x.dtype() == DataType::Bool, "{}: input {} is {}, expected {} or BOOL",
                    what, i, dtypeName(x.dtype()), dtypeName(prog.dtype));
        strides.push_back(broadcastStrides(x.shape(), os));
      }
      std::vector<T*> outs;
      for (size_t o = 0; o < prog.outputs.size(); ++o)
        outs.push_back(k.allocOutputUninit(o, prog.dtype, os).template data<T>());
      std::vector<C> reg(static_cast<size_t>(prog.numRegisters()));
      int64_t total = shapeNumel(os), rank = static_cast<int64_t>(os.size());
      std::vector<int64_t> idx(rank, 0);
      for (int64_t e = 0; e < total; ++e) {
        for (size_t i = 0; i < nin; ++i) {
          int64_t off = 0;
          for (int64_t d = 0; d < rank; ++d) off += idx[d] * strides[i][d];
          const NDArray& x = k.input(i);
          reg[i] = x.dtype() == DataType::Bool ? C(x.data<bool>()[off] ? 1 : 0) : static_cast<C>(x.data<T>()[off]);
        }
        for (size_t j = 0; j < prog.instrs.size(); ++j) reg[nin + j] = evalInstr<C>(prog.instrs[j], reg.data());
        for (size_t o = 0; o < outs.size(); ++o) outs[o][e] = static_cast<T>(reg[prog.outputs[o]]);
        for (int64_t d = rank - 1; d >= 0; --d)
          if (++idx[d] < os[d])
            break;
          else
            idx[d] = 0;
      }
    });
  };
}

// Output dims: the broadcast of the inputs' dims (a known size other than 1 wins, then a
// symbolic name; unknown otherwise).
std::vector<ir::ValueType> inferFused(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                      const std::vector<const NDArray*>&) {
  auto to = static_cast<DataType>(n.attrInt("to"));
  size_t rank = 0;
  for (const auto& t : in) {
    if (!t.info.hasShape())
      return std::vector<ir::ValueType>(n.numOutputs(), ir::ValueType::tensor(TensorInfo::unranked(to)));
    rank = std::max<size_t>(rank, t.info.dims().size());
  }
  std::vector<Dim> dims(rank, Dim(1));
  for (const auto& t : in) {
    const auto& d = t.info.dims();
    for (size_t i = 0; i < d.size(); ++i) {
      Dim& o = dims[rank - d.size() + i];
      const Dim& x = d[i];
      if (x.known() && x.value == 1) continue;
      if (x.known()) {
        GRAFT_CHECK(!o.known() || o.value == 1 || o.value == x.value, "{}: input dimensions {} and {} do not broadcast",
                    n.describe(), o.value, x.value);
        o = x;
      } else if (o.known() && o.value == 1) {
        o = x;
      }
    }
  }
  return std::vector<ir::ValueType>(n.numOutputs(), ir::ValueType::tensor(TensorInfo(to, dims)));
}

}  // namespace

GRAFT_REGISTER_OPS(fused_elementwise) {
  r.add("FusedElementwise", kGraftDomain).setReference(fusedReference).setInfer(inferFused).elementwise().inplace(0);
  // GeluErfGrad(x, y = GeluErf(x)): the VJP of the erf-form GELUs writes it; a row of the table
  // (its formula there), registered here as a binary op of two same-typed, broadcasting inputs.
  r.add("GeluErfGrad", kGraftDomain)
      .setReference(binaryKernel<kFloats>([](auto a, auto b) {
        using T = decltype(a);
        return static_cast<T>(ew::Formula<ew::Op::GeluErfGrad>::eval<ew::StdMath, double>(
            static_cast<double>(a), static_cast<double>(b), 0.0, 0.0, 0.0));
      }))
      .setInfer([](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        GRAFT_CHECK(in.size() == 2 && in[0].known() && in[1].known(), "{}: takes x and y", n.describe());
        GRAFT_CHECK(in[0].info.dataType() == in[1].info.dataType(), "{}: x is {}, y is {}", n.describe(),
                    dtypeName(in[0].info.dataType()), dtypeName(in[1].info.dataType()));
        return std::vector<ir::ValueType>{in[0]};
      })
      .elementwise();
  // GeluErf is a row of the elementwise table (elementwise_table.hpp).
}

}  // namespace graft::ops
