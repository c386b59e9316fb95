// PopART's ai.graphcore ordering ops:
//   Bucketize(x, boundaries): for each x the INT32 index of its bucket among the sorted 1-D
//     boundaries, as torch.bucketize: right = 0 gives the first i with x <= boundaries[i],
//     right = 1 the first i with x < boundaries[i]. No gradient. Like torch, it binary-searches
//     and does not check that the boundaries are sorted (unsorted ones give a search's answer).
//   Sort(x): values and INT32 indices along `axis` (default -1), ascending unless `descending`;
//     ties keep their order (so `stable` is always honoured). The gradient of the values goes
//     back to the positions they came from (SortGrad, ai.graft).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

std::vector<ir::ValueType> inferBucketize(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                          const std::vector<const NDArray*>&) {
  GRAFT_CHECK(in.size() == 2 && in[0].known() && in[1].known(), "{}: takes 2 inputs (x, boundaries)", n.describe());
  GRAFT_CHECK(in[0].info.dataType() == in[1].info.dataType(), "{}: x is {} but boundaries are {}", n.describe(),
              dtypeName(in[0].info.dataType()), dtypeName(in[1].info.dataType()));
  GRAFT_CHECK(!in[1].info.hasShape() || in[1].info.rank() == 1, "{}: boundaries must be 1-D, got {}", n.describe(),
              in[1].info.str());
  TensorInfo out = in[0].info;
  out.setDataType(DataType::Int32);
  return {ir::ValueType::tensor(out)};
}

KernelFn bucketizeKernel(CompileContext& c) {
  bool right = c.node().attrInt("right", 0) != 0;
  std::string what = c.node().describe();
  return [right, what](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& b = k.input(1);
    dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      std::vector<C> bounds(static_cast<size_t>(b.numel()));
      for (size_t i = 0; i < bounds.size(); ++i) bounds[i] = static_cast<C>(b.data<T>()[i]);
      NDArray& y = k.allocOutputUninit(0, DataType::Int32, x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) {
        C v = static_cast<C>(x.data<T>()[i]);
        auto it = right ? std::upper_bound(bounds.begin(), bounds.end(), v)
                        : std::lower_bound(bounds.begin(), bounds.end(), v);
        bool nan = false;
        if constexpr (std::is_floating_point_v<C>) nan = std::isnan(v);
        // NaN is past every boundary, as in torch.
        y.data<int32_t>()[i] = static_cast<int32_t>(nan ? bounds.end() - bounds.begin() : it - bounds.begin());
      }
    });
  };
}

// Rows along `axis`: outer x len x inner.
struct AxisView {
  int64_t outer, len, inner;
};

AxisView axisView(const Shape& s, int64_t axis) {
  return {shapeProduct(s, 0, axis), s.empty() ? 1 : s[axis], shapeProduct(s, axis + 1, static_cast<int64_t>(s.size()))};
}

std::vector<ir::ValueType> inferSort(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                     const std::vector<const NDArray*>&) {
  GRAFT_CHECK(!in.empty() && in[0].known(), "{}: input 0 is required", n.describe());
  const TensorInfo& x = in[0].info;
  if (x.hasShape()) normalizeAxis(n.attrInt("axis", -1), x.rank(), n.describe());
  TensorInfo idx = x;
  idx.setDataType(DataType::Int32);
  return {in[0], ir::ValueType::tensor(idx)};
}

KernelFn sortKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", -1);
  bool descending = c.node().attrInt("descending", 0) != 0;
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() >= 1, "{}: cannot sort a scalar", what);
    int64_t axis = normalizeAxis(axisAttr, x.rank(), what);
    AxisView v = axisView(x.shape(), axis);
    dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      NDArray& vals = k.allocOutputUninit(0, x.dtype(), x.shape());
      NDArray& idx = k.allocOutputUninit(1, DataType::Int32, x.shape());
      std::vector<int32_t> order(static_cast<size_t>(v.len));
      const T* xp = x.data<T>();
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t in = 0; in < v.inner; ++in) {
          int64_t base = o * v.len * v.inner + in;
          auto at = [&](int32_t j) { return static_cast<C>(xp[base + j * v.inner]); };
          std::iota(order.begin(), order.end(), 0);
          // NaNs go last ascending and first descending, as torch.sort puts them.
          std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            C va = at(a), vb = at(b);
            if constexpr (std::is_floating_point_v<C>) {
              if (std::isnan(va) || std::isnan(vb))
                return descending ? std::isnan(va) && !std::isnan(vb) : !std::isnan(va) && std::isnan(vb);
            }
            return descending ? va > vb : va < vb;
          });
          for (int64_t j = 0; j < v.len; ++j) {
            vals.data<T>()[base + j * v.inner] = xp[base + order[j] * v.inner];
            idx.data<int32_t>()[base + j * v.inner] = order[j];
          }
        }
    });
  };
}

// SortGrad(dvalues, indices): dx[index[j]] = dvalues[j] along `axis`.
KernelFn sortGradKernel(CompileContext& c) {
  int64_t axisAttr = c.node().attrInt("axis", -1);
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& dy = k.input(0);
    const NDArray& idx = k.input(1);
    int64_t axis = normalizeAxis(axisAttr, dy.rank(), what);
    AxisView v = axisView(dy.shape(), axis);
    dispatch<kFloats>(dy.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& dx = k.allocOutput(0, dy.dtype(), dy.shape());
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t in = 0; in < v.inner; ++in) {
          int64_t base = o * v.len * v.inner + in;
          for (int64_t j = 0; j < v.len; ++j)
            dx.data<T>()[base + idx.data<int32_t>()[base + j * v.inner] * v.inner] = dy.data<T>()[base + j * v.inner];
        }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(graphcore_sort) {
  r.add("Bucketize", kGraphcoreDomain).setReference(bucketizeKernel).setInfer(inferBucketize);
  r.add("Sort", kGraphcoreDomain).setReference(sortKernel).setInfer(inferSort).setVjp([](GradBuilder& g) {
    ir::Attributes a;
    a.set("axis", g.node().attrInt("axis", -1));
    g.setDx(0, g.op("SortGrad", {g.dy(0), g.out(1)}, a, kGraftDomain));
  });
  r.add("SortGrad", kGraftDomain)
      .setReference(sortGradKernel)
      .noGradient({1})
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{in.at(0)};
      });
}

}  // namespace graft::ops
