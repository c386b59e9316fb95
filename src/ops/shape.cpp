// Ops that move, view or describe data without arithmetic: Constant, Identity, Cast, Reshape,
// Flatten, Squeeze, Unsqueeze, Transpose, Concat, Shape, Size.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "ops/cast_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/low_precision.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {

NDArray castArray(const NDArray& src, DataType to) {
  NDArray out = NDArray(to, src.shape());
  dispatch<kAll>(src.dtype(), "Cast", [&](auto tf) {
    using F = typename decltype(tf)::type;
    dispatch<kAll>(to, "Cast", [&](auto tt) {
      using T = typename decltype(tt)::type;
      const F* s = src.data<F>();
      T* d = out.data<T>();
      for (int64_t i = 0; i < src.numel(); ++i) d[i] = convertElement<T>(s[i]);
    });
  });
  return out;
}

namespace {

NDArray constantValue(const ir::Node& n) {
  const auto& a = n.attrs();
  // Exactly one value attribute, as the spec requires (the checker does not catch two).
  int given = 0;
  for (const char* name : {"value", "sparse_value", "value_float", "value_floats", "value_int", "value_ints",
                           "value_string", "value_strings"})
    given += a.has(name) ? 1 : 0;
  GRAFT_CHECK(given == 1, "{}: Constant needs exactly one value attribute, got {}", n.describe(), given);
  if (a.has("value")) return n.attrTensor("value");
  // The importer densifies a SparseTensorProto into an ordinary tensor attribute.
  if (a.has("sparse_value")) return n.attrTensor("sparse_value");
  if (a.has("value_float")) return NDArray::scalar<float>(DataType::Float, n.attrFloat("value_float"));
  if (a.has("value_int")) return NDArray::scalar<int64_t>(DataType::Int64, n.attrInt("value_int"));
  if (a.has("value_floats")) {
    auto v = n.attrFloats("value_floats");
    NDArray arr(DataType::Float, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), arr.data<float>());
    return arr;
  }
  if (a.has("value_ints")) {
    auto v = n.attrInts("value_ints");
    NDArray arr(DataType::Int64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), arr.data<int64_t>());
    return arr;
  }
  if (a.has("value_string")) {
    NDArray arr(DataType::String, {});
    arr.data<std::string>()[0] = n.attrString("value_string");
    return arr;
  }
  auto v = n.attrStrings("value_strings");
  NDArray arr(DataType::String, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), arr.data<std::string>());
  return arr;
}

KernelFn constantKernel(CompileContext& c) {
  NDArray v = constantValue(c.node());
  return [v](KernelContext& k) { k.setOutput(0, v); };
}

KernelFn identityKernel(CompileContext&) {
  return [](KernelContext& k) { k.setOutputValue(0, k.inputValue(0)); };
}

/// castArray with the node named in any error (unparsable strings, unsupported types).
NDArray castFor(const NDArray& x, DataType to, const std::string& what, bool saturate = true,
                E8M0Round round = E8M0Round::Up) {
  if (x.dtype() == to) return x;
  try {
    if (isLowPrecision(x.dtype()) || isLowPrecision(to)) return castLowPrecision(x, to, saturate, what, round);
    return castArray(x, to);
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
}

KernelFn castKernel(CompileContext& c) {
  auto to = static_cast<DataType>(c.node().attrInt("to"));
  std::string what = c.node().describe();
  // saturate (opset 19) only matters for float8 targets: out-of-range values clamp to the largest
  // finite value instead of becoming infinity or NaN.
  // round_mode (opset 24) only matters for FLOAT8E8M0 targets.
  bool saturate = c.node().attrInt("saturate", 1) != 0;
  E8M0Round round = e8m0RoundFromString(c.node().attrString("round_mode", "up"), what);
  return
      [to, what, saturate, round](KernelContext& k) { k.setOutput(0, castFor(k.input(0), to, what, saturate, round)); };
}

KernelFn castLikeKernel(CompileContext& c) {
  std::string what = c.node().describe();
  bool saturate = c.node().attrInt("saturate", 1) != 0;
  E8M0Round round = e8m0RoundFromString(c.node().attrString("round_mode", "up"), what);
  return [what, saturate, round](KernelContext& k) {
    k.setOutput(0, castFor(k.input(0), k.input(1).dtype(), what, saturate, round));
  };
}

Shape reshapeTarget(const Shape& in, const std::vector<int64_t>& spec, bool allowZero, const std::string& what) {
  Shape out(spec.size());
  int64_t inferAt = -1, known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == -1) {
      GRAFT_CHECK(inferAt < 0, "{}: more than one -1 in the target shape {}", what, shapeToString(spec));
      inferAt = static_cast<int64_t>(i);
      continue;
    }
    if (d == 0 && !allowZero) {
      GRAFT_CHECK(i < in.size(), "{}: 0 at position {} of the target shape copies a dimension the input {} lacks", what,
                  i, shapeToString(in));
      d = in[i];
    }
    GRAFT_CHECK(d >= 0, "{}: invalid dimension {} in the target shape {}", what, d, shapeToString(spec));
    out[i] = d;
    GRAFT_CHECK(!__builtin_mul_overflow(known, d, &known), "{}: target shape {} has more elements than fit in int64",
                what, shapeToString(spec));
  }
  int64_t total = shapeNumel(in);
  if (inferAt >= 0) {
    GRAFT_CHECK(known != 0 && total % known == 0, "{}: cannot reshape {} to {}", what, shapeToString(in),
                shapeToString(spec));
    out[inferAt] = total / known;
  }
  GRAFT_CHECK(shapeNumel(out) == total, "{}: cannot reshape {} ({} elements) to {} ({} elements)", what,
              shapeToString(in), total, shapeToString(out), shapeNumel(out));
  return out;
}

KernelFn reshapeKernel(CompileContext& c) {
  bool allowZero = c.node().attrInt("allowzero", 0) != 0;
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    k.setOutput(0, x.reshaped(reshapeTarget(x.shape(), toInt64Vector(k.input(1)), allowZero, what)));
  };
}

KernelFn flattenKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", 1);
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    int64_t r = x.rank();
    GRAFT_CHECK(axisAttr >= -r && axisAttr <= r, "{}: axis {} out of range for rank {}", what, axisAttr, r);
    int64_t axis = axisAttr < 0 ? axisAttr + r : axisAttr;
    k.setOutput(0, x.reshaped({shapeProduct(x.shape(), 0, axis), shapeProduct(x.shape(), axis, r)}));
  };
}

KernelFn squeezeKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& x = k.input(0);
    Shape out;
    if (k.hasInput(1)) {
      auto axes = normalizeAxes(toInt64Vector(k.input(1)), x.rank(), what);
      for (int64_t a : axes)
        GRAFT_CHECK(x.dim(a) == 1, "{}: cannot squeeze axis {} of shape {}: its size is not 1", what, a,
                    shapeToString(x.shape()));
      for (int64_t i = 0; i < x.rank(); ++i)
        if (std::find(axes.begin(), axes.end(), i) == axes.end()) out.push_back(x.dim(i));
    } else {
      for (int64_t d : x.shape())
        if (d != 1) out.push_back(d);
    }
    k.setOutput(0, x.reshaped(out));
  };
}

KernelFn unsqueezeKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& x = k.input(0);
    int64_t outRank = x.rank() + k.input(1).numel();
    auto axes = normalizeAxes(toInt64Vector(k.input(1)), outRank, what);
    Shape out(outRank, 1);
    std::vector<bool> isNew(outRank, false);
    for (int64_t a : axes) isNew[a] = true;
    int64_t j = 0;
    for (int64_t i = 0; i < outRank; ++i)
      if (!isNew[i]) out[i] = x.dim(j++);
    k.setOutput(0, x.reshaped(out));
  };
}

/// Generic strided copy: out[i] = in[perm-mapped offset].
NDArray transposeArray(const NDArray& x, const std::vector<int64_t>& perm) {
  int64_t r = x.rank();
  Shape os(r);
  for (int64_t i = 0; i < r; ++i) os[i] = x.dim(perm[i]);
  NDArray y = NDArray::uninitialized(x.dtype(), os);
  auto ist = stridesOf(x.shape());
  std::vector<int64_t> st(r);
  for (int64_t i = 0; i < r; ++i) st[i] = ist[perm[i]];
  dispatch<kAll>(x.dtype(), "Transpose", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    int64_t o = 0;
    std::array<std::vector<int64_t>, 1> strides{st};
    forEachBroadcastRun<1>(os, strides, [&](const auto& off, const auto& inner, int64_t len) {
      for (int64_t j = 0; j < len; ++j) dst[o++] = src[off[0] + j * inner[0]];
    });
  });
  return y;
}

KernelFn transposeKernel(CompileContext& c) {
  std::vector<int64_t> permAttr = c.node().attrInts("perm", {});
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    std::vector<int64_t> perm = permAttr;
    if (perm.empty()) {
      perm.resize(x.rank());
      std::iota(perm.rbegin(), perm.rend(), 0);
    }
    GRAFT_CHECK(static_cast<int64_t>(perm.size()) == x.rank(), "{}: perm has {} entries for an input of rank {}", what,
                perm.size(), x.rank());
    perm = normalizeAxes(perm, x.rank(), what);
    k.setOutput(0, transposeArray(x, perm));
  };
}

KernelFn concatKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis");
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& first = k.input(0);
    int64_t r = first.rank();
    int64_t axis = normalizeAxis(axisAttr, r, what);
    std::vector<const NDArray*> xs;
    for (size_t i = 0; i < k.numInputs(); ++i) xs.push_back(&k.input(i));
    Shape os = concatShape(xs, axis, what);
    NDArray& y = k.allocOutputUninit(0, first.dtype(), os);
    int64_t outer = shapeProduct(os, 0, axis), inner = shapeProduct(os, axis + 1, r);
    dispatch<kAll>(first.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = y.data<T>();
      int64_t rowOut = os[axis] * inner, at = 0;
      for (size_t i = 0; i < k.numInputs(); ++i) {
        const NDArray& x = k.input(i);
        int64_t rowIn = x.dim(axis) * inner;
        const T* src = x.data<T>();
        for (int64_t o = 0; o < outer; ++o) std::copy(src + o * rowIn, src + (o + 1) * rowIn, dst + o * rowOut + at);
        at += rowIn;
      }
    });
  };
}

KernelFn shapeKernel(CompileContext& c) {
  int64_t startAttr = c.node().attrInt("start", 0);
  std::optional<int64_t> endAttr;
  if (c.node().attrs().has("end")) endAttr = c.node().attrInt("end");
  return [=](KernelContext& k) {
    const Shape& s = k.input(0).shape();
    int64_t r = static_cast<int64_t>(s.size());
    auto clampIdx = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    int64_t b = clampIdx(startAttr), e = endAttr ? clampIdx(*endAttr) : r;
    int64_t n = std::max<int64_t>(0, e - b);
    NDArray& y = k.allocOutputUninit(0, DataType::Int64, {n});
    for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = s[b + i];
  };
}

KernelFn sizeKernel(CompileContext&) {
  return [](KernelContext& k) { k.setOutput(0, NDArray::scalar<int64_t>(DataType::Int64, k.input(0).numel())); };
}

// BitCast (opset 26): the same bytes read as another type of the same width. A BOOL result
// normalises each byte to true/false (graft's bool holds only 0 or 1).
KernelFn bitCastKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  auto to = static_cast<DataType>(n.attrInt("to"));
  GRAFT_CHECK(to != DataType::String && dtypeSize(to) > 0, "{}: 'to' must be a numeric or BOOL type, got {}", what,
              dtypeName(to));
  return [what, to](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() != DataType::String, "{}: BitCast of a STRING tensor is not defined", what);
    // 4- and 2-bit elements sit one per byte (INT4/INT2 sign-extended): their bytes are not their bits.
    for (DataType t : {x.dtype(), to})
      GRAFT_CHECK(t != DataType::Int4 && t != DataType::UInt4 && t != DataType::Float4E2M1 && t != DataType::Int2 &&
                      t != DataType::UInt2,
                  "{}: BitCast of sub-byte type {} is not supported", what, dtypeName(t));
    GRAFT_CHECK(dtypeSize(x.dtype()) == dtypeSize(to), "{}: {} ({} bits) and {} ({} bits) differ in width", what,
                dtypeName(x.dtype()), 8 * dtypeSize(x.dtype()), dtypeName(to), 8 * dtypeSize(to));
    NDArray& y = k.allocOutputUninit(0, to, x.shape());
    if (to == DataType::Bool) {
      const auto* src = static_cast<const uint8_t*>(x.rawData());
      for (int64_t i = 0; i < x.numel(); ++i) y.data<bool>()[i] = src[i] != 0;
    } else if (x.nbytes() > 0) {
      std::memcpy(y.rawData(), x.rawData(), x.nbytes());
    }
  };
}

}  // namespace

GRAFT_REGISTER_OPS(shape) {
  r.add("Constant").setReference(constantKernel);
  r.add("Identity").setReference(identityKernel).viewOf(0);
  r.add("Cast").setReference(castKernel);
  r.add("CastLike").setReference(castLikeKernel).noGradient({1});
  r.add("Reshape").setReference(reshapeKernel).viewOf(0).noGradient({1});
  r.add("Flatten").setReference(flattenKernel).viewOf(0);
  r.add("Squeeze").setReference(squeezeKernel).viewOf(0).noGradient({1});
  r.add("Unsqueeze").setReference(unsqueezeKernel).viewOf(0).noGradient({1});
  r.add("Transpose").setReference(transposeKernel);
  r.add("Concat").setReference(concatKernel);
  r.add("Shape").setReference(shapeKernel);
  r.add("Size").setReference(sizeKernel);
  r.add("BitCast").setReference(bitCastKernel);
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {

GRAFT_REGISTER_OPS(shape_vjp) {
  r.add("Identity").setVjp([](GradBuilder& g) { g.setDx(0, g.dy()); });
  auto reshapeBack = [](GradBuilder& g) { g.setDx(0, g.reshapeLike(g.dy(), g.in(0))); };
  r.add("Reshape").setVjp(reshapeBack);
  r.add("Flatten").setVjp(reshapeBack);
  r.add("Squeeze").setVjp(reshapeBack);
  r.add("Unsqueeze").setVjp(reshapeBack);
  r.add("Transpose").setVjp([](GradBuilder& g) {
    int64_t rank = g.in(0)->info().rank();
    std::vector<int64_t> perm = g.node().attrInts("perm", {});
    if (perm.empty())
      for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inv[static_cast<size_t>(perm[i] < 0 ? perm[i] + rank : perm[i])] = static_cast<int64_t>(i);
    ir::Attributes a;
    a.set("perm", inv);
    g.setDx(0, g.op("Transpose", {g.dy()}, a));
  });
  auto castBack = [](GradBuilder& g) {
    if (isFloatingPoint(g.in(0)->info().dataType())) g.setDx(0, g.op("CastLike", {g.dy(), g.in(0)}));
  };
  r.add("Cast").setVjp(castBack);
  r.add("CastLike").setVjp(castBack);
  // One Split of dy by the inputs' sizes along the axis.
  r.add("Concat").setVjp([](GradBuilder& g) {
    const ir::Node& n = g.node();
    int64_t axis = gradutil::normAxis(g, n.attrInt("axis"), gradutil::rankOf(g, g.in(0)));
    std::vector<ir::Tensor*> sizes;
    for (size_t i = 0; i < n.numInputs(); ++i) sizes.push_back(gradutil::dimOf(g, g.in(i), axis));
    ir::Attributes a;
    a.set("axis", axis);
    std::vector<ir::Tensor*> parts = g.opN("Split", {g.dy(), gradutil::concatInts(g, sizes)}, n.numInputs(), a);
    for (size_t i = 0; i < n.numInputs(); ++i)
      if (g.wants(i)) g.setDx(i, parts[i]);
  });
}

}  // namespace graft::ops
