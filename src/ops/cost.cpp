#include "ops/cost.hpp"

#include "ops/registry.hpp"

namespace graft::ops {

double estimateFlops(const ir::Node& n) {
  const OpDef* def = Registry::instance().find(n);
  return def && def->cost ? def->cost(n) : cost::outputElements(n);
}

namespace cost {

double numel(const ir::Tensor* t) {
  if (!t || !t->type().isTensor() || !t->info().isStatic()) return 0;
  return static_cast<double>(t->info().nelms());
}

int64_t dim(const ir::Tensor* t, int64_t d) {
  if (!t || !t->type().isTensor() || !t->info().hasShape() || d < 0 || d >= t->info().rank()) return 0;
  const Dim& v = t->info().dims()[d];
  return v.known() ? v.value : 0;
}

double outputElements(const ir::Node& n) {
  double e = 0;
  for (const ir::Tensor* t : n.outputs()) e += numel(t);
  return e;
}

double matmul(const ir::Node& n) {
  const ir::Tensor* a = n.input(0);
  int64_t rank = a && a->type().isTensor() && a->info().hasShape() ? a->info().rank() : 0;
  int64_t k = rank > 0 ? dim(a, rank - 1) : 0;
  std::vector<int64_t> pa = n.attrInts("perm_a", {});
  if (!pa.empty() && static_cast<int64_t>(pa.size()) == rank && pa.back() >= 0 && pa.back() < rank)
    k = dim(a, pa.back());
  return 2.0 * numel(n.output(0)) * static_cast<double>(k);
}

double gemm(const ir::Node& n) {
  int64_t k = dim(n.input(0), n.attrInt("transA", 0) ? 0 : 1);
  return 2.0 * numel(n.output(0)) * static_cast<double>(k);
}

double convolution(const ir::Tensor* y, const ir::Tensor* w) {
  double perOut = dim(w, 0) > 0 ? numel(w) / static_cast<double>(dim(w, 0)) : 0;
  return 2.0 * numel(y) * perOut;
}

double recurrence(const ir::Node& n, const ir::Tensor* x, const ir::Tensor* w, const ir::Tensor* r) {
  bool batchFirst = n.attrInt("layout", 0) != 0;
  double steps = static_cast<double>(dim(x, batchFirst ? 1 : 0));
  double batch = static_cast<double>(dim(x, batchFirst ? 0 : 1));
  return 2.0 * steps * batch * (numel(w) + numel(r)) + outputElements(n) * 8;
}

}  // namespace cost
}  // namespace graft::ops
