// Random generators: RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike,
// Multinomial, Bernoulli, and Dropout.
//
// The generator is numpy's legacy RandomState (MT19937, 53-bit doubles, polar Box-Muller
// normals, inversion binomial draws), because ONNX's reference implementation defines the seeded
// results with it: a node with a `seed` attribute gives the values numpy's RandomState(seed) gives.
// A seeded node restarts from its seed on every execution, so its results are reproducible run to
// run. Without a seed, each node owns a generator seeded from std::random_device that advances
// from one execution to the next, until setRandomSeed (ops/random_seed.hpp) fixes the seed of all
// unseeded nodes: each then restarts from a seed mixed from the global seed and its identity.
#include "ops/random_seed.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <random>

#include "ops/dtype_dispatch.hpp"
#include "ops/grad.hpp"
#include "ops/registry.hpp"

namespace graft::ops {
namespace {

/// numpy.random.RandomState's generator.
class NumpyRandom {
 public:
  explicit NumpyRandom(uint32_t seed = 0) : mt_(seed) {}
  /// Uniform in [0, 1) with 53 random bits (numpy's random_sample).
  double uniform() {
    uint32_t a = mt_() >> 5, b = mt_() >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }
  /// Standard normal (numpy's legacy_gauss: the polar method, the second value kept for the next call).
  double gauss() {
    if (hasGauss_) {
      hasGauss_ = false;
      return gauss_;
    }
    double x1, x2, r2;
    do {
      x1 = 2.0 * uniform() - 1.0;
      x2 = 2.0 * uniform() - 1.0;
      r2 = x1 * x1 + x2 * x2;
    } while (r2 >= 1.0 || r2 == 0.0);
    double f = std::sqrt(-2.0 * std::log(r2) / r2);
    gauss_ = f * x1;
    hasGauss_ = true;
    return f * x2;
  }
  /// One Bernoulli(p) draw as numpy's legacy binomial(1, p) makes it: the inversion algorithm on
  /// min(p, 1 - p), step for step (its rounding included), so that seeded draws match.
  bool bernoulli(double p) {
    bool flip = p > 0.5;
    double pp = flip ? 1.0 - p : p;
    double q = 1.0 - pp;
    double qn = std::exp(std::log(q));
    auto bound = static_cast<int64_t>(std::min(1.0, pp + 10.0 * std::sqrt(pp * q + 1)));
    int64_t x = 0;
    double px = qn, u = uniform();
    while (u > px) {
      if (++x > bound) {
        x = 0;
        px = qn;
        u = uniform();
      } else {
        u -= px;
        px = ((2 - x) * pp * px) / (static_cast<double>(x) * q);
      }
    }
    return flip ? x == 0 : x == 1;
  }

 private:
  std::mt19937 mt_;
  bool hasGauss_ = false;
  double gauss_ = 0;
};

std::atomic<uint64_t> gSeed{0};
std::atomic<uint64_t> gSeedEpoch{0};  // 0: setRandomSeed was never called

// splitmix64: spreads (seed, node) into a well-mixed 32-bit generator seed.
uint32_t mixSeed(uint64_t seed, uint64_t key) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (key + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

/// The op type a node's random stream is keyed by: RandomNormalLike and RandomNormal alike (and the
/// Uniform pair), so that folding a *Like node into its generator (fold-constants) keeps its values.
std::string streamType(const ir::Node& n) {
  const std::string& t = n.type();
  if (t == "RandomNormalLike" || t == "RandomUniformLike") return t.substr(0, t.size() - 4);
  return t;
}

/// Where a node's random numbers come from: its seed attribute, the global seed, or a private
/// random stream.
class RandomSource {
 public:
  explicit RandomSource(const ir::Node& n)
      : key_(std::hash<std::string>{}(streamType(n) + "/" +
                                      (n.numOutputs() && n.output(0) ? n.output(0)->id() : n.name()))) {
    // Replication's global replica index (on each replica's copy of the node): replicas draw
    // different values from the one global seed. A node with a seed attribute ignores it.
    if (int64_t r = n.attrInt("replica", 0)) key_ = mixSeed(key_, static_cast<uint64_t>(r)) ^ (key_ << 1);
    if (const ir::AttrValue* a = n.attrs().find("seed")) {
      // A float for the generators, an int for Dropout. numpy takes int(seed); seeds outside
      // [0, 2^32) wrap instead of failing.
      if (const auto* i = std::get_if<int64_t>(a)) {
        seed_ = static_cast<uint32_t>(static_cast<uint64_t>(*i));
      } else {
        float s = n.attrFloat("seed");
        GRAFT_CHECK(std::isfinite(s) && std::fabs(s) < 9.2e18f, "{}: attribute 'seed' must be a finite number, got {}",
                    n.describe(), s);
        seed_ = static_cast<uint32_t>(static_cast<uint64_t>(static_cast<int64_t>(s)));
      }
    } else {
      std::random_device rd;
      gen_ = NumpyRandom(rd());
    }
  }
  /// The generator to draw this execution's values from.
  NumpyRandom& begin() {
    if (seed_) {
      gen_ = NumpyRandom(*seed_);
    } else if (uint64_t e = gSeedEpoch.load(); e != epoch_) {
      epoch_ = e;
      gen_ = NumpyRandom(mixSeed(gSeed.load(), key_));
    }
    return gen_;
  }

 private:
  uint64_t key_;
  uint64_t epoch_ = 0;
  std::optional<uint32_t> seed_;
  NumpyRandom gen_;
};

DataType floatDtypeAttr(const ir::Node& n, const char* name, DataType def) {
  auto dt = static_cast<DataType>(n.attrInt(name, static_cast<int64_t>(def)));
  GRAFT_CHECK(dt == DataType::Float || dt == DataType::Double || dt == DataType::Float16 || dt == DataType::BFloat16,
              "{}: attribute '{}' must be a floating-point type (FLOAT, DOUBLE, FLOAT16, BFLOAT16), got {}",
              n.describe(), name, dtypeName(dt));
  return dt;
}

Shape shapeAttr(const ir::Node& n) {
  Shape s = n.attrInts("shape");
  for (int64_t d : s)
    GRAFT_CHECK(d >= 0, "{}: attribute 'shape' {} has a negative dimension", n.describe(), shapeToString(s));
  shapeNumel(s);  // rejects overflow now rather than at run time
  return s;
}

// Fills a float array with low + u * (high - low), or mean + scale * z.
enum class Dist { Uniform, Normal };

void fillRandom(NDArray& y, Dist dist, double a, double b, NumpyRandom& gen) {
  dispatch<kFloats>(y.dtype(), "random", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* d = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i)
      d[i] = dist == Dist::Uniform ? fromDouble<T>(a + gen.uniform() * (b - a)) : fromDouble<T>(a + b * gen.gauss());
  });
}

// RandomUniform / RandomNormal: attributes give dtype and shape.
KernelFactory generatorKernel(Dist dist) {
  return [dist](CompileContext& c) -> KernelFn {
    const ir::Node& n = c.node();
    DataType dt = floatDtypeAttr(n, "dtype", DataType::Float);
    Shape shape = shapeAttr(n);
    double a = dist == Dist::Uniform ? n.attrFloat("low", 0.f) : n.attrFloat("mean", 0.f);
    double b = dist == Dist::Uniform ? n.attrFloat("high", 1.f) : n.attrFloat("scale", 1.f);
    auto src = std::make_shared<RandomSource>(n);
    return [=](KernelContext& k) { fillRandom(k.allocOutputUninit(0, dt, shape), dist, a, b, src->begin()); };
  };
}

// RandomUniformLike / RandomNormalLike: the input gives the shape (and the dtype by default).
KernelFactory likeKernel(Dist dist) {
  return [dist](CompileContext& c) -> KernelFn {
    const ir::Node& n = c.node();
    std::optional<DataType> dt;
    if (n.attrs().has("dtype")) dt = floatDtypeAttr(n, "dtype", DataType::Float);
    double a = dist == Dist::Uniform ? n.attrFloat("low", 0.f) : n.attrFloat("mean", 0.f);
    double b = dist == Dist::Uniform ? n.attrFloat("high", 1.f) : n.attrFloat("scale", 1.f);
    auto src = std::make_shared<RandomSource>(n);
    std::string what = n.describe();
    return [=](KernelContext& k) {
      const NDArray& x = k.input(0);
      DataType out = dt ? *dt : x.dtype();
      GRAFT_CHECK(isFloatingPoint(out),
                  "{}: the input is {}; without a 'dtype' attribute the output type must be a "
                  "floating-point type",
                  what, dtypeName(out));
      fillRandom(k.allocOutputUninit(0, out, x.shape()), dist, a, b, src->begin());
    };
  };
}

KernelFn bernoulliKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::optional<DataType> dt;
  if (n.attrs().has("dtype")) {
    dt = static_cast<DataType>(n.attrInt("dtype"));
    auto code = static_cast<uint32_t>(*dt);
    GRAFT_CHECK(code < 32 && ((kNumericBool >> code) & 1u),
                "{}: attribute 'dtype' must be a numeric or bool type, got {}", n.describe(), dtypeName(*dt));
  }
  auto src = std::make_shared<RandomSource>(n);
  std::string what = n.describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    NDArray& y = k.allocOutputUninit(0, dt ? *dt : x.dtype(), x.shape());
    NumpyRandom& gen = src->begin();
    dispatch<kFloats>(x.dtype(), what, [&](auto tx) {
      using X = typename decltype(tx)::type;
      dispatch<kNumericBool>(y.dtype(), what, [&](auto ty) {
        using Y = typename decltype(ty)::type;
        const X* p = x.data<X>();
        Y* d = y.data<Y>();
        for (int64_t i = 0; i < x.numel(); ++i) {
          double pi = static_cast<double>(static_cast<ComputeType<X>>(p[i]));
          GRAFT_CHECK(pi >= 0.0 && pi <= 1.0, "{}: probability {} at element {} is outside [0, 1]", what, pi, i);
          bool v = gen.bernoulli(pi);
          if constexpr (std::is_same_v<Y, bool>)
            d[i] = v;
          else
            d[i] = fromDouble<Y>(v ? 1.0 : 0.0);
        }
      });
    });
  };
}

KernelFn multinomialKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  auto dt = static_cast<DataType>(n.attrInt("dtype", static_cast<int64_t>(DataType::Int32)));
  GRAFT_CHECK(dt == DataType::Int32 || dt == DataType::Int64, "{}: attribute 'dtype' must be INT32 or INT64, got {}",
              n.describe(), dtypeName(dt));
  int64_t samples = n.attrInt("sample_size", 1);
  GRAFT_CHECK(samples >= 0, "{}: attribute 'sample_size' must be >= 0, got {}", n.describe(), samples);
  auto src = std::make_shared<RandomSource>(n);
  std::string what = n.describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() == 2, "{}: input must be 2-D [batch_size, class_size], got shape {}", what,
                shapeToString(x.shape()));
    int64_t batch = x.dim(0), classes = x.dim(1);
    NDArray& y = k.allocOutputUninit(0, dt, {batch, samples});
    NumpyRandom& gen = src->begin();
    std::vector<double> cdf(static_cast<size_t>(classes));
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xs = x.data<T>();
      for (int64_t b = 0; b < batch; ++b) {
        // The inputs are unnormalised log-probabilities: weights exp(x - max).
        double mx = -INFINITY;
        for (int64_t j = 0; j < classes; ++j) {
          double v = static_cast<double>(static_cast<ComputeType<T>>(xs[b * classes + j]));
          GRAFT_CHECK(!std::isnan(v) && v != INFINITY, "{}: row {} has log-probability {} at class {}", what, b, v, j);
          mx = std::max(mx, v);
        }
        GRAFT_CHECK(classes > 0 && mx != -INFINITY, "{}: row {} gives no class a non-zero probability", what, b);
        double total = 0;
        for (int64_t j = 0; j < classes; ++j) {
          total += std::exp(static_cast<double>(static_cast<ComputeType<T>>(xs[b * classes + j])) - mx);
          cdf[j] = total;
        }
        for (int64_t s = 0; s < samples; ++s) {
          double u = gen.uniform() * total;
          int64_t j = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
          // Rounding can leave u == total: take the last class with weight.
          while (j >= classes || (j > 0 && cdf[j] == cdf[j - 1])) --j;
          if (dt == DataType::Int32)
            y.data<int32_t>()[b * samples + s] = static_cast<int32_t>(j);
          else
            y.data<int64_t>()[b * samples + s] = j;
        }
      }
    });
  };
}

double scalarValue(const NDArray& a, const std::string& what, const char* name) {
  GRAFT_CHECK(a.numel() == 1, "{}: input '{}' must hold one value, got shape {}", what, name, shapeToString(a.shape()));
  return dispatch<kNumericBool>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<double>(static_cast<ComputeType<T>>(a.data<T>()[0]));
  });
}

KernelFn dropoutKernel(CompileContext& c) {
  auto src = std::make_shared<RandomSource>(c.node());
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    bool training = k.hasInput(2) && scalarValue(k.input(2), what, "training_mode") != 0.0;
    double ratio = k.hasInput(1) ? scalarValue(k.input(1), what, "ratio") : 0.5;
    if (!training || ratio == 0.0) {
      k.setOutput(0, x);
      if (k.wantsOutput(1)) {
        NDArray& mask = k.allocOutputUninit(1, DataType::Bool, x.shape());
        std::fill(mask.data<bool>(), mask.data<bool>() + mask.numel(), true);
      }
      return;
    }
    GRAFT_CHECK(ratio >= 0.0 && ratio < 1.0,
                "{}: ratio value {} is not valid. Please use a value in the interval [0,1)", what, ratio);
    NumpyRandom& gen = src->begin();
    NDArray& y = k.allocOutputUninit(0, x.dtype(), x.shape());
    NDArray mask = NDArray::uninitialized(DataType::Bool, x.shape());
    bool* m = mask.data<bool>();
    for (int64_t i = 0; i < x.numel(); ++i) m[i] = gen.uniform() >= ratio;
    dispatch<kFloats>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      auto scale = static_cast<C>(1.0 / (1.0 - ratio));
      const T* xs = x.data<T>();
      T* ys = y.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i)
        ys[i] = m[i] ? static_cast<T>(static_cast<C>(xs[i]) * scale) : static_cast<T>(C(0));
    });
    if (k.wantsOutput(1)) k.setOutput(1, mask);
  };
}

// Inference-mode Dropout is the identity. In training mode the gradient flows where the mask
// kept the element, scaled like the output; that needs the node's mask output.
void dropoutVjp(GradBuilder& g) {
  const ir::Node& n = g.node();
  const ir::Tensor* training = n.input(2);
  bool neverTraining = !training || (training->kind() == ir::TensorKind::Constant && training->data() &&
                                     training->data()->numel() == 1 && !training->data()->data<bool>()[0]);
  ir::Tensor* dy = g.dy(0);
  if (neverTraining) {
    g.setDx(0, dy);
    return;
  }
  GRAFT_CHECK(n.output(1),
              "{}: the gradient of Dropout in training mode needs the mask the forward pass drew; give the "
              "node its second output (mask)",
              n.describe());
  ir::Tensor* one = g.scalarLike(1.0, dy);
  ir::Tensor* ratio = n.input(1) ? g.op("CastLike", {g.in(1), dy}) : g.scalarLike(0.5, dy);
  ir::Tensor* kept = g.mul(dy, g.div(one, g.sub(one, ratio)));
  g.setDx(0, g.where(g.in(2), g.where(g.out(1), kept, g.zerosLike(dy)), dy));
}

}  // namespace

GRAFT_REGISTER_OPS(random) {
  r.add("RandomUniform").setReference(generatorKernel(Dist::Uniform)).nondeterministic();
  r.add("RandomNormal").setReference(generatorKernel(Dist::Normal)).nondeterministic();
  r.add("RandomUniformLike").setReference(likeKernel(Dist::Uniform)).nondeterministic().noGradient({0});
  r.add("RandomNormalLike").setReference(likeKernel(Dist::Normal)).nondeterministic().noGradient({0});
  r.add("Multinomial").setReference(multinomialKernel).nondeterministic().noGradient({0});
  r.add("Bernoulli").setReference(bernoulliKernel).nondeterministic().noGradient({0});
  r.add("Dropout").setReference(dropoutKernel).setVjp(dropoutVjp).nondeterministic().noGradient({1, 2});
}

void setRandomSeed(uint64_t seed) {
  gSeed.store(seed);
  gSeedEpoch.fetch_add(1);
}

uint64_t randomSeed() { return gSeed.load(); }

}  // namespace graft::ops
