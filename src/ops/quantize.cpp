// Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the
// integer matrix products MatMulInteger and QLinearMatMul. (The convolutions are in
// quantize_conv.cpp.)
//
// Rounding is half to even everywhere, and results saturate to the quantized type's range.
// Where the ONNX reference divides or multiplies float32 values, so do these kernels: the
// position of a rounding tie depends on it, and models are calibrated against that behaviour.
#include "ops/quantize.hpp"

#include <algorithm>

#include "ops/cost.hpp"
#include "ops/low_precision.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {

namespace quant {

std::vector<int64_t> readQuantized(const NDArray& a, const std::string& what) {
  std::vector<int64_t> v(static_cast<size_t>(a.numel()));
  constexpr uint32_t kQuantized = (1u << 2) | (1u << 3) | (1u << 6);  // uint8, int8, int32
  dispatch<kQuantized>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = a.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) v[i] = static_cast<int64_t>(p[i]);
  });
  return v;
}

std::vector<float> readScales(const NDArray& a, const std::string& what) {
  std::vector<float> v(static_cast<size_t>(a.numel()));
  dispatch<kFloats>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = a.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) v[i] = static_cast<float>(static_cast<ComputeType<T>>(p[i]));
  });
  return v;
}

void checkPerTensorOrVector(const NDArray& a, int64_t n, const std::string& what, const char* name,
                            const char* perWhat) {
  GRAFT_CHECK(isPerTensor(a) || (a.rank() == 1 && a.dim(0) == n),
              "{}: {} must be a scalar or a 1-D tensor of {} values (one per {}), got shape {}", what, name, n, perWhat,
              shapeToString(a.shape()));
}

}  // namespace quant

namespace {

using namespace quant;

constexpr uint32_t kQuant8 = (1u << 2) | (1u << 3);  // uint8, int8

// Where each element of x finds its scale and zero point: per tensor, per axis (a 1-D parameter
// of x.dim(axis) values) or blocked (opset 21: a parameter of x's rank whose `axis` extent is
// ceil(x.dim(axis) / block_size), every other extent x's).
struct ParamIndex {
  enum class Mode { PerTensor, PerAxis, Blocked } mode = Mode::PerTensor;
  int64_t inner = 1, dim = 1, block = 1, pdim = 1;
  int64_t operator()(int64_t i) const {
    switch (mode) {
      case Mode::PerTensor:
        return 0;
      case Mode::PerAxis:
        return (i / inner) % dim;
      case Mode::Blocked: {
        int64_t in = i % inner, a = (i / inner) % dim, o = i / (inner * dim);
        return (o * pdim + a / block) * inner + in;
      }
    }
    return 0;
  }
};

ParamIndex quantParams(const NDArray& x, const NDArray& scale, const NDArray* zp, int64_t axisAttr, int64_t blockSize,
                       const std::string& what) {
  ParamIndex pi;
  GRAFT_CHECK(blockSize >= 0, "{}: block_size must be >= 0, got {}", what, blockSize);
  if (blockSize > 0 && !isPerTensor(scale)) {
    GRAFT_CHECK(scale.rank() == x.rank(),
                "{}: blocked quantization (block_size {}) needs a scale of x's rank {}, got shape {}", what, blockSize,
                x.rank(), shapeToString(scale.shape()));
    int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
    for (int64_t d = 0; d < x.rank(); ++d) {
      int64_t want = d == axis ? (x.dim(d) + blockSize - 1) / blockSize : x.dim(d);
      GRAFT_CHECK(
          scale.dim(d) == want,
          "{}: with block_size {} along axis {}, the scale of x {} must have shape dimension {} = {}, got shape {}",
          what, blockSize, axis, shapeToString(x.shape()), d, want, shapeToString(scale.shape()));
    }
    pi.mode = ParamIndex::Mode::Blocked;
    pi.dim = x.dim(axis);
    pi.pdim = scale.dim(axis);
    pi.block = blockSize;
    pi.inner = shapeProduct(x.shape(), axis + 1, x.rank());
  } else if (!isPerTensor(scale)) {
    GRAFT_CHECK(scale.rank() == 1,
                "{}: the scale must be a scalar or 1-D (or of x's rank, with block_size), got shape {}", what,
                shapeToString(scale.shape()));
    int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
    GRAFT_CHECK(scale.dim(0) == x.dim(axis), "{}: the scale has {} values but axis {} of the input has {}", what,
                scale.dim(0), axis, x.dim(axis));
    pi.mode = ParamIndex::Mode::PerAxis;
    pi.dim = x.dim(axis);
    pi.inner = shapeProduct(x.shape(), axis + 1, x.rank());
  }
  if (zp)
    GRAFT_CHECK(zp->shape() == scale.shape() || (isPerTensor(*zp) && isPerTensor(scale)),
                "{}: the zero point's shape {} differs from the scale's {}", what, shapeToString(zp->shape()),
                shapeToString(scale.shape()));
  return pi;
}

// The quantized element types: 8- and 16-bit integers, int32 (DequantizeLinear only), and the
// low-precision types (int4/uint4, float8, float4).
constexpr uint32_t kQuantInts = (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6);

bool isQuantizedType(DataType dt, bool allowInt32) {
  if (dt == DataType::Int32) return allowInt32;
  return ((kQuantInts >> static_cast<uint32_t>(dt)) & 1u) || isLowPrecision(dt);
}

bool isFloat8(DataType dt) {
  return dt == DataType::Float8E4M3FN || dt == DataType::Float8E4M3FNUZ || dt == DataType::Float8E5M2 ||
         dt == DataType::Float8E5M2FNUZ;
}

/// The elements of a quantized tensor (any type isQuantizedType accepts) as doubles.
std::vector<double> quantizedValues(const NDArray& a, const std::string& what) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  if (isLowPrecision(a.dtype())) {
    const auto* p = static_cast<const uint8_t*>(a.rawData());
    for (int64_t i = 0; i < a.numel(); ++i) v[i] = lowPrecisionToDouble(a.dtype(), p[i]);
    return v;
  }
  dispatch<kQuantInts>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = a.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) v[i] = static_cast<double>(p[i]);
  });
  return v;
}

/// v rounded to the floating-point type dt (what arithmetic in dt gives, for one operation on
/// values of dt: double has room for an exact intermediate of float, half and bfloat16 ops).
double roundTo(DataType dt, double v) {
  switch (dt) {
    case DataType::Float:
      return static_cast<double>(static_cast<float>(v));
    case DataType::Float16:
      return static_cast<double>(static_cast<float>(Half(static_cast<float>(v))));
    case DataType::BFloat16:
      return static_cast<double>(static_cast<float>(BFloat16(static_cast<float>(v))));
    default:
      return v;
  }
}

/// The type x / scale is computed in, as numpy promotes them (the ONNX reference): half by half
/// stays half, bfloat16 by bfloat16 stays bfloat16, double wins, otherwise float.
DataType divisionType(DataType x, DataType s) {
  if (x == s) return x;
  if (x == DataType::Double || s == DataType::Double) return DataType::Double;
  return DataType::Float;
}

/// Integer ranges of the integer quantized types.
std::pair<double, double> intRange(DataType dt) {
  switch (dt) {
    case DataType::UInt8:
      return {0, 255};
    case DataType::Int8:
      return {-128, 127};
    case DataType::UInt16:
      return {0, 65535};
    case DataType::Int16:
      return {-32768, 32767};
    default:
      return narrowIntRange(dt);  // INT4, UINT4, INT2, UINT2; {0, 0} for the others
  }
}

/// Writes v (already in the quantized type's value set) as element i of y.
void storeQuantized(NDArray& y, int64_t i, double v) {
  if (isLowPrecision(y.dtype())) {
    static_cast<uint8_t*>(y.rawData())[i] = lowPrecisionFromDouble(y.dtype(), v, true);
    return;
  }
  dispatch<kQuantInts>(y.dtype(), "quantized output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    y.data<T>()[i] = static_cast<T>(v);
  });
}

// QuantizeLinear (opset 25): y = saturate(round(x / scale) + zero_point) for the integer types
// (int4 to int16), the float8 types (x / scale cast, saturating unless saturate=0) and float4
// (x / scale + zero_point cast). The output type is the zero point's, else output_dtype, else
// uint8; `precision` is the type the division happens in.
KernelFn quantizeLinearKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axis = n.attrInt("axis", 1);
  int64_t blockSize = n.attrInt("block_size", 0);
  bool saturate = n.attrInt("saturate", 1) != 0;
  auto outputDtype = static_cast<DataType>(n.attrInt("output_dtype", 0));
  auto precision = static_cast<DataType>(n.attrInt("precision", 0));
  GRAFT_CHECK(precision == DataType::Undefined || ((kFloats >> static_cast<uint32_t>(precision)) & 1u),
              "{}: precision must be a floating-point type, got {}", what, dtypeName(precision));
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& scale = k.input(1);
    const NDArray* zp = k.hasInput(2) ? &k.input(2) : nullptr;
    DataType yType = outputDtype == DataType::Undefined ? DataType::UInt8 : outputDtype;
    if (zp) {
      GRAFT_CHECK(outputDtype == DataType::Undefined || outputDtype == zp->dtype(),
                  "{}: output_dtype {} differs from the zero point's type {}", what, dtypeName(outputDtype),
                  dtypeName(zp->dtype()));
      yType = zp->dtype();
    }
    GRAFT_CHECK(isQuantizedType(yType, false) && yType != DataType::Int32, "{}: cannot quantize to {}", what,
                dtypeName(yType));
    ParamIndex pi = quantParams(x, scale, zp, axis, blockSize, what);
    // x is a floating-point type or INT32 (opset 21 and later).
    std::vector<double> xv =
        x.dtype() == DataType::Int32 ? quantizedValues(x, what + " x") : readAsDoubles(x, what + " x");
    std::vector<double> s = readAsDoubles(scale, what + " y_scale");
    std::vector<double> z = zp ? quantizedValues(*zp, what + " y_zero_point") : std::vector<double>{0.0};
    DataType div = precision != DataType::Undefined ? precision : divisionType(x.dtype(), scale.dtype());
    NDArray& y = k.allocOutputUninit(0, yType, x.shape());
    auto [lo, hi] = intRange(yType);
    bool integer = hi > lo;
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t p = pi(i);
      double q = roundTo(div, roundTo(div, xv[i]) / roundTo(div, at(s, p)));
      if (integer) {
        double r = std::isnan(q) ? 0.0 : std::nearbyint(q) + at(z, p);
        storeQuantized(y, i, std::min(std::max(r, lo), hi));
      } else if (isFloat8(yType)) {
        // The float8 zero point must be 0 (as the reference, which leaves it out).
        static_cast<uint8_t*>(y.rawData())[i] = lowPrecisionFromDouble(yType, q, saturate);
      } else {
        static_cast<uint8_t*>(y.rawData())[i] = lowPrecisionFromDouble(yType, q + at(z, p), true);
      }
    }
  };
}

// DequantizeLinear (opset 25): y = (x - zero_point) * scale, as output_dtype or the scale's
// type. Float8 zero points must be 0; a float4 zero point is not used (as ONNX's reference).
KernelFn dequantizeLinearKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  int64_t axis = n.attrInt("axis", 1);
  int64_t blockSize = n.attrInt("block_size", 0);
  auto outputDtype = static_cast<DataType>(n.attrInt("output_dtype", 0));
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& scale = k.input(1);
    const NDArray* zp = k.hasInput(2) ? &k.input(2) : nullptr;
    GRAFT_CHECK(isQuantizedType(x.dtype(), true), "{}: cannot dequantize {}", what, dtypeName(x.dtype()));
    if (zp)
      GRAFT_CHECK(zp->dtype() == x.dtype(), "{}: the zero point has type {} but x has {}", what, dtypeName(zp->dtype()),
                  dtypeName(x.dtype()));
    ParamIndex pi = quantParams(x, scale, zp, axis, blockSize, what);
    std::vector<double> xv = quantizedValues(x, what + " x"), s = readAsDoubles(scale, what + " x_scale");
    std::vector<double> z = {0.0};
    if (zp && x.dtype() != DataType::Float4E2M1) z = quantizedValues(*zp, what + " x_zero_point");
    if (zp && isFloat8(x.dtype()))
      for (double v : z) GRAFT_CHECK(v == 0, "{}: a float8 zero point must be 0, got {}", what, v);
    DataType yType = outputDtype == DataType::Undefined ? scale.dtype() : outputDtype;
    dispatch<kFloats>(yType, what + " output", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* yp = k.allocOutputUninit(0, yType, x.shape()).data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        int64_t p = pi(i);
        // (x - zp) and the float32 scale: the double product is exact (integers up to 33 bits,
        // scales of 24), so one rounding to float gives the float32 product.
        double v = roundTo(DataType::Float, (xv[i] - at(z, p)) * at(s, p));
        if (scale.dtype() == DataType::Double) v = (xv[i] - at(z, p)) * at(s, p);
        yp[i] = static_cast<T>(static_cast<ComputeType<T>>(v));
      }
    });
  };
}

KernelFn dynamicQuantizeLinearKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.dtype() == DataType::Float, "{}: x must be FLOAT, got {}", what, dtypeName(x.dtype()));
    const float* xp = x.data<float>();
    // The range always includes 0 so that 0 is exactly representable; NaNs are ignored.
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (std::isnan(xp[i])) continue;
      lo = std::min(lo, xp[i]);
      hi = std::max(hi, xp[i]);
    }
    // A constant-zero input would give a zero scale; onnxruntime uses 1 there, and so does graft.
    float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zpF = std::max(0.0f, std::min(255.0f, 0.0f - lo / scale));
    uint8_t zp = saturateRound<uint8_t>(zpF);
    NDArray& y = k.allocOutputUninit(0, DataType::UInt8, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i)
      y.data<uint8_t>()[i] = saturateRound<uint8_t>(static_cast<double>(std::nearbyint(xp[i] / scale)) + zp);
    k.allocOutputUninit(1, DataType::Float, {}).data<float>()[0] = scale;
    k.allocOutputUninit(2, DataType::UInt8, {}).data<uint8_t>()[0] = zp;
  };
}

// x - zero point, where the zero point is per tensor, per row (a 1-D tensor of x's rows, for
// the left operand) or any shape that broadcasts to x's (per column: [N] or [..., 1, N]).
std::vector<int64_t> subtractZeroPoint(const NDArray& x, const NDArray* zp, bool leftOperand, const std::string& what,
                                       const char* name) {
  std::vector<int64_t> v = readQuantized(x, what);
  if (!zp) return v;
  GRAFT_CHECK(zp->dtype() == x.dtype(), "{}: {} has type {} but its tensor has {}", what, name, dtypeName(zp->dtype()),
              dtypeName(x.dtype()));
  std::vector<int64_t> z = readQuantized(*zp, what);
  if (isPerTensor(*zp)) {
    for (auto& e : v) e -= z[0];
    return v;
  }
  Shape zs = zp->shape();
  if (leftOperand && zs.size() == 1 && x.rank() >= 2) zs = {zs[0], 1};
  GRAFT_CHECK(zs.size() <= x.shape().size() && broadcastShapes(zs, x.shape(), what) == x.shape(),
              "{}: {} of shape {} does not match its tensor's shape {}", what, name, shapeToString(zp->shape()),
              shapeToString(x.shape()));
  std::array<std::vector<int64_t>, 1> st{broadcastStrides(zs, x.shape())};
  int64_t i = 0;
  forEachBroadcastRun<1>(x.shape(), st,
                         [&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& inner, int64_t len) {
                           for (int64_t j = 0; j < len; ++j) v[i++] -= z[off[0] + j * inner[0]];
                         });
  return v;
}

// Integer matrix product with numpy MatMul semantics (batch broadcasting, 1-D operands).
struct IntProduct {
  Shape shape;           // the result's shape
  int64_t M = 0, N = 0;  // rows and columns of each matrix in the result
  std::vector<int64_t> acc;
};

IntProduct intMatmul(const std::vector<int64_t>& av, Shape as, const std::vector<int64_t>& bv, Shape bs,
                     const std::string& what) {
  GRAFT_CHECK(!as.empty() && !bs.empty(), "{}: inputs must have rank >= 1", what);
  bool vecA = as.size() == 1, vecB = bs.size() == 1;
  if (vecA) as.insert(as.begin(), 1);
  if (vecB) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), K2 = bs[bs.size() - 2], N = bs.back();
  GRAFT_CHECK(K == K2, "{}: inner dimensions differ: {} vs {}", what, K, K2);
  Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Shape batch = broadcastShapes(ba, bb, what);
  auto sta = broadcastStrides(ba, batch), stb = broadcastStrides(bb, batch);
  IntProduct r;
  r.M = M;
  r.N = N;
  r.shape = batch;
  if (!vecA) r.shape.push_back(M);
  if (!vecB) r.shape.push_back(N);
  int64_t nb = shapeNumel(batch);
  Shape full = batch;
  full.insert(full.end(), {M, N});
  r.acc.assign(static_cast<size_t>(shapeNumel(full)), 0);  // throws rather than overflow (empty operands)
  for (int64_t i = 0; i < nb; ++i) {
    int64_t oa = 0, ob = 0, rem = i;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      int64_t id = rem % batch[d];
      rem /= batch[d];
      oa += id * sta[d];
      ob += id * stb[d];
    }
    const int64_t* a = av.data() + oa * M * K;
    const int64_t* b = bv.data() + ob * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        int64_t s = 0;
        for (int64_t kk = 0; kk < K; ++kk) s += a[m * K + kk] * b[kk * N + n];
        r.acc[(i * M + m) * N + n] = s;
      }
  }
  return r;
}

KernelFn matMulIntegerKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& a = k.input(0);
    const NDArray& b = k.input(1);
    for (const NDArray* t : {&a, &b})
      GRAFT_CHECK(t->dtype() == DataType::UInt8 || t->dtype() == DataType::Int8,
                  "{}: inputs must be UINT8 or INT8, got {}", what, dtypeName(t->dtype()));
    auto av = subtractZeroPoint(a, k.hasInput(2) ? &k.input(2) : nullptr, true, what, "a_zero_point");
    auto bv = subtractZeroPoint(b, k.hasInput(3) ? &k.input(3) : nullptr, false, what, "b_zero_point");
    IntProduct p = intMatmul(av, a.shape(), bv, b.shape(), what);
    NDArray& y = k.allocOutputUninit(0, DataType::Int32, p.shape);
    // Sums that leave int32 wrap around, as in the int32 accumulators of real kernels.
    for (size_t i = 0; i < p.acc.size(); ++i) y.data<int32_t>()[i] = static_cast<int32_t>(p.acc[i]);
  };
}

KernelFn qlinearMatMulKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& a = k.input(0);
    const NDArray& b = k.input(3);
    for (const NDArray* t : {&a, &b})
      GRAFT_CHECK(t->dtype() == DataType::UInt8 || t->dtype() == DataType::Int8,
                  "{}: a and b must be UINT8 or INT8, got {}", what, dtypeName(t->dtype()));
    auto opt = [&](size_t i) { return k.hasInput(i) ? &k.input(i) : nullptr; };
    auto av = subtractZeroPoint(a, opt(2), true, what, "a_zero_point");
    auto bv = subtractZeroPoint(b, opt(5), false, what, "b_zero_point");
    IntProduct p = intMatmul(av, a.shape(), bv, b.shape(), what);
    const NDArray &as = k.input(1), &bs = k.input(4), &ys = k.input(6);
    checkPerTensorOrVector(as, p.M, what, "a_scale", "row of a");
    checkPerTensorOrVector(bs, p.N, what, "b_scale", "column of b");
    checkPerTensorOrVector(ys, p.M, what, "y_scale", "row of y");
    const NDArray* yzp = opt(7);
    if (yzp) checkPerTensorOrVector(*yzp, p.M, what, "y_zero_point", "row of y");
    std::vector<float> sa = readScales(as, what), sb = readScales(bs, what), sy = readScales(ys, what);
    std::vector<int64_t> zy = yzp ? readQuantized(*yzp, what) : std::vector<int64_t>{0};
    DataType yType = yzp ? yzp->dtype() : a.dtype();
    dispatch<kQuant8>(yType, what + " y_zero_point", [&](auto tag) {
      using Q = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, yType, p.shape);
      for (size_t i = 0; i < p.acc.size(); ++i) {
        int64_t n = static_cast<int64_t>(i) % p.N, m = (static_cast<int64_t>(i) / p.N) % p.M;
        // The requantization multiplier is formed in float32, then applied in double.
        float mult = at(sa, m) * at(sb, n) / at(sy, m);
        y.data<Q>()[i] = saturateRound<Q>(static_cast<double>(p.acc[i]) * mult + static_cast<double>(at(zy, m)));
      }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(quantize) {
  r.add("QuantizeLinear").setReference(quantizeLinearKernel);
  r.add("DequantizeLinear").setReference(dequantizeLinearKernel);
  r.add("DynamicQuantizeLinear").setReference(dynamicQuantizeLinearKernel);
  r.add("MatMulInteger").setReference(matMulIntegerKernel).setCost(cost::matmul);
  r.add("QLinearMatMul").setReference(qlinearMatMulKernel).setCost(cost::matmul);  // A is input 0
}

}  // namespace graft::ops
