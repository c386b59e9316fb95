#include "ops/grad_util.hpp"

#include <algorithm>
#include <numeric>

#include "ops/registry.hpp"
#include "ops/shape_util.hpp"
#include "support/check.hpp"

namespace graft::ops::gradutil {

int64_t rankOf(GradBuilder& g, const ir::Tensor* t) {
  GRAFT_CHECK(t && t->type().isTensor() && t->info().hasShape(),
              "{}: the gradient needs the rank of '{}', which is unknown", g.node().describe(),
              t ? t->id() : std::string("<none>"));
  return t->info().rank();
}

int64_t normAxis(GradBuilder& g, int64_t axis, int64_t rank) {
  GRAFT_CHECK(axis >= -rank && axis < rank, "{}: axis {} is out of range for rank {}", g.node().describe(), axis, rank);
  return axis < 0 ? axis + rank : axis;
}

std::optional<std::vector<int64_t>> constantInts(const ir::Tensor* t) {
  if (!t) return std::nullopt;
  const NDArray* a = nullptr;
  if (t->data() && t->kind() == ir::TensorKind::Constant) {
    a = t->data();
  } else if (const ir::Node* p = t->producer();
             p && p->type() == "Constant" && p->domain().empty() && p->attrs().has("value")) {
    a = &p->attrTensor("value");
  }
  if (!a || (a->dtype() != DataType::Int64 && a->dtype() != DataType::Int32)) return std::nullopt;
  return toInt64Vector(*a);
}

ir::Tensor* scalarInt64(GradBuilder& g, int64_t v) { return g.constant(NDArray::scalar<int64_t>(DataType::Int64, v)); }

ir::Tensor* toInt64(GradBuilder& g, ir::Tensor* t) {
  if (t->info().dataType() == DataType::Int64) return t;
  ir::Attributes a;
  a.set("to", static_cast<int64_t>(DataType::Int64));
  return g.op("Cast", {t}, a);
}

ir::Tensor* shapeOf(GradBuilder& g, ir::Tensor* t, int64_t start, std::optional<int64_t> end) {
  if (!t->info().hasShape()) {  // rank unknown until run time: the Shape op clamps as we would
    ir::Attributes a;
    a.set("start", start);
    if (end) a.set("end", *end);
    return g.op("Shape", {t}, a);
  }
  int64_t r = t->info().rank();
  auto clampIdx = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  int64_t b = clampIdx(start), e = end ? clampIdx(*end) : r;
  e = std::max(b, e);
  const auto& dims = t->info().dims();
  bool known = std::all_of(dims.begin() + b, dims.begin() + e, [](const Dim& d) { return d.known(); });
  if (known) {
    std::vector<int64_t> v;
    for (int64_t i = b; i < e; ++i) v.push_back(dims[i].value);
    return g.int64s(v);
  }
  ir::Attributes a;
  a.set("start", b);
  a.set("end", e);
  return g.op("Shape", {t}, a);
}

ir::Tensor* dimOf(GradBuilder& g, ir::Tensor* t, int64_t axis) {
  int64_t a = normAxis(g, axis, rankOf(g, t));
  return shapeOf(g, t, a, a + 1);
}

ir::Tensor* concatInts(GradBuilder& g, const std::vector<ir::Tensor*>& parts) {
  std::vector<int64_t> all;
  bool constant = true;
  for (ir::Tensor* p : parts) {
    auto v = constantInts(p);
    if (!v) {
      constant = false;
      break;
    }
    all.insert(all.end(), v->begin(), v->end());
  }
  if (constant) return g.int64s(all);
  if (parts.size() == 1) return parts[0];
  ir::Attributes a;
  a.set("axis", int64_t{0});
  return g.op("Concat", parts, a);
}

ir::Tensor* reshapeTo(GradBuilder& g, ir::Tensor* t, ir::Tensor* shape) {
  ir::Attributes a;
  a.set("allowzero", int64_t{1});
  return g.op("Reshape", {t, shape}, a);
}

ir::Tensor* reshapeLike(GradBuilder& g, ir::Tensor* t, ir::Tensor* like) {
  if (t->info().isStatic() && like->info().isStatic() && t->info().shape() == like->info().shape()) return t;
  return reshapeTo(g, t, shapeOf(g, like));
}

ir::Tensor* transpose(GradBuilder& g, ir::Tensor* t, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) return t;
  ir::Attributes a;
  a.set("perm", perm);
  return g.op("Transpose", {t}, a);
}

ir::Tensor* zerosOfShape(GradBuilder& g, ir::Tensor* shape, ir::Tensor* like) {
  return g.op("Expand", {g.scalarLike(0, like), shape});
}

ir::Tensor* scatterAddAlongAxis(GradBuilder& g, ir::Tensor* upd, ir::Tensor* indices, int64_t axis, ir::Tensor* dim) {
  int64_t q = rankOf(g, indices), r = rankOf(g, upd);
  int64_t post = r - axis - q;
  GRAFT_ASSERT(axis >= 0 && post >= 0, "{}: gradient of rank {} for indices of rank {} on axis {}", g.node().describe(),
               r, q, axis);
  // Bring the indexed dimensions to the front: ScatterND then writes whole trailing blocks.
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < q; ++i) perm.push_back(axis + i);
  for (int64_t i = 0; i < axis; ++i) perm.push_back(i);
  for (int64_t i = axis + q; i < r; ++i) perm.push_back(i);
  ir::Tensor* updT = transpose(g, upd, perm);
  ir::Tensor* idx = g.op("Unsqueeze", {toInt64(g, indices), g.int64s({-1})});
  ir::Tensor* zeros = zerosOfShape(g, concatInts(g, {dim, shapeOf(g, updT, q)}), upd);
  ir::Attributes a;
  a.set("reduction", std::string("add"));
  ir::Tensor* s = g.op("ScatterND", {zeros, idx, updT}, a);
  // s is [n] + pre + post; move n back to position `axis`.
  std::vector<int64_t> back;
  for (int64_t i = 0; i < axis; ++i) back.push_back(i + 1);
  back.push_back(0);
  for (int64_t i = 0; i < post; ++i) back.push_back(axis + 1 + i);
  return transpose(g, s, back);
}

ir::Tensor* inversePositions(GradBuilder& g, ir::Tensor* idx, ir::Tensor* dim) {
  ir::Tensor* count = shapeOf(g, idx);                // [m]
  ir::Tensor* base = g.op("Expand", {count, dim});    // n copies of m
  ir::Tensor* m = reshapeTo(g, count, g.int64s({}));  // m as a scalar
  ir::Tensor* k = g.op("Range", {scalarInt64(g, 0), m, scalarInt64(g, 1)});
  ir::Attributes a;
  a.set("axis", int64_t{0});
  return g.op("ScatterElements", {base, idx, k}, a);
}

ir::Tensor* padEndOnAxes(GradBuilder& g, ir::Tensor* t, const std::vector<int64_t>& axes) {
  int64_t r = rankOf(g, t);
  std::vector<int64_t> pads(static_cast<size_t>(2 * r), 0);
  for (int64_t a : axes) pads[static_cast<size_t>(r + a)] = 1;
  return g.op("Pad", {t, g.int64s(pads)});
}

ir::Tensor* geluErfDerivative(GradBuilder& g, ir::Tensor* x, ir::Tensor* y) {
  return g.op("GeluErfGrad", {x, y}, {}, ops::kGraftDomain);
}

}  // namespace graft::ops::gradutil
