// Sequences of tensors: SequenceConstruct, SequenceEmpty, SequenceAt, SequenceInsert,
// SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence and SequenceMap.
// A sequence value shares its element arrays; ops that change a sequence build a new one.
#include "ops/axis_copy.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

using Seq = std::vector<NDArray>;

const Seq& sequenceInput(const KernelContext& k, size_t i, const std::string& what) {
  const Value& v = k.inputValue(i);
  GRAFT_CHECK(v.isSequence(), "{}: input {} must be a sequence, got {}", what, i,
              v.isTensor() ? "a tensor" : "an absent value");
  return *v.sequence;
}

// A position input: one int32/int64 value, in [-n, n-1] (or [-n, n] when `inclusiveEnd`).
int64_t positionInput(const NDArray& p, int64_t n, bool inclusiveEnd, const std::string& what) {
  GRAFT_CHECK(p.numel() == 1 && (p.dtype() == DataType::Int32 || p.dtype() == DataType::Int64),
              "{}: 'position' must be one int32 or int64 value, got {} of shape {}", what, dtypeName(p.dtype()),
              shapeToString(p.shape()));
  int64_t pos = toInt64Vector(p)[0];
  int64_t hi = inclusiveEnd ? n : n - 1;
  GRAFT_CHECK(pos >= -n && pos <= hi, "{}: position {} is out of range [{}, {}] for a sequence of {} tensor(s)", what,
              pos, -n, hi, n);
  return pos < 0 ? pos + n : pos;
}

// The element dtype a sequence input is declared with (Undefined when unknown).
DataType declaredElemType(const CompileContext& c, size_t i) {
  const ir::Tensor* t = c.node().input(i);
  return t && !t->type().isTensor() ? t->type().info.dataType() : DataType::Undefined;
}

KernelFn sequenceConstructKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    Seq s;
    for (size_t i = 0; i < k.numInputs(); ++i) {
      const NDArray& x = k.input(i);
      GRAFT_CHECK(s.empty() || x.dtype() == s[0].dtype(),
                  "{}: input {} is {}, but input 0 is {}; a sequence holds one "
                  "element type",
                  what, i, dtypeName(x.dtype()), dtypeName(s[0].dtype()));
      s.push_back(x);
    }
    k.setOutputValue(0, Value::fromSequence(std::move(s)));
  };
}

KernelFn sequenceEmptyKernel(CompileContext& c) {
  int64_t code = c.node().attrInt("dtype", static_cast<int64_t>(DataType::Float));
  GRAFT_CHECK(code >= 0 && code < 32 && ((kAll >> code) & 1u),
              "{}: attribute 'dtype' {} is not a supported tensor "
              "element type",
              c.node().describe(), code);
  return [](KernelContext& k) { k.setOutputValue(0, Value::fromSequence({})); };
}

KernelFn sequenceAtKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const Seq& s = sequenceInput(k, 0, what);
    int64_t pos = positionInput(k.input(1), static_cast<int64_t>(s.size()), false, what);
    k.setOutput(0, s[static_cast<size_t>(pos)]);
  };
}

KernelFn sequenceInsertKernel(CompileContext& c) {
  std::string what = c.node().describe();
  DataType declared = declaredElemType(c, 0);
  return [what, declared](KernelContext& k) {
    const Seq& s = sequenceInput(k, 0, what);
    const NDArray& x = k.input(1);
    DataType want = s.empty() ? declared : s[0].dtype();
    GRAFT_CHECK(want == DataType::Undefined || x.dtype() == want, "{}: cannot insert a {} tensor into a sequence of {}",
                what, dtypeName(x.dtype()), dtypeName(want));
    auto n = static_cast<int64_t>(s.size());
    int64_t pos = k.hasInput(2) ? positionInput(k.input(2), n, true, what) : n;
    Seq out;
    out.reserve(s.size() + 1);
    out.insert(out.end(), s.begin(), s.begin() + pos);
    out.push_back(x);
    out.insert(out.end(), s.begin() + pos, s.end());
    k.setOutputValue(0, Value::fromSequence(std::move(out)));
  };
}

KernelFn sequenceEraseKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const Seq& s = sequenceInput(k, 0, what);
    auto n = static_cast<int64_t>(s.size());
    GRAFT_CHECK(n > 0, "{}: cannot erase from an empty sequence", what);
    int64_t pos = k.hasInput(1) ? positionInput(k.input(1), n, false, what) : n - 1;
    Seq out = s;
    out.erase(out.begin() + pos);
    k.setOutputValue(0, Value::fromSequence(std::move(out)));
  };
}

KernelFn sequenceLengthKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const Seq& s = sequenceInput(k, 0, what);
    k.setOutput(0, NDArray::scalar<int64_t>(DataType::Int64, static_cast<int64_t>(s.size())));
  };
}

KernelFn splitToSequenceKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", 0);
  bool keepDims = c.node().attrInt("keepdims", 1) != 0;
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 1, "{}: cannot split a scalar", what);
    int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
    int64_t dim = x.dim(axis);
    std::vector<int64_t> lengths;
    if (!k.hasInput(1)) {
      lengths.assign(static_cast<size_t>(dim), 1);
    } else {
      const NDArray& split = k.input(1);
      GRAFT_CHECK(split.dtype() == DataType::Int32 || split.dtype() == DataType::Int64,
                  "{}: 'split' must be int32 or int64, got {}", what, dtypeName(split.dtype()));
      GRAFT_CHECK(split.rank() <= 1, "{}: 'split' must be a scalar or 1-D, got shape {}", what,
                  shapeToString(split.shape()));
      std::vector<int64_t> v = toInt64Vector(split);
      if (split.rank() == 0) {
        int64_t len = v[0];
        GRAFT_CHECK(len > 0, "{}: a scalar 'split' must be positive, got {}", what, len);
        for (int64_t at = 0; at < dim; at += len) lengths.push_back(std::min(len, dim - at));
      } else {
        int64_t sum = 0;
        for (int64_t len : v) {
          GRAFT_CHECK(len >= 0, "{}: 'split' has a negative length {}", what, len);
          GRAFT_CHECK(len <= dim - sum, "{}: 'split' lengths {} add up to more than dimension {} of axis {}", what,
                      shapeToString(v), dim, axis);
          sum += len;
        }
        GRAFT_CHECK(sum == dim, "{}: 'split' lengths {} add up to {}, but axis {} has size {}", what, shapeToString(v),
                    sum, axis, dim);
        lengths = std::move(v);
      }
    }
    bool squeeze = !k.hasInput(1) && !keepDims;
    Seq out;
    int64_t at = 0;
    for (int64_t len : lengths) {
      out.push_back(squeeze ? takeAxis(x, axis, at) : sliceAxis(x, axis, at, len));
      at += len;
    }
    k.setOutputValue(0, Value::fromSequence(std::move(out)));
  };
}

KernelFn concatFromSequenceKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis");
  bool newAxis = c.node().attrInt("new_axis", 0) != 0;
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const Seq& s = sequenceInput(k, 0, what);
    GRAFT_CHECK(!s.empty(), "{}: the input sequence is empty; there is nothing to concatenate", what);
    int64_t r = s[0].rank();
    if (newAxis) {
      k.setOutput(0, stackAxis(s, normalizeAxis(axisAttr, r + 1, what), false, what));
    } else {
      GRAFT_CHECK(r >= 1, "{}: cannot concatenate scalars without new_axis=1", what);
      k.setOutput(0, concatAxis(s, normalizeAxis(axisAttr, r, what), what));
    }
  };
}

KernelFn sequenceMapKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  auto body = c.compileSubgraph(*n.attrGraph("body"));
  GRAFT_CHECK(body->numInputs() == n.numInputs(),
              "{}: the body has {} input(s), but the node has {} (the sequence and "
              "the additional inputs)",
              what, body->numInputs(), n.numInputs());
  GRAFT_CHECK(body->numOutputs() == n.numOutputs(), "{}: the body has {} output(s), but the node has {}", what,
              body->numOutputs(), n.numOutputs());
  return [=](KernelContext& k) {
    const Seq& s = sequenceInput(k, 0, what);
    size_t len = s.size();
    for (size_t j = 1; j < k.numInputs(); ++j) {
      const Value& v = k.inputValue(j);
      GRAFT_CHECK(v.isTensor() || v.isSequence(), "{}: additional input {} is absent", what, j);
      GRAFT_CHECK(!v.isSequence() || v.sequence->size() == len,
                  "{}: additional input {} is a sequence of {} tensor(s), "
                  "but the input sequence has {}",
                  what, j, v.isSequence() ? v.sequence->size() : 0, len);
    }
    std::vector<Seq> outs(k.numOutputs());
    for (auto& o : outs) o.reserve(len);
    for (size_t i = 0; i < len; ++i) {
      std::vector<Value> in(k.numInputs());
      in[0] = Value::fromTensor(s[i]);
      for (size_t j = 1; j < k.numInputs(); ++j) {
        const Value& v = k.inputValue(j);
        in[j] = v.isSequence() ? Value::fromTensor((*v.sequence)[i]) : v;
      }
      std::vector<Value> res;
      try {
        res = body->run(std::move(in), k);
      } catch (const Error& e) {
        GRAFT_THROW("{}: element {}: {}", what, i, e.what());
      }
      for (size_t o = 0; o < outs.size(); ++o) {
        GRAFT_CHECK(res[o].isTensor(), "{}: body output {} must be a tensor for element {}", what, o, i);
        outs[o].push_back(std::move(res[o].tensor));
      }
    }
    for (size_t o = 0; o < outs.size(); ++o) k.setOutputValue(o, Value::fromSequence(std::move(outs[o])));
  };
}

}  // namespace

GRAFT_REGISTER_OPS(sequence) {
  r.add("SequenceConstruct").setReference(sequenceConstructKernel);
  r.add("SequenceEmpty").setReference(sequenceEmptyKernel);
  r.add("SequenceAt").setReference(sequenceAtKernel).noGradient({1});
  r.add("SequenceInsert").setReference(sequenceInsertKernel).noGradient({2});
  r.add("SequenceErase").setReference(sequenceEraseKernel).noGradient({1});
  r.add("SequenceLength").setReference(sequenceLengthKernel).noGradient({0});
  r.add("SplitToSequence").setReference(splitToSequenceKernel).noGradient({1});
  r.add("ConcatFromSequence").setReference(concatFromSequenceKernel);
  r.add("SequenceMap").setReference(sequenceMapKernel);
}

}  // namespace graft::ops
