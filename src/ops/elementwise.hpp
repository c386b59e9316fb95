#pragma once
// Building blocks for elementwise kernels: unary maps, broadcasting binary and n-ary maps.
// Element values are converted to ComputeType (float for half types) around the functor.
#include <array>
#include <cmath>

#include "ops/dtype_dispatch.hpp"
#include "ops/kernel.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {

/// out = f(x), same dtype as x. f is a generic functor over the compute type.
template <uint32_t Set, class F>
KernelFactory unaryKernel(F f) {
  return [f](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [f, what](KernelContext& k) {
      const NDArray& x = k.input(0);
      dispatch<Set>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = ComputeType<T>;
        NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
        const T* xp = x.data<T>();
        T* yp = y.data<T>();
        int64_t n = x.numel();
        for (int64_t i = 0; i < n; ++i) yp[i] = static_cast<T>(f(static_cast<C>(xp[i])));
      });
    };
  };
}

/// Like unaryKernel, but the functor also receives the node's parsed parameters: the factory
/// `make(CompileContext&)` returns the functor to apply.
template <uint32_t Set, class Make>
KernelFactory unaryKernelWith(Make make) {
  return [make](CompileContext& c) -> KernelFn {
    auto f = make(c);
    std::string what = c.node().describe();
    return [f, what](KernelContext& k) {
      const NDArray& x = k.input(0);
      dispatch<Set>(x.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = ComputeType<T>;
        NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
        const T* xp = x.data<T>();
        T* yp = y.data<T>();
        int64_t n = x.numel();
        for (int64_t i = 0; i < n; ++i) yp[i] = static_cast<T>(f(static_cast<C>(xp[i])));
      });
    };
  };
}

/// Broadcasting out[i] = f(a[ia], b[ib]) for arrays of the same element type T; the result
/// element type is R (R = T unless the caller says otherwise).
template <class T, class R, class F>
void broadcastBinary(const NDArray& a, const NDArray& b, NDArray& out, F f) {
  using C = ComputeType<T>;
  const T* ap = a.data<T>();
  const T* bp = b.data<T>();
  R* op = out.data<R>();
  int64_t n = out.numel();
  // Equal shapes are a flat loop only where they are the output's too (Sum broadcasts its first
  // input to the output by pairing it with a scalar: both inputs [] and out larger).
  if (a.shape() == b.shape() && a.numel() == n) {
    for (int64_t i = 0; i < n; ++i) op[i] = static_cast<R>(f(static_cast<C>(ap[i]), static_cast<C>(bp[i])));
    return;
  }
  if (b.numel() == 1 && a.numel() == n) {
    C bv = static_cast<C>(bp[0]);
    for (int64_t i = 0; i < n; ++i) op[i] = static_cast<R>(f(static_cast<C>(ap[i]), bv));
    return;
  }
  if (a.numel() == 1 && b.numel() == n) {
    C av = static_cast<C>(ap[0]);
    for (int64_t i = 0; i < n; ++i) op[i] = static_cast<R>(f(av, static_cast<C>(bp[i])));
    return;
  }
  std::array<std::vector<int64_t>, 2> st{broadcastStrides(a.shape(), out.shape()), broadcastStrides(b.shape(), out.shape())};
  int64_t o = 0;
  forEachBroadcastRun<2>(out.shape(), st, [&](const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& inner, int64_t len) {
    for (int64_t j = 0; j < len; ++j, ++o)
      op[o] = static_cast<R>(f(static_cast<C>(ap[off[0] + j * inner[0]]), static_cast<C>(bp[off[1] + j * inner[1]])));
  });
}

/// out = f(a, b) with broadcasting; both inputs and the output have the same dtype.
template <uint32_t Set, class F>
KernelFactory binaryKernel(F f) {
  return [f](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [f, what](KernelContext& k) {
      const NDArray& a = k.input(0);
      const NDArray& b = k.input(1);
      Shape os = broadcastShapes(a.shape(), b.shape(), what);
      GRAFT_CHECK(a.dtype() == b.dtype(), "{}: inputs must have the same type, got {} and {}", what, dtypeName(a.dtype()),
                  dtypeName(b.dtype()));
      dispatch<Set>(a.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        NDArray& y = k.allocOutputUninit(0, a.dtype(), os);
        broadcastBinary<T, T>(a, b, y, f);
      });
    };
  };
}

/// out = f(a, b) with broadcasting; the output is BOOL (comparisons, logical ops).
template <uint32_t Set, class F>
KernelFactory compareKernel(F f) {
  return [f](CompileContext& c) -> KernelFn {
    std::string what = c.node().describe();
    return [f, what](KernelContext& k) {
      const NDArray& a = k.input(0);
      const NDArray& b = k.input(1);
      Shape os = broadcastShapes(a.shape(), b.shape(), what);
      GRAFT_CHECK(a.dtype() == b.dtype(), "{}: inputs must have the same type, got {} and {}", what, dtypeName(a.dtype()),
                  dtypeName(b.dtype()));
      dispatch<Set>(a.dtype(), what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        NDArray& y = k.allocOutputUninit(0, DataType::Bool, os);
        broadcastBinary<T, bool>(a, b, y, f);
      });
    };
  };
}

}  // namespace graft::ops
