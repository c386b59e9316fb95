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

void checkPerTensorOrVector(const NDArray& a, int64_t n, const std::string& what, const char* name, const char* perWhat) {
  GRAFT_CHECK(isPerTensor(a) || (a.rank() == 1 && a.dim(0) == n),
              "{}: {} must be a scalar or a 1-D tensor of {} values (one per {}), got shape {}", what, name, n, perWhat,
              shapeToString(a.shape()));
}

}  // namespace quant

namespace {

using namespace quant;

constexpr uint32_t kQuant8 = (1u << 2) | (1u << 3);  // uint8, int8

// The channel of flat element i along `axis` of `shape`, or 0 for per-tensor parameters.
struct ChannelIndex {
  int64_t inner = 1, dim = 1;
  bool perAxis = false;
  int64_t operator()(int64_t i) const { return perAxis ? (i / inner) % dim : 0; }
};

// Validates the scale and zero point of a (de)quantization of `x` and says how elements map to
// their parameters.
ChannelIndex quantParams(const NDArray& x, const NDArray& scale, const NDArray* zp, int64_t axisAttr,
                         const std::string& what) {
  ChannelIndex ci;
  if (!isPerTensor(scale)) {
    GRAFT_CHECK(scale.rank() == 1, "{}: the scale must be a scalar or 1-D, got shape {}", what,
                shapeToString(scale.shape()));
    int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
    GRAFT_CHECK(scale.dim(0) == x.dim(axis), "{}: the scale has {} values but axis {} of the input has {}", what,
                scale.dim(0), axis, x.dim(axis));
    ci.perAxis = true;
    ci.dim = x.dim(axis);
    ci.inner = shapeProduct(x.shape(), axis + 1, x.rank());
  }
  if (zp)
    GRAFT_CHECK(zp->shape() == scale.shape() || (isPerTensor(*zp) && isPerTensor(scale)),
                "{}: the zero point's shape {} differs from the scale's {}", what, shapeToString(zp->shape()),
                shapeToString(scale.shape()));
  return ci;
}

KernelFn quantizeLinearKernel(CompileContext& c) {
  std::string what = c.node().describe();
  int64_t axis = c.node().attrInt("axis", 1);
  return [what, axis](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& scale = k.input(1);
    const NDArray* zp = k.hasInput(2) ? &k.input(2) : nullptr;
    ChannelIndex ci = quantParams(x, scale, zp, axis, what);
    std::vector<float> s = readScales(scale, what);
    std::vector<int64_t> z = zp ? readQuantized(*zp, what) : std::vector<int64_t>{0};
    DataType yType = zp ? zp->dtype() : DataType::UInt8;
    dispatch<kQuant8>(yType, what + " zero point", [&](auto qtag) {
      using Q = typename decltype(qtag)::type;
      dispatch<kFloats | (1u << 6)>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        // float32 data is divided in float32, like the specification's reference; int32 and
        // double in double.
        using C = std::conditional_t<std::is_same_v<ComputeType<T>, float>, float, double>;
        NDArray& y = k.allocOutputUninit(0, yType, x.shape());
        const T* xp = x.data<T>();
        Q* yp = y.data<Q>();
        for (int64_t i = 0; i < x.numel(); ++i) {
          int64_t ch = ci(i);
          C q = static_cast<C>(static_cast<ComputeType<T>>(xp[i])) / static_cast<C>(at(s, ch));
          yp[i] = saturateRound<Q>(static_cast<double>(std::nearbyint(q)) + static_cast<double>(at(z, ch)));
        }
      });
    });
  };
}

KernelFn dequantizeLinearKernel(CompileContext& c) {
  std::string what = c.node().describe();
  int64_t axis = c.node().attrInt("axis", 1);
  return [what, axis](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& scale = k.input(1);
    const NDArray* zp = k.hasInput(2) ? &k.input(2) : nullptr;
    if (zp)
      GRAFT_CHECK(zp->dtype() == x.dtype(), "{}: the zero point has type {} but x has {}", what, dtypeName(zp->dtype()),
                  dtypeName(x.dtype()));
    ChannelIndex ci = quantParams(x, scale, zp, axis, what);
    std::vector<int64_t> xv = readQuantized(x, what);
    std::vector<float> s = readScales(scale, what);
    std::vector<int64_t> z = zp ? readQuantized(*zp, what) : std::vector<int64_t>{0};
    dispatch<kFloats>(scale.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, scale.dtype(), x.shape());
      T* yp = y.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        int64_t ch = ci(i);
        // (x - zp) fits 33 bits and the scale 24: the double product is exact, so rounding it
        // once to float gives the float32 product.
        double v = static_cast<double>(xv[i] - at(z, ch)) * static_cast<double>(at(s, ch));
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
  forEachBroadcastRun<1>(x.shape(), st, [&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& inner,
                                            int64_t len) {
    for (int64_t j = 0; j < len; ++j) v[i++] -= z[off[0] + j * inner[0]];
  });
  return v;
}

// Integer matrix product with numpy MatMul semantics (batch broadcasting, 1-D operands).
struct IntProduct {
  Shape shape;          // the result's shape
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
      GRAFT_CHECK(t->dtype() == DataType::UInt8 || t->dtype() == DataType::Int8, "{}: inputs must be UINT8 or INT8, got {}",
                  what, dtypeName(t->dtype()));
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
      GRAFT_CHECK(t->dtype() == DataType::UInt8 || t->dtype() == DataType::Int8, "{}: a and b must be UINT8 or INT8, got {}",
                  what, dtypeName(t->dtype()));
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
