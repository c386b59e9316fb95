// Large convolution and matmul layers through graft's cpu backend (the cpu inference pipeline,
// compiled plan, oneDNN kernels), reporting GFLOP/s against the host's FMA roof. Not a test:
// timings depend on the machine and its load.
//
//   layers_bench [--threads N] [--repeats R] [--roof GFLOPS] [--filter SUBSTR]
//
// The roof is measured first, on the same threads (bench/fma_roof.hpp: chains of FMAs in
// registers with the widest vectors the kernels may use: AVX-512, or AVX2 where the CPU or
// GRAFT_CPU_ISA stops there); --roof gives it instead.
//
// Each layer is compiled once, run a few times to warm up, then timed `repeats` times (each a
// batch of runs lasting >= 0.2 s); the median and the best per-run times are reported. The layer's
// own kernel time comes from the plan's profile (the conversions to and from blocked layouts
// at the graph's edges are reported apart).
#include <graft/graft.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "fma_roof.hpp"
#include "ir/graph.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"
#include "support/cpu_features.hpp"

namespace {

using namespace graft;

NDArray randomArray(Shape s, uint32_t seed) {
  NDArray a(DataType::Float, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = u(rng);
  return a;
}

struct Layer {
  std::string name;
  std::unique_ptr<ir::Graph> graph;
  std::vector<NDArray> inputs;
  double flops = 0;
};

Layer convLayer(const std::string& name, int64_t n, int64_t c, int64_t hw, int64_t k, int64_t kernel, int64_t stride,
                bool relu = true) {
  Layer l;
  l.name = name;
  l.graph = std::make_unique<ir::Graph>(name);
  ir::Graph& g = *l.graph;
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{n, c, hw, hw})), ir::TensorKind::Input);
  g.addInput(x);
  ir::Tensor* w = g.addInitializer("w", randomArray({k, c, kernel, kernel}, 1));
  ir::Tensor* b = g.addInitializer("b", randomArray({k}, 2));
  ir::Attributes a;
  int64_t p = kernel / 2;
  a.set("pads", std::vector<int64_t>{p, p, p, p});
  a.set("strides", std::vector<int64_t>{stride, stride});
  ir::Tensor* y = g.addNode("Conv", "", {x, w, b}, {"conv"}, a)->output(0);
  if (relu) y = g.addNode("Relu", "", {y}, {"y"})->output(0);
  g.addOutput(y);
  int64_t out = (hw + 2 * p - kernel) / stride + 1;
  l.flops = 2.0 * n * k * c * kernel * kernel * out * out;
  l.inputs.push_back(randomArray({n, c, hw, hw}, 3));
  return l;
}

Layer matmulLayer(const std::string& name, int64_t m, int64_t kk, int64_t nn, bool bias = true) {
  Layer l;
  l.name = name;
  l.graph = std::make_unique<ir::Graph>(name);
  ir::Graph& g = *l.graph;
  ir::Tensor* x =
      g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{m, kk})), ir::TensorKind::Input);
  g.addInput(x);
  ir::Tensor* w = g.addInitializer("w", randomArray({kk, nn}, 4));
  ir::Tensor* y = g.addNode("MatMul", "", {x, w}, {"mm"})->output(0);
  if (bias) y = g.addNode("Add", "", {y, g.addInitializer("b", randomArray({nn}, 5))}, {"y"})->output(0);
  g.addOutput(y);
  l.flops = 2.0 * m * kk * nn;
  l.inputs.push_back(randomArray({m, kk}, 6));
  return l;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, repeats = 7;
  double roof = 0;  // measured unless given
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--threads")
      threads = std::stoi(next());
    else if (a == "--repeats")
      repeats = std::max(1, std::stoi(next()));
    else if (a == "--roof")
      roof = std::stod(next());
    else if (a == "--filter")
      filter = next();
    else {
      std::fprintf(stderr, "usage: layers_bench [--threads N] [--repeats R] [--roof GFLOPS] [--filter SUBSTR]\n");
      return 2;
    }
  }
  std::vector<Layer> layers;
  // ResNet-50 at batch 8 and a VGG-style layer; BERT-base FFN and attention projections.
  layers.push_back(convLayer("conv 7x7/2 3->64 224 b8 (stem)", 8, 3, 224, 64, 7, 2));
  layers.push_back(convLayer("conv 3x3 64->64 56 b8", 8, 64, 56, 64, 3, 1));
  layers.push_back(convLayer("conv 1x1 64->256 56 b8", 8, 64, 56, 256, 1, 1));
  layers.push_back(convLayer("conv 3x3 128->128 28 b8", 8, 128, 28, 128, 3, 1));
  layers.push_back(convLayer("conv 3x3 256->256 14 b8", 8, 256, 14, 256, 3, 1));
  layers.push_back(convLayer("conv 1x1 1024->256 14 b8", 8, 1024, 14, 256, 1, 1));
  layers.push_back(convLayer("conv 3x3 512->512 7 b8", 8, 512, 7, 512, 3, 1));
  layers.push_back(convLayer("conv 3x3 256->256 56 b1 (vgg)", 1, 256, 56, 256, 3, 1));
  // resnet's 3x3 convolutions at batch 1 and squeezenet's widest expand (Winograd below 0.4 GFLOP).
  layers.push_back(convLayer("conv 3x3 64->64 56 b1", 1, 64, 56, 64, 3, 1));
  layers.push_back(convLayer("conv 3x3 128->128 28 b1", 1, 128, 28, 128, 3, 1));
  layers.push_back(convLayer("conv 3x3 256->256 14 b1", 1, 256, 14, 256, 3, 1));
  layers.push_back(convLayer("conv 3x3 512->512 7 b1", 1, 512, 7, 512, 3, 1));
  // resnet50's 1x1 convolutions at batch 1 (conv1x1_avx2 on AVX2 hosts: 0.1 GFLOP, few tasks).
  layers.push_back(convLayer("conv 1x1 256->1024 14 b1", 1, 256, 14, 1024, 1, 1));
  layers.push_back(convLayer("conv 1x1 1024->256 14 b1", 1, 1024, 14, 256, 1, 1));
  layers.push_back(convLayer("conv 1x1 512->2048 7 b1", 1, 512, 7, 2048, 1, 1));
  layers.push_back(convLayer("conv 3x3 64->256 13 b1 (squeezenet)", 1, 64, 13, 256, 3, 1));
  layers.push_back(convLayer("conv 3x3 64->256 13 b8 (squeezenet)", 8, 64, 13, 256, 3, 1));
  layers.push_back(matmulLayer("matmul 2048x2048x2048 (sgemm roof)", 2048, 2048, 2048, false));
  layers.push_back(matmulLayer("matmul 512x768x3072 +bias (bert ffn1)", 512, 768, 3072));
  layers.push_back(matmulLayer("matmul 512x3072x768 +bias (bert ffn2)", 512, 3072, 768));
  layers.push_back(matmulLayer("matmul 512x768x768 +bias (bert proj)", 512, 768, 768));
  layers.push_back(matmulLayer("matmul 256x2048x2048 +bias (mlp b256)", 256, 2048, 2048));
  layers.push_back(matmulLayer("matmul 128x768x3072 +bias (bert b1 ffn1)", 128, 768, 3072));
  layers.push_back(matmulLayer("matmul 128x768x2304 +bias (bert b1 qkv)", 128, 768, 2304));
  layers.push_back(matmulLayer("matmul 128x3072x768 +bias (bert b1 ffn2)", 128, 3072, 768));
  layers.push_back(matmulLayer("matmul 128x768x768 +bias (bert b1 proj)", 128, 768, 768));
  // Matrix-vector products (batch-1 linear layers): bound by reading the weights, not by FMAs.
  layers.push_back(matmulLayer("gemv 1x2048x2048 +bias (mlp b1)", 1, 2048, 2048));
  layers.push_back(matmulLayer("gemv 1x784x2048 +bias (mlp b1)", 1, 784, 2048));
  layers.push_back(matmulLayer("gemv 1x768x3072 +bias", 1, 768, 3072));
  layers.push_back(matmulLayer("gemv 1x768x768 +bias", 1, 768, 768));
  layers.push_back(matmulLayer("gemv 1x256x256 +bias", 1, 256, 256));
  layers.push_back(matmulLayer("gemv 2x2048x2048 +bias", 2, 2048, 2048));
  layers.push_back(matmulLayer("gemv 4x2048x2048 +bias", 4, 2048, 2048));
  layers.push_back(matmulLayer("gemv 4x768x768 +bias", 4, 768, 768));

  auto backend = backends::makeCpuBackend(threads);
  support::ThreadPool pool(backend->numThreads());
  std::string roofFrom = "given";
  if (roof <= 0) {
    const support::CpuFeatures& f = support::cpuFeatures();  // below GRAFT_CPU_ISA
    if (!(f.avx2 && f.fma)) {
      std::fprintf(stderr, "layers_bench: this CPU (or GRAFT_CPU_ISA) has no AVX2+FMA: give the roof with --roof\n");
      return 2;
    }
    bool wide = f.avx512f;
    roof = fma_roof::bestRate(backend->numThreads(), 0.3, wide);
    roofFrom = std::string("measured, ") + (wide ? "AVX-512" : "AVX2") + " FMAs";
  }
  std::printf("graft cpu backend, %d threads, FMA roof %.0f GFLOP/s (%s); median and best of %d timings\n\n",
              backend->numThreads(), roof, roofFrom.c_str(), repeats);
  std::printf(
      "| layer | GFLOP | median ms | best ms | median GFLOP/s | best GFLOP/s | %% of roof (median) | edge reorders ms "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (Layer& l : layers) {
    if (!filter.empty() && l.name.find(filter) == std::string::npos) continue;
    passes::PassContext ctx;
    ctx.weightsAreConstant = true;
    passes::runPipeline(*l.graph, backend->passes(backends::PassMode::Inference), ctx);
    auto exe = plan::compile(*l.graph, *backend, pool);
    auto once = [&] {
      std::vector<ops::Value> in;
      for (const NDArray& a : l.inputs) in.push_back(ops::Value::fromTensor(a));
      exe->run(std::move(in));
    };
    for (int i = 0; i < 3; ++i) once();
    std::vector<double> kernel, edges;
    for (int r = 0; r < repeats; ++r) {
      exe->setProfiling(true);
      // Fresh profile per repeat: a new executable would recompile; differences of totals do.
      auto before = exe->profile();
      int runs = 0;
      auto t0 = std::chrono::steady_clock::now();
      do {
        once();
        ++runs;
      } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 0.2);
      auto after = exe->profile();
      std::map<std::string, double> delta;
      for (const auto& e : after) delta[e.opType] += e.seconds;
      for (const auto& e : before) delta[e.opType] -= e.seconds;
      double k = 0, edge = 0;
      for (const auto& [op, s] : delta) (op == "ToBlocked" || op == "FromBlocked" ? edge : k) += s;
      kernel.push_back(k / runs);
      edges.push_back(edge / runs);
    }
    double med = median(kernel), best = *std::min_element(kernel.begin(), kernel.end());
    std::printf("| %s | %.2f | %.3f | %.3f | %.1f | %.1f | %.0f%% | %.3f |\n", l.name.c_str(), l.flops / 1e9, med * 1e3,
                best * 1e3, l.flops / med / 1e9, l.flops / best / 1e9, 100 * l.flops / med / 1e9 / roof,
                median(edges) * 1e3);
    std::fflush(stdout);
  }
  return 0;
}
