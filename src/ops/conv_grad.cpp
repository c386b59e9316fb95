// ai.graft ConvGradInput and ConvGradWeight: the two halves of Conv's backward pass as ops of
// their own, because kernel libraries have direct primitives for them (oneDNN's
// convolution_backward_data and convolution_backward_weights), which beat expressing them as
// forward convolutions over transposed tensors.
//
//   ConvGradInput(dY, W) -> dX          attributes: Conv's, plus input_spatial (X's spatial extents)
//   ConvGradWeight(X, dY) -> dW [, dB]  attributes: Conv's, kernel_shape required
//
// Both take the forward Conv's window (auto_pad, pads, strides, dilations, group) and resolve
// it against X's spatial extents exactly as Conv does; dY must have the shape Conv's output has.
// The reference kernels accumulate in double.
#include "ops/conv_util.hpp"
#include "ops/cost.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

Dim dimOf(const ir::ValueType& t, size_t i) {
  if (!t.info.hasShape() || static_cast<size_t>(t.info.rank()) <= i) return Dim();
  return t.info.dims()[i];
}

int64_t groupOf(const ir::Node& n) {
  int64_t group = n.attrInt("group", 1);
  GRAFT_CHECK(group >= 1, "{}: group must be >= 1, got {}", n.describe(), group);
  return group;
}

Shape inputSpatial(const ir::Node& n) {
  GRAFT_CHECK(n.attrs().has("input_spatial"), "{}: attribute 'input_spatial' (X's spatial extents) is required",
              n.describe());
  std::vector<int64_t> v = n.attrInts("input_spatial");
  GRAFT_CHECK(!v.empty(), "{}: input_spatial must have one value per spatial axis, got none", n.describe());
  for (int64_t e : v)
    GRAFT_CHECK(e >= 0 && e < (int64_t{1} << 40), "{}: input_spatial values must be in [0, 2^40), got {}", n.describe(),
                shapeToString(v));
  return Shape(v.begin(), v.end());
}

Shape kernelOf(const WindowAttrs& wa) {
  GRAFT_CHECK(!wa.kernel.empty(), "{}: attribute 'kernel_shape' is required", wa.what);
  return Shape(wa.kernel.begin(), wa.kernel.end());
}

Shape convOutShape(const ConvShape& s) {
  Shape ys = {s.batch, s.outChannels};
  ys.insert(ys.end(), s.win.out.begin(), s.win.out.end());
  return ys;
}

void checkDy(const std::string& what, const Shape& got, const Shape& want) {
  GRAFT_CHECK(got == want, "{}: dY must have the convolution's output shape {}, got {}", what, shapeToString(want),
              shapeToString(got));
}

// X's shape for dY [N, M, out...] and W [M, C/group, k...].
Shape gradInputXShape(const std::string& what, const Shape& dy, const Shape& w, int64_t group, const Shape& spatial) {
  GRAFT_CHECK(dy.size() == spatial.size() + 2, "{}: dY must have rank {} ([N, M, spatial...]), got shape {}", what,
              spatial.size() + 2, shapeToString(dy));
  GRAFT_CHECK(w.size() == spatial.size() + 2, "{}: W must have rank {} ([M, C/group, k...]), got shape {}", what,
              spatial.size() + 2, shapeToString(w));
  int64_t c = 0;
  GRAFT_CHECK(!__builtin_mul_overflow(w[1], group, &c), "{}: channels {} x group {} overflow", what, w[1], group);
  Shape xs = {dy[0], c};
  xs.insert(xs.end(), spatial.begin(), spatial.end());
  return xs;
}

std::vector<ir::ValueType> inferGradInput(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                          const std::vector<const NDArray*>&) {
  GRAFT_CHECK(in.size() == 2, "{}: ConvGradInput takes dY and W, got {} inputs", n.describe(), in.size());
  int64_t group = groupOf(n);
  Shape spatial = inputSpatial(n);
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
  const ir::ValueType &dy = in[0], &w = in[1];
  if (dy.info.isStatic() && w.info.isStatic()) {
    Shape xs = gradInputXShape(wa.what, dy.info.shape(), w.info.shape(), group, spatial);
    checkDy(wa.what, dy.info.shape(), convOutShape(convShapeOf(wa, xs, w.info.shape(), group)));
    return {ir::ValueType::tensor(TensorInfo(dy.info.dataType(), xs))};
  }
  Dim c = dimOf(w, 1);
  int64_t channels = 0;
  if (c.known()) {
    GRAFT_CHECK(!__builtin_mul_overflow(c.value, group, &channels), "{}: channels {} x group {} overflow", wa.what,
                c.value, group);
    c = Dim(channels);
  } else {
    c = Dim();
  }
  std::vector<Dim> dims = {dimOf(dy, 0), c};
  dims.insert(dims.end(), spatial.begin(), spatial.end());
  return {ir::ValueType::tensor(TensorInfo(dy.info.dataType(), std::move(dims)))};
}

std::vector<ir::ValueType> inferGradWeight(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                           const std::vector<const NDArray*>&) {
  GRAFT_CHECK(in.size() == 2, "{}: ConvGradWeight takes X and dY, got {} inputs", n.describe(), in.size());
  GRAFT_CHECK(n.numOutputs() == 1 || n.numOutputs() == 2, "{}: ConvGradWeight has outputs dW and optionally dB, got {}",
              n.describe(), n.numOutputs());
  int64_t group = groupOf(n);
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
  Shape kernel = kernelOf(wa);
  const ir::ValueType &x = in[0], &dy = in[1];
  Dim m = dimOf(dy, 1), cg = dimOf(x, 1);
  if (cg.known()) {
    GRAFT_CHECK(cg.value % group == 0, "{}: the {} input channels do not divide into group {}", wa.what, cg.value,
                group);
    cg = Dim(cg.value / group);
  } else {
    cg = Dim();
  }
  if (x.info.isStatic() && dy.info.isStatic()) {
    GRAFT_CHECK(x.info.rank() == static_cast<int64_t>(kernel.size()) + 2 && dy.info.rank() == x.info.rank(),
                "{}: X and dY must have rank {} ([N, C, spatial...]) for kernel_shape {}, got {} and {}", wa.what,
                kernel.size() + 2, shapeToString(kernel), shapeToString(x.info.shape()),
                shapeToString(dy.info.shape()));
    Shape ws = {dy.info.shape()[1], cg.value};
    ws.insert(ws.end(), kernel.begin(), kernel.end());
    checkDy(wa.what, dy.info.shape(), convOutShape(convShapeOf(wa, x.info.shape(), ws, group)));
  }
  std::vector<Dim> dw = {m, cg};
  dw.insert(dw.end(), kernel.begin(), kernel.end());
  std::vector<ir::ValueType> out = {ir::ValueType::tensor(TensorInfo(x.info.dataType(), std::move(dw)))};
  if (n.numOutputs() == 2) out.push_back(ir::ValueType::tensor(TensorInfo(x.info.dataType(), std::vector<Dim>{m})));
  return out;
}

KernelFn convGradInputKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
  int64_t group = groupOf(n);
  Shape spatial = inputSpatial(n);
  std::string what = wa.what;
  return [=](KernelContext& k) {
    const NDArray& dy = k.input(0);
    const NDArray& w = k.input(1);
    GRAFT_CHECK(w.dtype() == dy.dtype(), "{}: W has data type {}, dY has {}", what, dtypeName(w.dtype()),
                dtypeName(dy.dtype()));
    Shape xs = gradInputXShape(what, dy.shape(), w.shape(), group, spatial);
    ConvShape s = convShapeOf(wa, xs, w.shape(), group);
    checkDy(what, dy.shape(), convOutShape(s));
    // dX is the transposed convolution of dY by W: the forward window with input and output
    // swapped (convTransposeDirect scatters each dY element over the taps it was read from).
    ConvShape t = s;
    t.inChannels = s.outChannels;
    t.outChannels = s.inChannels;
    std::swap(t.win.in, t.win.out);
    dispatch<kFloats>(dy.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      const T* dyp = dy.data<T>();
      const T* wp = w.data<T>();
      NDArray accArr(DataType::Double, xs);  // zero-filled
      double* acc = accArr.data<double>();
      convTransposeDirect<double>(
          t, [&](int64_t i) { return static_cast<double>(static_cast<C>(dyp[i])); },
          [&](int64_t i) { return static_cast<double>(static_cast<C>(wp[i])); }, acc);
      NDArray& dx = k.allocOutputUninit(0, dy.dtype(), xs);
      T* dxp = dx.data<T>();
      for (int64_t i = 0, e = dx.numel(); i < e; ++i) dxp[i] = static_cast<T>(static_cast<C>(acc[i]));
    });
  };
}

KernelFn convGradWeightKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  WindowAttrs wa = parseWindowAttrs(n, /*hasDilations=*/true, /*hasCeilMode=*/false);
  int64_t group = groupOf(n);
  Shape kernel = kernelOf(wa);
  std::string what = wa.what;
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& dy = k.input(1);
    GRAFT_CHECK(dy.dtype() == x.dtype(), "{}: dY has data type {}, X has {}", what, dtypeName(dy.dtype()),
                dtypeName(x.dtype()));
    GRAFT_CHECK(x.rank() >= 3 && dy.rank() == x.rank(), "{}: X [N, C, spatial...] has shape {}, dY {}", what,
                shapeToString(x.shape()), shapeToString(dy.shape()));
    GRAFT_CHECK(x.dim(1) % group == 0, "{}: the {} input channels do not divide into group {}", what, x.dim(1), group);
    Shape ws = {dy.dim(1), x.dim(1) / group};
    ws.insert(ws.end(), kernel.begin(), kernel.end());
    ConvShape s = convShapeOf(wa, x.shape(), ws, group);
    checkDy(what, dy.shape(), convOutShape(s));
    const Window& win = s.win;
    int64_t inBlock = shapeNumel(win.in), outBlock = shapeNumel(win.out), kBlock = shapeNumel(win.kernel);
    int64_t C = s.inChannels, M = s.outChannels, cg = C / group, mg = M / group;
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Cp = ComputeType<T>;
      const T* xp = x.data<T>();
      const T* dyp = dy.data<T>();
      auto ld = [](T v) { return static_cast<double>(static_cast<Cp>(v)); };
      NDArray dwAcc(DataType::Double, ws);  // zero-filled
      NDArray dbAcc(DataType::Double, {M});
      double* dw = dwAcc.data<double>();
      double* db = dbAcc.data<double>();
      // dW[m, c, k] = sum over n and output positions o of dY[n, m, o] * X[n, group(m) c, tap k of o].
      std::vector<std::pair<int64_t, int64_t>> taps;
      if (outBlock > 0 && s.batch > 0) {
        Odometer o(win.out);
        int64_t op = 0;
        do {
          windowTaps(win, o.idx, taps);
          for (int64_t b = 0; b < s.batch; ++b)
            for (int64_t oc = 0; oc < M; ++oc) {
              double g = ld(dyp[(b * M + oc) * outBlock + op]);
              db[oc] += g;
              for (int64_t ci = 0; ci < cg; ++ci) {
                const T* xb = xp + (b * C + (oc / mg) * cg + ci) * inBlock;
                double* wb = dw + (oc * cg + ci) * kBlock;
                for (const auto& [kOff, iOff] : taps) wb[kOff] += g * ld(xb[iOff]);
              }
            }
          ++op;
        } while (o.next());
      }
      NDArray& dwOut = k.allocOutputUninit(0, x.dtype(), ws);
      T* dwp = dwOut.data<T>();
      for (int64_t i = 0, e = dwOut.numel(); i < e; ++i) dwp[i] = static_cast<T>(static_cast<Cp>(dw[i]));
      if (k.numOutputs() > 1 && k.wantsOutput(1)) {
        NDArray& dbOut = k.allocOutputUninit(1, x.dtype(), {M});
        T* dbp = dbOut.data<T>();
        for (int64_t i = 0; i < M; ++i) dbp[i] = static_cast<T>(static_cast<Cp>(db[i]));
      }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(conv_grad) {
  // Conv's backward halves: as many multiply-adds as the forward, per element of dY.
  r.add("ConvGradInput", kGraftDomain)
      .setInfer(inferGradInput)
      .setReference(convGradInputKernel)
      .setCost([](const ir::Node& n) { return cost::convolution(n.input(0), n.input(1)); });
  r.add("ConvGradWeight", kGraftDomain)
      .setInfer(inferGradWeight)
      .setReference(convGradWeightKernel)
      .setCost([](const ir::Node& n) { return cost::convolution(n.input(1), n.output(0)); });
}

}  // namespace graft::ops
