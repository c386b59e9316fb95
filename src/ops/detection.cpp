// Object detection: NonMaxSuppression.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

template <class C>
struct Box {
  C x0, y0, x1, y1;  // x0 <= x1, y0 <= y1
  C area() const { return (x1 - x0) * (y1 - y0); }
};

// Corners in any order ([y1, x1, y2, x2]) or a centre and size ([x, y, w, h]) to a normalised box.
template <class C>
Box<C> toBox(const C* b, bool centerPoint) {
  if (centerPoint) return {b[0] - b[2] / C(2), b[1] - b[3] / C(2), b[0] + b[2] / C(2), b[1] + b[3] / C(2)};
  return {std::min(b[1], b[3]), std::min(b[0], b[2]), std::max(b[1], b[3]), std::max(b[0], b[2])};
}

// Intersection over union; 0 when the boxes do not overlap or either has no area.
template <class C>
C iou(const Box<C>& a, const Box<C>& b) {
  C ix0 = std::max(a.x0, b.x0), iy0 = std::max(a.y0, b.y0), ix1 = std::min(a.x1, b.x1), iy1 = std::min(a.y1, b.y1);
  if (!(ix1 > ix0 && iy1 > iy0)) return C(0);
  C inter = (ix1 - ix0) * (iy1 - iy0);
  C areaA = a.area(), areaB = b.area();
  if (!(areaA > C(0) && areaB > C(0))) return C(0);
  C uni = areaA + areaB - inter;
  return uni > C(0) ? inter / uni : C(0);
}

KernelFn nmsKernel(CompileContext& c) {
  std::string what = c.node().describe();
  int64_t cpb = c.node().attrInt("center_point_box", 0);
  GRAFT_CHECK(cpb == 0 || cpb == 1, "{}: center_point_box must be 0 or 1, got {}", what, cpb);
  bool centerPoint = cpb == 1;
  return [=](KernelContext& k) {
    const NDArray& boxes = k.input(0);
    const NDArray& scores = k.input(1);
    GRAFT_CHECK(boxes.rank() == 3 && boxes.dim(2) == 4, "{}: boxes must be [batches, boxes, 4], got {}", what,
                shapeToString(boxes.shape()));
    GRAFT_CHECK(scores.rank() == 3 && scores.dim(0) == boxes.dim(0) && scores.dim(2) == boxes.dim(1),
                "{}: scores must be [{}, classes, {}], got {}", what, boxes.dim(0), boxes.dim(1),
                shapeToString(scores.shape()));
    GRAFT_CHECK(scores.dtype() == boxes.dtype(), "{}: boxes and scores must have the same type, got {} and {}", what,
                dtypeName(boxes.dtype()), dtypeName(scores.dtype()));
    auto scalarOf = [&](size_t i, const char* name) -> const NDArray* {
      if (!k.hasInput(i)) return nullptr;
      const NDArray& a = k.input(i);
      GRAFT_CHECK(a.numel() == 1 && a.rank() <= 1, "{}: {} must be a scalar, got shape {}", what, name,
                  shapeToString(a.shape()));
      return &a;
    };
    int64_t maxPerClass = 0;
    if (const NDArray* m = scalarOf(2, "max_output_boxes_per_class")) maxPerClass = std::max<int64_t>(0, toInt64Vector(*m)[0]);
    const int64_t B = boxes.dim(0), N = boxes.dim(1), numClasses = scores.dim(1);
    std::vector<int64_t> selected;  // (batch, class, box) triples
    dispatch<kFloats>(boxes.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      // IoU and thresholds in the input's precision, so decisions at a threshold match other
      // runtimes working in float.
      using C = ComputeType<T>;
      auto scalarValue = [&](const NDArray* a, const char* name) {
        GRAFT_CHECK(a->dtype() == DataType::Float || a->dtype() == boxes.dtype(), "{}: {} must be FLOAT, got {}", what,
                    name, dtypeName(a->dtype()));
        return a->dtype() == DataType::Float ? static_cast<C>(a->data<float>()[0])
                                             : static_cast<C>(a->data<T>()[0]);
      };
      C iouThreshold = 0;
      if (const NDArray* a = scalarOf(3, "iou_threshold")) iouThreshold = scalarValue(a, "iou_threshold");
      GRAFT_CHECK(iouThreshold >= C(0) && iouThreshold <= C(1), "{}: iou_threshold must be in [0, 1], got {}", what,
                  static_cast<double>(iouThreshold));
      const NDArray* st = scalarOf(4, "score_threshold");
      C scoreThreshold = st ? scalarValue(st, "score_threshold") : C(0);
      const T* bp = boxes.data<T>();
      const T* sp = scores.data<T>();
      std::vector<Box<C>> bx(static_cast<size_t>(N));
      std::vector<int64_t> order;
      std::vector<C> s(static_cast<size_t>(N));
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < N; ++i) {
          C v[4];
          for (int j = 0; j < 4; ++j) v[j] = static_cast<C>(bp[(b * N + i) * 4 + j]);
          bx[i] = toBox(v, centerPoint);
        }
        for (int64_t cl = 0; cl < numClasses; ++cl) {
          order.clear();
          for (int64_t i = 0; i < N; ++i) {
            s[i] = static_cast<C>(sp[(b * numClasses + cl) * N + i]);
            // NaN scores are never selected (they would also break the ordering below).
            if (!std::isnan(static_cast<double>(s[i])) && (!st || s[i] > scoreThreshold)) order.push_back(i);
          }
          // Highest score first; equal scores keep the lower box index first.
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b2) { return s[a] > s[b2]; });
          std::vector<int64_t> kept;
          for (int64_t i : order) {
            if (static_cast<int64_t>(kept.size()) >= maxPerClass) break;
            bool suppressed = false;
            for (int64_t j : kept)
              if (iou(bx[i], bx[j]) > iouThreshold) {
                suppressed = true;
                break;
              }
            if (suppressed) continue;
            kept.push_back(i);
            selected.insert(selected.end(), {b, cl, i});
          }
        }
      }
    });
    auto count = static_cast<int64_t>(selected.size() / 3);
    NDArray& y = k.allocOutputUninit(0, DataType::Int64, {count, 3});
    std::copy(selected.begin(), selected.end(), y.data<int64_t>());
  };
}

}  // namespace

GRAFT_REGISTER_OPS(detection) { r.add("NonMaxSuppression").setReference(nmsKernel); }

}  // namespace graft::ops
