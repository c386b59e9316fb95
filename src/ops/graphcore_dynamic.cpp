// PopART's dynamic slice updates (ai.graphcore), at offsets known only at run time:
//   DynamicUpdate(x, offsets, update): x with the region starting at `offsets` (one per axis in
//     `axes`, extents `sizes`, update's shape) replaced by update.
//   DynamicAdd(x, offsets, update): x with update added to that region.
//   DynamicZero(x, offsets[, like]): x with the region (like's shape, or without like x's shape with
//     `sizes` along `axes`) set to zero.
//   SequenceSlice(source, dest, N, sourceOffset, destOffset): dest with, for each i, the N[i] rows
//     (axis 0) of source from sourceOffset[i] copied to destOffset[i]; with zeroUnused the rows
//     of dest written by no i are zero.
// Offsets are integers; a region that would leave x is clamped to end at x's edge, as PopART's
// dynamic slices do. Gradients: the region's part of dy goes to update (a Gather per axis); dx is
// dy with the region zeroed (DynamicUpdate, DynamicZero) or dy (DynamicAdd).
#include <algorithm>

#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/graphcore_util.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

enum class Mode { Update, Add, Zero };

struct DynamicAttrs {
  std::vector<int64_t> axes, sizes;
  std::string what;
};

DynamicAttrs dynamicAttrs(const ir::Node& n) {
  DynamicAttrs a{n.attrInts("axes"), n.attrInts("sizes"), n.describe()};
  GRAFT_CHECK(a.axes.size() == a.sizes.size(), "{}: {} axes but {} sizes", a.what, a.axes.size(), a.sizes.size());
  return a;
}

std::vector<ir::ValueType> inferDynamic(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                        const std::vector<const NDArray*>&) {
  // DynamicZero may leave out its third input: the region's extents are then `sizes`.
  bool zero = n.type() == "DynamicZero";
  GRAFT_CHECK((in.size() == 3 || (zero && in.size() == 2)) && in[0].known() && in[1].known() &&
                  (in.size() == 2 || in[2].known()),
              "{}: takes 3 inputs (tensor, offsets, {}), got {}", n.describe(), zero ? "like (optional)" : "update",
              in.size());
  GRAFT_CHECK(isInteger(in[1].info.dataType()), "{}: offsets must be integers, got {}", n.describe(),
              dtypeName(in[1].info.dataType()));
  dynamicAttrs(n);
  return {in[0]};
}

template <Mode M>
KernelFn dynamicKernel(CompileContext& c) {
  DynamicAttrs a = dynamicAttrs(c.node());
  return [a](KernelContext& k) {
    const NDArray& x = k.input(0);
    std::vector<int64_t> off = anyIntToInt64Vector(k.input(1));
    const NDArray* upd = k.hasInput(2) ? &k.input(2) : nullptr;
    GRAFT_CHECK(off.size() == a.axes.size(), "{}: {} offsets for {} axes", a.what, off.size(), a.axes.size());
    // The region: upd's shape (without upd: x's shape with `sizes` along `axes`), placed at the
    // (clamped) offsets along `axes`, 0 elsewhere.
    const Shape& xs = x.shape();
    Shape region = xs;
    if (upd) {
      GRAFT_CHECK(upd->rank() == x.rank(), "{}: update has rank {}, the tensor {}", a.what, upd->rank(), x.rank());
      region = upd->shape();
    } else {
      for (size_t i = 0; i < a.axes.size(); ++i) region[normalizeAxis(a.axes[i], x.rank(), a.what)] = a.sizes[i];
    }
    std::vector<int64_t> start(xs.size(), 0);
    for (size_t i = 0; i < a.axes.size(); ++i) {
      int64_t ax = normalizeAxis(a.axes[i], x.rank(), a.what);
      GRAFT_CHECK(region[ax] <= xs[ax], "{}: the region of size {} does not fit axis {} of size {}", a.what, region[ax],
                  ax, xs[ax]);
      start[ax] = std::clamp<int64_t>(off[i], 0, xs[ax] - region[ax]);
    }
    for (size_t d = 0; d < xs.size(); ++d)
      GRAFT_CHECK(start[d] + region[d] <= xs[d], "{}: update shape {} does not fit {}", a.what, shapeToString(region),
                  shapeToString(xs));
    int64_t regionNumel = shapeNumel(region);
    dispatch<kNumeric>(x.dtype(), a.what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      NDArray& y = k.allocOutputUninit(0, x.dtype(), xs);
      std::copy(x.data<T>(), x.data<T>() + x.numel(), y.data<T>());
      auto xst = stridesOf(xs);
      std::vector<int64_t> idx(xs.size(), 0);
      for (int64_t e = 0; e < regionNumel; ++e) {
        int64_t o = 0;
        for (size_t d = 0; d < xs.size(); ++d) o += (start[d] + idx[d]) * xst[d];
        T* p = y.data<T>() + o;
        if constexpr (M == Mode::Update)
          *p = upd->data<T>()[e];
        else if constexpr (M == Mode::Add)
          *p = static_cast<T>(static_cast<C>(*p) + static_cast<C>(upd->data<T>()[e]));
        else
          *p = static_cast<T>(C(0));
        for (int64_t d = static_cast<int64_t>(xs.size()) - 1; d >= 0; --d) {
          if (++idx[d] < region[d]) break;
          idx[d] = 0;
        }
      }
    });
  };
}

ir::Attributes oneAttr(const std::string& name, ir::AttrValue v) {
  ir::Attributes a;
  a.set(name, std::move(v));
  return a;
}

// The region of dy that update took: one Gather per axis at offset + [0, size).
ir::Tensor* regionOf(GradBuilder& g, ir::Tensor* dy) {
  DynamicAttrs a = dynamicAttrs(g.node());
  ir::Tensor* offsets = g.op("Cast", {g.in(1)}, oneAttr("to", static_cast<int64_t>(DataType::Int64)));
  ir::Tensor* out = dy;
  for (size_t i = 0; i < a.axes.size(); ++i) {
    ir::Tensor* start = g.op("Gather", {offsets, g.int64s({static_cast<int64_t>(i)})}, oneAttr("axis", int64_t{0}));
    std::vector<int64_t> range(static_cast<size_t>(a.sizes[i]));
    for (size_t j = 0; j < range.size(); ++j) range[j] = static_cast<int64_t>(j);
    ir::Tensor* index = g.add(start, g.int64s(range));
    out = g.op("Gather", {out, index}, oneAttr("axis", a.axes[i]));
  }
  return out;
}

KernelFn sequenceSliceKernel(CompileContext& c) {
  bool zeroUnused = c.node().attrInt("zeroUnused", 0) != 0;
  std::string what = c.node().describe();
  return [zeroUnused, what](KernelContext& k) {
    const NDArray& src = k.input(0);
    const NDArray& dst = k.input(1);
    std::vector<int64_t> n = anyIntToInt64Vector(k.input(2)), so = anyIntToInt64Vector(k.input(3)),
                         dof = anyIntToInt64Vector(k.input(4));
    GRAFT_CHECK(n.size() == so.size() && n.size() == dof.size(),
                "{}: N, sourceOffset and destOffset have {}, {} and {} "
                "entries; they must be equal",
                what, n.size(), so.size(), dof.size());
    GRAFT_CHECK(src.rank() >= 1 && dst.rank() == src.rank() && src.dtype() == dst.dtype(),
                "{}: source {} and destination {} must have one type and rank", what, shapeToString(src.shape()),
                shapeToString(dst.shape()));
    int64_t row = shapeProduct(src.shape(), 1, src.rank());
    GRAFT_CHECK(row == shapeProduct(dst.shape(), 1, dst.rank()), "{}: source and destination rows differ", what);
    dispatch<kNumeric>(dst.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& y = k.allocOutputUninit(0, dst.dtype(), dst.shape());
      std::vector<bool> written(static_cast<size_t>(dst.dim(0)), false);
      std::copy(dst.data<T>(), dst.data<T>() + dst.numel(), y.data<T>());
      for (size_t i = 0; i < n.size(); ++i)
        for (int64_t r = 0; r < n[i]; ++r) {
          int64_t s = so[i] + r, d = dof[i] + r;
          if (s < 0 || s >= src.dim(0) || d < 0 || d >= dst.dim(0)) continue;  // PopART skips rows outside
          std::copy(src.data<T>() + s * row, src.data<T>() + (s + 1) * row, y.data<T>() + d * row);
          written[static_cast<size_t>(d)] = true;
        }
      if (zeroUnused)
        for (int64_t d = 0; d < dst.dim(0); ++d)
          if (!written[static_cast<size_t>(d)]) std::fill(y.data<T>() + d * row, y.data<T>() + (d + 1) * row, T{});
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(graphcore_dynamic) {
  const char* d = kGraphcoreDomain;
  r.add("DynamicUpdate", d)
      .setReference(dynamicKernel<Mode::Update>)
      .setInfer(inferDynamic)
      .noGradient({1})
      .setVjp([](GradBuilder& g) {
        if (g.wants(0)) g.setDx(0, g.op("DynamicZero", {g.dy(), g.in(1), g.in(2)}, g.node().attrs(), kGraphcoreDomain));
        if (g.wants(2)) g.setDx(2, g.reshapeLike(regionOf(g, g.dy()), g.in(2)));
      });
  r.add("DynamicAdd", d)
      .setReference(dynamicKernel<Mode::Add>)
      .setInfer(inferDynamic)
      .noGradient({1})
      .setVjp([](GradBuilder& g) {
        if (g.wants(0)) g.setDx(0, g.dy());
        if (g.wants(2)) g.setDx(2, g.reshapeLike(regionOf(g, g.dy()), g.in(2)));
      });
  r.add("DynamicZero", d)
      .setReference(dynamicKernel<Mode::Zero>)
      .setInfer(inferDynamic)
      .noGradient({1, 2})
      .setVjp([](GradBuilder& g) {
        std::vector<ir::Tensor*> ins{g.dy(), g.in(1)};
        if (g.node().numInputs() > 2 && g.node().input(2)) ins.push_back(g.in(2));
        g.setDx(0, g.op("DynamicZero", ins, g.node().attrs(), kGraphcoreDomain));
      });
  r.add("SequenceSlice", d)
      .setReference(sequenceSliceKernel)
      .noGradient({2, 3, 4})
      .setInfer([](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        GRAFT_CHECK(in.size() == 5 && in[1].known(),
                    "{}: takes 5 inputs (source, destination, N, sourceOffset, "
                    "destOffset)",
                    n.describe());
        return std::vector<ir::ValueType>{in[1]};
      })
      .setVjp([](GradBuilder& g) {
        ir::Attributes keep;
        keep.set("zeroUnused", int64_t{0});
        ir::Attributes zero;
        zero.set("zeroUnused", int64_t{1});
        // The source's rows went to the destination's: copy dy's rows back (everything else 0).
        if (g.wants(0))
          g.setDx(0, g.op("SequenceSlice", {g.dy(), g.zerosLike(g.in(0)), g.in(2), g.in(4), g.in(3)}, zero,
                          kGraphcoreDomain));
        // The destination keeps its unwritten rows (unless zeroUnused): dy with the written rows zeroed.
        if (g.wants(1)) {
          if (g.node().attrInt("zeroUnused", 0) != 0)
            g.setDx(1, g.zerosLike(g.in(1)));
          else
            g.setDx(1, g.op("SequenceSlice", {g.zerosLike(g.in(0)), g.dy(), g.in(2), g.in(3), g.in(4)}, keep,
                            kGraphcoreDomain));
        }
      });
}

}  // namespace graft::ops
