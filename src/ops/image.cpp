// Image geometry ops of opsets 18-20: Col2Im (the adjoint of im2col), CenterCropPad and
// AffineGrid (the sampling grid GridSample reads).
#include <cmath>

#include "ops/copy_util.hpp"
#include "ops/dtype_dispatch.hpp"
#include "ops/fallback_infer.hpp"
#include "ops/index_util.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// ---- Col2Im --------------------------------------------------------------------------------------

// The sliding-block geometry of Col2Im: for each (kernel offset k, block l) the flat image
// position it covers, or -1 inside the padding. Checks the attributes and shapes.
struct Col2ImGeometry {
  std::vector<int64_t> image;
  int64_t kernelSize = 1, L = 1, imageSize = 1;
  std::vector<int64_t> position;  ///< [kernelSize * L]
};

struct Col2ImAttrs {
  std::vector<int64_t> strides, dilations, pads;  ///< empty: the defaults (1s, 1s, 0s)
  explicit Col2ImAttrs(const ir::Node& n)
      : strides(n.attrInts("strides", {})), dilations(n.attrInts("dilations", {})), pads(n.attrInts("pads", {})) {}
};

Col2ImGeometry col2imGeometry(const Col2ImAttrs& a, const std::vector<int64_t>& image,
                              const std::vector<int64_t>& block, const std::string& what) {
  size_t nd = image.size();
  GRAFT_CHECK(nd >= 1 && block.size() == nd, "{}: image_shape ({} values) and block_shape ({} values) must match", what,
              nd, block.size());
  std::vector<int64_t> strides = a.strides.empty() ? std::vector<int64_t>(nd, 1) : a.strides;
  std::vector<int64_t> dil = a.dilations.empty() ? std::vector<int64_t>(nd, 1) : a.dilations;
  std::vector<int64_t> pads = a.pads.empty() ? std::vector<int64_t>(2 * nd, 0) : a.pads;
  GRAFT_CHECK(strides.size() == nd && dil.size() == nd && pads.size() == 2 * nd,
              "{}: strides and dilations need {} values and pads {}, got {}, {} and {}", what, nd, 2 * nd,
              strides.size(), dil.size(), pads.size());
  Col2ImGeometry geo;
  geo.image = image;
  std::vector<int64_t> blocks(nd);
  for (size_t d = 0; d < nd; ++d) {
    GRAFT_CHECK(block[d] >= 1 && image[d] >= 1 && strides[d] >= 1 && dil[d] >= 1,
                "{}: image_shape, block_shape, strides and dilations must be positive", what);
    geo.kernelSize *= block[d];
    geo.imageSize *= image[d];
    blocks[d] = (image[d] + pads[d] + pads[d + nd] - dil[d] * (block[d] - 1) - 1) / strides[d] + 1;
    GRAFT_CHECK(blocks[d] >= 1, "{}: no sliding block fits axis {} of the image", what, d);
    geo.L *= blocks[d];
  }
  geo.position.assign(static_cast<size_t>(geo.kernelSize * geo.L), -1);
  std::vector<int64_t> kIdx(nd), bIdx(nd);
  for (int64_t kk = 0; kk < geo.kernelSize; ++kk) {
    for (int64_t d = static_cast<int64_t>(nd) - 1, r = kk; d >= 0; --d) kIdx[d] = r % block[d], r /= block[d];
    for (int64_t l = 0; l < geo.L; ++l) {
      for (int64_t d = static_cast<int64_t>(nd) - 1, r = l; d >= 0; --d) bIdx[d] = r % blocks[d], r /= blocks[d];
      int64_t at = 0;
      bool inside = true;
      for (size_t d = 0; d < nd && inside; ++d) {
        int64_t p = bIdx[d] * strides[d] - pads[d] + kIdx[d] * dil[d];
        inside = p >= 0 && p < image[d];
        at = at * image[d] + p;
      }
      if (inside) geo.position[kk * geo.L + l] = at;
    }
  }
  return geo;
}

// input [N, C * prod(block_shape), L] -> output [N, C, image_shape...]: every column element adds
// into the image position its block and kernel offset point at (positions in the padding drop).
KernelFn col2imKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  Col2ImAttrs attrs(n);
  return [attrs, what](KernelContext& k) {
    const NDArray& x = k.input(0);
    Col2ImGeometry geo = col2imGeometry(attrs, readIndexTensor(k.input(1), what, "image_shape"),
                                        readIndexTensor(k.input(2), what, "block_shape"), what);
    GRAFT_CHECK(x.rank() == 3, "{}: input must be [N, C * prod(block_shape), L], got {}", what,
                shapeToString(x.shape()));
    GRAFT_CHECK(x.dim(1) % geo.kernelSize == 0,
                "{}: input dimension 1 ({}) must be a multiple of prod(block_shape) = {}", what, x.dim(1),
                geo.kernelSize);
    GRAFT_CHECK(x.dim(2) == geo.L, "{}: input dimension 2 must be the number of sliding blocks {}, got {}", what, geo.L,
                x.dim(2));
    int64_t N = x.dim(0), C = x.dim(1) / geo.kernelSize, KL = geo.kernelSize * geo.L;
    auto xs = readAsDoubles(x, what);
    std::vector<double> ys(static_cast<size_t>(N * C * geo.imageSize), 0.0);
    for (int64_t nc = 0; nc < N * C; ++nc)
      for (int64_t i = 0; i < KL; ++i)
        if (geo.position[i] >= 0) ys[nc * geo.imageSize + geo.position[i]] += xs[nc * KL + i];
    Shape out{N, C};
    out.insert(out.end(), geo.image.begin(), geo.image.end());
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), out, what));
  };
}

// ---- CenterCropPad -------------------------------------------------------------------------------

// Each named axis is cropped or zero-padded to its target size around the centre; an odd
// difference puts the extra element at the end.
KernelFn centerCropPadKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  bool hasAxes = n.attrs().has("axes");
  std::vector<int64_t> axesA = n.attrInts("axes", {});
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    auto target = readIndexTensor(k.input(1), what, "shape");
    std::vector<int64_t> axes;
    if (hasAxes) {
      axes = normalizeAxes(axesA, x.rank(), what);
    } else {
      for (int64_t d = 0; d < x.rank(); ++d) axes.push_back(d);
    }
    GRAFT_CHECK(target.size() == axes.size(), "{}: shape has {} values for {} axes", what, target.size(), axes.size());
    Shape out = x.shape();
    // Per output axis: the input index of output index 0 (negative inside the padding).
    std::vector<int64_t> shift(x.rank(), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i], t = target[i], s = x.dim(a);
      GRAFT_CHECK(t >= 0, "{}: target size {} for axis {} is negative", what, t, a);
      out[a] = t;
      shift[a] = t < s ? (s - t) / 2 : -((t - s) / 2);
    }
    NDArray& y = k.allocOutput(0, x.dtype(), out);
    if (y.numel() == 0) return;
    // Output element i copies input element index[i]; -1 (padding) leaves the zero.
    std::vector<int64_t> index(static_cast<size_t>(y.numel()), -1);
    std::vector<int64_t> xStrides = stridesOf(x.shape());
    MultiIndex mi(out);
    int64_t o = 0;
    do {
      int64_t src = 0;
      bool inside = true;
      for (int64_t d = 0; d < x.rank(); ++d) {
        int64_t p = mi.idx[d] + shift[d];
        if (p < 0 || p >= x.dim(d)) inside = false;
        src += p * xStrides[d];
      }
      if (inside) index[o] = src;
      ++o;
    } while (mi.next());
    gatherFlat(x, index, y);
  };
}

// ---- AffineGrid ----------------------------------------------------------------------------------

// theta [N, 2, 3] with size [N, C, H, W] -> grid [N, H, W, 2] of (x, y); theta [N, 3, 4] with
// size [N, C, D, H, W] -> grid [N, D, H, W, 3] of (x, y, z). Base coordinates span [-1, 1]: at
// the pixel centres, or (align_corners) at the corner pixels.
KernelFn affineGridKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  bool alignCorners = n.attrInt("align_corners", 0) != 0;
  return [=](KernelContext& k) {
    const NDArray& theta = k.input(0);
    auto size = readIndexTensor(k.input(1), what, "size");
    GRAFT_CHECK(size.size() == 4 || size.size() == 5, "{}: size must be [N, C, H, W] or [N, C, D, H, W], got {} values",
                what, size.size());
    int64_t sd = static_cast<int64_t>(size.size()) - 2;  // spatial dims: 2 or 3
    int64_t N = size[0];
    GRAFT_CHECK(theta.rank() == 3 && theta.dim(0) == N && theta.dim(1) == sd && theta.dim(2) == sd + 1,
                "{}: theta must have shape [{}, {}, {}], got {}", what, N, sd, sd + 1, shapeToString(theta.shape()));
    std::vector<int64_t> dims(size.begin() + 2, size.end());  // (H, W) or (D, H, W)
    for (int64_t d : dims) GRAFT_CHECK(d >= 0, "{}: size values must be >= 0", what);
    auto base = [&](int64_t i, int64_t len) {
      if (alignCorners) return len == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1);
      return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len);
    };
    auto th = readAsDoubles(theta, what);
    int64_t points = shapeProduct(dims, 0, sd);
    std::vector<double> g(static_cast<size_t>(N * points * sd));
    std::vector<double> coord(static_cast<size_t>(sd + 1), 1.0);
    for (int64_t b = 0; b < N; ++b)
      for (int64_t p = 0; p < points; ++p) {
        // coord = (x, y[, z], 1): x runs along the last (width) axis.
        for (int64_t d = sd - 1, r = p; d >= 0; --d) {
          coord[sd - 1 - d] = base(r % dims[d], dims[d]);
          r /= dims[d];
        }
        for (int64_t row = 0; row < sd; ++row) {
          double acc = 0;
          for (int64_t j = 0; j <= sd; ++j) acc += th[(b * sd + row) * (sd + 1) + j] * coord[j];
          g[(b * points + p) * sd + row] = acc;
        }
      }
    Shape out{N};
    out.insert(out.end(), dims.begin(), dims.end());
    out.push_back(sd);
    k.setOutput(0, arrayFromDoubles(g, theta.dtype(), out, what));
  };
}

}  // namespace

GRAFT_REGISTER_OPS(image) {
  r.add("Col2Im").setReference(col2imKernel).noGradient({1, 2});
  // Until the linked onnx has its schema (opset 18): the shape from constant image and block shapes.
  setFallbackInfer(
      "", "Col2Im",
      [](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>& consts) {
        DataType dt = in.at(0).info.dataType();
        std::vector<ir::ValueType> unknown{ir::ValueType::tensor(TensorInfo::unranked(dt))};
        if (consts.size() < 3 || !consts[1] || !consts[2] || !in[0].info.isStatic() || in[0].info.rank() != 3)
          return unknown;
        auto image = toInt64Vector(*consts[1]), block = toInt64Vector(*consts[2]);
        int64_t k = shapeProduct(block, 0, static_cast<int64_t>(block.size()));
        Shape x = in[0].info.shape();
        if (k <= 0 || x[1] % k != 0) return unknown;
        Shape out{x[0], x[1] / k};
        out.insert(out.end(), image.begin(), image.end());
        return std::vector<ir::ValueType>{ir::ValueType::tensor(TensorInfo(dt, out))};
      });
  r.add("CenterCropPad").setReference(centerCropPadKernel).noGradient({1});
  setFallbackInfer(
      "", "CenterCropPad",
      [](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>& consts) {
        DataType dt = in.at(0).info.dataType();
        std::vector<ir::ValueType> unknown{ir::ValueType::tensor(TensorInfo::unranked(dt))};
        if (consts.size() < 2 || !consts[1] || !in[0].info.isStatic()) return unknown;
        Shape out = in[0].info.shape();
        auto target = toInt64Vector(*consts[1]);
        std::vector<int64_t> axes;
        if (n.attrs().has("axes")) {
          axes = normalizeAxes(n.attrInts("axes"), static_cast<int64_t>(out.size()), n.describe());
        } else {
          for (size_t d = 0; d < out.size(); ++d) axes.push_back(static_cast<int64_t>(d));
        }
        if (axes.size() != target.size()) return unknown;
        for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = target[i];
        return std::vector<ir::ValueType>{ir::ValueType::tensor(TensorInfo(dt, out))};
      });
  r.add("AffineGrid").setReference(affineGridKernel).noGradient({1});
  // Until the linked onnx has its schema (opset 20): the grid's shape from a constant size.
  setFallbackInfer(
      "", "AffineGrid",
      [](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>& consts) {
        DataType dt = in.at(0).info.dataType();
        if (consts.size() < 2 || !consts[1])
          return std::vector<ir::ValueType>{ir::ValueType::tensor(TensorInfo::unranked(dt))};
        auto size = toInt64Vector(*consts[1]);
        Shape out{size.at(0)};
        out.insert(out.end(), size.begin() + 2, size.end());
        out.push_back(static_cast<int64_t>(size.size()) - 2);
        return std::vector<ir::ValueType>{ir::ValueType::tensor(TensorInfo(dt, out))};
      });
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"
#include "ops/grad_util.hpp"

namespace graft::ops {

GRAFT_REGISTER_OPS(image_vjp) {
  // Cropping around the centre and padding around it are each other's adjoints with the same
  // offsets (both put the odd element at the end): dX = CenterCropPad(dY, X's sizes on the axes).
  r.add("CenterCropPad").setVjp([](GradBuilder& g) {
    ir::Tensor* x = g.in(0);
    int64_t rank = gradutil::rankOf(g, x);
    std::vector<int64_t> axes;
    if (g.node().attrs().has("axes")) {
      for (int64_t a : g.node().attrInts("axes")) axes.push_back(gradutil::normAxis(g, a, rank));
    } else {
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    ir::Tensor* sizes = g.op("Gather", {g.op("Shape", {x}), g.int64s(axes)});
    g.setDx(0, g.op("CenterCropPad", {g.dy(), sizes}, g.node().attrs()));
  });
  // Col2Im is linear; its adjoint is im2col: each column element reads the image position it
  // added into (0 for the padding). As forward ops: the image flattened per (n, c), one zero
  // appended, and a Gather by the positions (the padding reads the zero).
  r.add("Col2Im").setVjp([](GradBuilder& g) {
    std::string what = g.node().describe();
    auto image = gradutil::constantInts(g.in(1)), block = gradutil::constantInts(g.in(2));
    GRAFT_CHECK(image && block, "{}: the gradient needs constant image_shape and block_shape", what);
    Col2ImGeometry geo = col2imGeometry(Col2ImAttrs(g.node()), *image, *block, what);
    ir::Tensor* flat = g.op("Reshape", {g.dy(), g.int64s({0, 0, -1})});      // [N, C, P]
    ir::Tensor* padded = g.op("Pad", {flat, g.int64s({0, 0, 0, 0, 0, 1})});  // [N, C, P + 1]
    std::vector<int64_t> index = geo.position;
    for (int64_t& i : index)
      if (i < 0) i = geo.imageSize;
    ir::Attributes axis;
    axis.set("axis", int64_t{2});
    ir::Tensor* cols = g.op("Gather", {padded, g.int64s(index)}, axis);  // [N, C, K * L]
    g.setDx(0, g.op("Reshape", {cols, g.int64s({0, -1, geo.L})}));
  });
  // AffineGrid is linear in theta: dtheta[n] = sum over points of dgrid[n, p] (x) coord_p. The base
  // coordinates come from AffineGrid itself, run on the identity transform.
  r.add("AffineGrid").setVjp([](GradBuilder& g) {
    ir::Tensor* theta = g.in(0);
    GRAFT_CHECK(theta->info().isStatic() && theta->info().rank() == 3, "{}: the gradient needs theta's static shape",
                g.node().describe());
    int64_t N = theta->info().dims()[0].value, sd = theta->info().dims()[1].value;
    std::vector<double> ev(static_cast<size_t>(N * sd * (sd + 1)), 0.0);
    for (int64_t b = 0; b < N; ++b)
      for (int64_t i = 0; i < sd; ++i) ev[(b * sd + i) * (sd + 1) + i] = 1.0;
    NDArray eye = arrayFromDoubles(ev, theta->info().dataType(), {N, sd, sd + 1}, g.node().describe());
    // grid[n, p, r] = sum_j theta[n, r, j] coord[p, j], coord = (base_p, 1): dtheta[n, r, :sd] =
    // dgrid[n, :, r]^T base, dtheta[n, r, sd] = sum_p dgrid[n, p, r]. AffineGrid of the identity
    // transform gives the base coordinates.
    ir::Tensor* base =
        g.op("Reshape", {g.op("AffineGrid", {g.constant(eye), g.in(1)}, g.node().attrs()), g.int64s({N, -1, sd})});
    ir::Attributes perm;
    perm.set("perm", std::vector<int64_t>{0, 2, 1});
    ir::Tensor* dgT = g.op("Transpose", {g.op("Reshape", {g.dy(), g.int64s({N, -1, sd})})}, perm);  // [N, sd, P]
    ir::Attributes keep;
    keep.set("keepdims", int64_t{1});
    ir::Tensor* dShift = g.op("ReduceSum", {dgT, g.int64s({2})}, keep);  // [N, sd, 1]
    ir::Attributes axis;
    axis.set("axis", int64_t{2});
    g.setDx(0, g.op("Concat", {g.op("MatMul", {dgT, base}), dShift}, axis));
  });
}

}  // namespace graft::ops
