// graft's internal ops (domain ai.graft), created by autodiff and the optimizers, never by
// models: UnbroadcastTo and ZerosLike for gradients, and in-place Accumulate / ZeroFill for
// gradient accumulation.
#include "ops/dtype_dispatch.hpp"
#include "ops/elementwise.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

std::vector<ir::ValueType> sameAsInput(size_t i, size_t numOutputs, const std::vector<ir::ValueType>& in) {
  return std::vector<ir::ValueType>(numOutputs, in.at(i));
}

// UnbroadcastTo(g, like): sums g over the axes along which `like` was broadcast to g's shape.
KernelFn unbroadcastKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [what](KernelContext& k) {
    const NDArray& g = k.input(0);
    const Shape& target = k.input(1).shape();
    GRAFT_CHECK(broadcastShapes(target, g.shape(), what) == g.shape(), "{}: {} does not broadcast to {}", what,
                shapeToString(target), shapeToString(g.shape()));
    if (g.shape() == target) {
      k.setOutput(0, g);
      return;
    }
    dispatch<kFloats>(g.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      NDArray acc(DataType::Double, target);
      std::array<std::vector<int64_t>, 1> st{broadcastStrides(target, g.shape())};
      const T* gp = g.data<T>();
      double* ap = acc.data<double>();
      int64_t o = 0;
      forEachBroadcastRun<1>(g.shape(), st, [&](const auto& off, const auto& inner, int64_t len) {
        for (int64_t j = 0; j < len; ++j) ap[off[0] + j * inner[0]] += static_cast<double>(static_cast<C>(gp[o++]));
      });
      NDArray& y = k.allocOutputUninit(0, g.dtype(), target);
      for (int64_t i = 0; i < y.numel(); ++i) y.data<T>()[i] = static_cast<T>(static_cast<C>(ap[i]));
    });
  };
}

KernelFn zerosLikeKernel(CompileContext&) {
  return [](KernelContext& k) {
    const NDArray& x = k.input(0);
    k.allocOutput(0, x.dtype(), x.shape());
  };
}

// Accumulate(acc, g) {overwrite}: acc += g, in place; acc is a persistent Variable. With
// overwrite = 1, acc = g: the one Accumulate of a weight update (replication without gradient
// accumulation), which then needs no zeroed accumulator.
KernelFn accumulateKernel(CompileContext& c) {
  std::string what = c.node().describe();
  const bool overwrite = c.node().attrInt("overwrite", 0) != 0;
  return [what, overwrite](KernelContext& k) {
    NDArray acc = k.input(0);
    const NDArray& g = k.input(1);
    GRAFT_CHECK(acc.shape() == g.shape() && acc.dtype() == g.dtype(), "{}: accumulator {} {} vs gradient {} {}", what,
                dtypeName(acc.dtype()), shapeToString(acc.shape()), dtypeName(g.dtype()), shapeToString(g.shape()));
    dispatch<kFloats>(acc.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      T* a = acc.data<T>();
      const T* b = g.data<T>();
      if (overwrite && a == b) return;  // the gradient was computed in place (plan/executable.cpp)
      if (overwrite)
        for (int64_t i = 0; i < acc.numel(); ++i) a[i] = b[i];
      else
        for (int64_t i = 0; i < acc.numel(); ++i) a[i] = static_cast<T>(static_cast<C>(a[i]) + static_cast<C>(b[i]));
    });
  };
}

// ZeroFill(x): x = 0, in place.
KernelFn zeroFillKernel(CompileContext&) {
  return [](KernelContext& k) {
    NDArray x = k.input(0);
    if (x.nbytes()) std::memset(x.rawData(), 0, x.nbytes());
  };
}

std::vector<ir::ValueType> noOutputs(const ir::Node&, const std::vector<ir::ValueType>&, const std::vector<const NDArray*>&) {
  return {};
}

}  // namespace

GRAFT_REGISTER_OPS(graft_internal) {
  r.add("UnbroadcastTo", kGraftDomain)
      .setReference(unbroadcastKernel)
      .noGradient({1})
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        ir::ValueType t = in.at(1);
        t.info.setDataType(in.at(0).info.dataType());
        return std::vector<ir::ValueType>{t};
      });
  r.add("ZerosLike", kGraftDomain)
      .setReference(zerosLikeKernel)
      .noGradient({0})
      .setInfer([](const ir::Node&, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        return sameAsInput(0, 1, in);
      });
  r.add("Accumulate", kGraftDomain).setReference(accumulateKernel).sideEffects().setInfer(noOutputs);
  r.add("ZeroFill", kGraftDomain).setReference(zeroFillKernel).sideEffects().setInfer(noOutputs);
}

}  // namespace graft::ops
