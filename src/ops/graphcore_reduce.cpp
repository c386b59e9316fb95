// PopART's ai.graphcore reductions: ReduceMedian (values and INT32 indices over `axes`, all axes
// when absent, none when an empty list, as PopART; `keepdims` 1 by default). Of an even count the lower median is
// taken, as torch does. The index is the position within the reduced axes, flattened row-major (so over one axis it is
// torch.median's index). ReduceMedianGrad (ai.graft) scatters the values' gradient to the
// medians' positions: PopART's gradient of the median.
#include <algorithm>
#include <cmath>

#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// The attributes, read once at compile time.
struct MedianAttrs {
  std::vector<int64_t> axes;
  bool hasAxes = false;  // no 'axes': all axes; an empty 'axes': none (PopART)
  bool keepdims = true;
  std::string what;
};

MedianAttrs medianAttrs(const ir::Node& n) {
  bool has = n.attrs().has("axes");
  return {has ? n.attrInts("axes") : std::vector<int64_t>{}, has, n.attrInt("keepdims", 1) != 0, n.describe()};
}

// Which axes of a rank-`rank` input are reduced.
std::vector<bool> reducedAxes(const MedianAttrs& a, int64_t rank) {
  std::vector<bool> red(rank, true);
  if (!a.hasAxes) return red;
  std::vector<int64_t> axes = normalizeAxes(a.axes, rank, a.what);
  std::fill(red.begin(), red.end(), false);
  for (int64_t a : axes) red[a] = true;
  return red;
}

struct MedianPlan {
  Shape outShape;
  std::vector<int64_t> groupStart;    // per output element: the input offset of its group
  std::vector<int64_t> groupOffsets;  // offsets within a group, row-major over the reduced axes
};

MedianPlan planMedian(const MedianAttrs& a, const Shape& in) {
  bool keep = a.keepdims;
  std::vector<bool> red = reducedAxes(a, static_cast<int64_t>(in.size()));
  auto st = stridesOf(in);
  MedianPlan p;
  Shape kept, reduced;
  std::vector<int64_t> keptSt, redSt;
  for (size_t d = 0; d < in.size(); ++d) {
    if (red[d]) {
      reduced.push_back(in[d]);
      redSt.push_back(st[d]);
      if (keep) p.outShape.push_back(1);
    } else {
      kept.push_back(in[d]);
      keptSt.push_back(st[d]);
      p.outShape.push_back(in[d]);
    }
  }
  p.groupStart = offsetsOf(kept, keptSt);
  p.groupOffsets = offsetsOf(reduced, redSt);
  return p;
}

std::vector<ir::ValueType> inferMedian(const ir::Node& n, const std::vector<ir::ValueType>& in,
                                       const std::vector<const NDArray*>&) {
  GRAFT_CHECK(!in.empty() && in[0].known(), "{}: input 0 is required", n.describe());
  const TensorInfo& x = in[0].info;
  if (!x.hasShape())
    return {ir::ValueType::tensor(TensorInfo::unranked(x.dataType())),
            ir::ValueType::tensor(TensorInfo::unranked(DataType::Int32))};
  MedianAttrs a = medianAttrs(n);
  bool keep = a.keepdims;
  std::vector<bool> red = reducedAxes(a, x.rank());
  std::vector<Dim> dims;
  for (size_t d = 0; d < x.dims().size(); ++d) {
    if (!red[d])
      dims.push_back(x.dims()[d]);
    else if (keep)
      dims.push_back(Dim(1));
  }
  return {ir::ValueType::tensor(TensorInfo(x.dataType(), dims)),
          ir::ValueType::tensor(TensorInfo(DataType::Int32, dims))};
}

KernelFn medianKernel(CompileContext& c) {
  MedianAttrs a = medianAttrs(c.node());
  std::string what = a.what;
  return [a, what](KernelContext& k) {
    const NDArray& x = k.input(0);
    MedianPlan p = planMedian(a, x.shape());
    GRAFT_CHECK(x.numel() == 0 || !p.groupOffsets.empty(), "{}: cannot take the median of an empty axis", what);
    dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      NDArray& vals = k.allocOutputUninit(0, x.dtype(), p.outShape);
      NDArray& idx = k.allocOutputUninit(1, DataType::Int32, p.outShape);
      const T* xp = x.data<T>();
      std::vector<std::pair<C, int32_t>> group(p.groupOffsets.size());
      for (size_t o = 0; o < p.groupStart.size(); ++o) {
        for (size_t j = 0; j < group.size(); ++j)
          group[j] = {static_cast<C>(xp[p.groupStart[o] + p.groupOffsets[j]]), static_cast<int32_t>(j)};
        // NaNs sort last; ties keep the lower index.
        auto less = [](const auto& a, const auto& b) {
          if constexpr (std::is_floating_point_v<C>) {
            if (std::isnan(a.first) || std::isnan(b.first)) return !std::isnan(a.first) && std::isnan(b.first);
          }
          return a.first < b.first || (a.first == b.first && a.second < b.second);
        };
        size_t m = (group.size() - 1) / 2;
        std::nth_element(group.begin(), group.begin() + static_cast<std::ptrdiff_t>(m), group.end(), less);
        vals.data<T>()[o] = static_cast<T>(group[m].first);
        idx.data<int32_t>()[o] = group[m].second;
      }
    });
  };
}

// ReduceMedianGrad(dy, indices, x): zeros shaped like x with dy at each median's position.
KernelFn medianGradKernel(CompileContext& c) {
  MedianAttrs a = medianAttrs(c.node());
  std::string what = a.what;
  return [a, what](KernelContext& k) {
    const NDArray& dy = k.input(0);
    const NDArray& idx = k.input(1);
    const NDArray& x = k.input(2);
    MedianPlan p = planMedian(a, x.shape());
    GRAFT_CHECK(static_cast<size_t>(dy.numel()) == p.groupStart.size(), "{}: gradient has {} elements, expected {}",
                what, dy.numel(), p.groupStart.size());
    dispatch<kNumeric>(dy.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      NDArray& dx = k.allocOutput(0, dy.dtype(), x.shape());
      for (size_t o = 0; o < p.groupStart.size(); ++o) {
        int32_t j = idx.data<int32_t>()[o];
        dx.data<T>()[p.groupStart[o] + p.groupOffsets[j]] = dy.data<T>()[o];
      }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(graphcore_reduce) {
  r.add("ReduceMedian", kGraphcoreDomain).setReference(medianKernel).setInfer(inferMedian).setVjp([](GradBuilder& g) {
    ir::Attributes attrs;
    if (g.node().attrs().has("axes")) attrs.set("axes", g.node().attrInts("axes"));
    attrs.set("keepdims", g.node().attrInt("keepdims", 1));
    g.setDx(0, g.op("ReduceMedianGrad", {g.dy(0), g.out(1), g.in(0)}, attrs, kGraftDomain));
  });
  r.add("ReduceMedianGrad", kGraftDomain)
      .setReference(medianGradKernel)
      .noGradient({1, 2})
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return std::vector<ir::ValueType>{
            ir::ValueType::tensor(TensorInfo(in.at(0).info.dataType(), in.at(2).info.dims()))};
      });
}

}  // namespace graft::ops
