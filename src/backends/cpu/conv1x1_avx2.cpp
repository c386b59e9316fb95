// graft's 1x1 convolution for AVX2 hosts: ai.graft FusedConv with a 1x1 kernel, stride 1, no
// padding, one group, float32, activations in 8-channel blocks ([N, C/8, H, W, 8], the layout
// the cpu-layout pass gives convolution graphs on AVX2 hosts), constant weights, an optional
// residual sum and Relu. Per image such a convolution is a matrix product, Y (pixels x M) = X
// (pixels x C) W', which runs on sgemm_avx2's 6x16 register blocks reading X and writing Y in
// their blocks in place (sgemm::gemmBlocked8): six pixels by two blocks of output channels, the
// weights packed once into the kernel's panels. oneDNN 2.6's jit_1x1:avx2 ran resnet50's and
// squeezenet's 1x1 convolutions at 55-80% of the FMA roof (docs/cpu-backend.md, "1x1
// convolutions on AVX2").
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/conv_avx2.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/gemm_geometry.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/onednn_conv.hpp"
#include "backends/cpu/sgemm_avx2.hpp"
#include "ops/registry.hpp"
#include "support/check.hpp"
#include "support/thread_pool.hpp"

namespace graft::backends::cpu::conv1x1 {
namespace {

constexpr int64_t kBlock = 8;
constexpr int64_t kRowsPerTask = 132;  // pixels per task (sgemm_avx2's row chunk)

struct Geometry {
  int64_t N = 0, C = 0, M = 0, pixels = 0, Cb = 0, Mb = 0;
};

std::optional<Geometry> geometry(const ir::Node& n) {
  // The switch first, on every host: a bad value is an error wherever a convolution is compiled.
  if (onednn::conv1x1Mode() == onednn::KernelMode::Off) return std::nullopt;
  auto cfg = avx2BlockedConv(n);
  if (!cfg) return std::nullopt;
  const onednn::ConvConfig& c = *cfg;
  if (!isPointwiseWindow(c)) return std::nullopt;
  Geometry g;
  g.N = c.x[0];
  g.C = c.x[1];
  g.M = c.y[1];
  g.pixels = c.x[2] * c.x[3];
  g.Cb = (g.C + kBlock - 1) / kBlock;
  g.Mb = (g.M + kBlock - 1) / kBlock;
  if (g.pixels < 1) return std::nullopt;
  return g;
}

bool supports(const ir::Node& n) { return geometry(n).has_value(); }

struct State {
  Geometry g;
  ConvEpilogue e;
  AlignedFloats w;      // W' (Cb * 8 x Mb * 8, zero-padded) in sgemm_avx2's panels
  bool stream = false;  // Y through streaming stores (onednn::conv1x1Streams)
};

void run(const State& st, ops::KernelContext& k) {
  const Geometry& g = st.g;
  NDArray& y = convOutput(st.e, k);
  const float* x = k.input(0).data<float>();
  float* yp = y.data<float>();
  const int64_t mPad = g.Mb * kBlock;
  std::vector<float> bias;
  if (st.e.bias) {
    bias.assign(static_cast<size_t>(mPad), 0.f);
    std::memcpy(bias.data(), k.input(2).data<float>(), sizeof(float) * static_cast<size_t>(g.M));
  }
  // Streaming stores (large outputs, onednn::conv1x1Streams) need 32-byte aligned blocks; Y's
  // blocks are whole ymm, so its base decides.
  const sgemm::Blocked8Epilogue ep{st.e.bias ? bias.data() : nullptr, g.M, st.e.relu,
                                   st.stream && reinterpret_cast<uintptr_t>(yp) % 32 == 0};
  const int64_t P = numPanels(mPad, sgemm::panelWidth());
  support::ThreadPool& pool = k.pool();
  // Tasks: images x pixel chunks x column chunks of equal size, in whole rounds for the threads
  // where the panels allow (as sgemm_avx2's own products).
  const int64_t rowChunks = (g.pixels + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t panels = sgemm::panelsPerChunk(P, g.N * rowChunks, pool.numThreads());
  const int64_t colChunks = (P + panels - 1) / panels;
  const int64_t rows = (g.pixels + rowChunks - 1) / rowChunks;
  const int64_t imageIn = g.Cb * g.pixels * kBlock, imageOut = g.Mb * g.pixels * kBlock;
  pool.runTasks(static_cast<int>(g.N * rowChunks * colChunks), [&](int i) {
    const int64_t n = i / (rowChunks * colChunks), rc = (i / colChunks) % rowChunks, cc = i % colChunks;
    sgemm::Blocked8Task t;
    t.x = x + n * imageIn;
    t.y = yp + n * imageOut;
    t.xBlockStride = t.yBlockStride = g.pixels * kBlock;
    t.channelBlocks = g.Cb;
    t.columns = mPad;
    t.r0 = rc * rows;
    t.r1 = std::min(g.pixels, t.r0 + rows);
    t.p0 = cc * panels;
    t.p1 = std::min(P, t.p0 + panels);
    t.accumulate = st.e.sum;
    sgemm::gemmBlocked8(t, st.w.data, ep);
  });
}

ops::KernelFn make(ops::CompileContext& ctx) {
  const ir::Node& n = ctx.node();
  auto g = geometry(n);
  GRAFT_ASSERT(g.has_value(), "{}: conv1x1_avx2 on a node it cannot serve", n.describe());
  const NDArray* w = ctx.constantInput(1);
  GRAFT_ASSERT(w, "{}: conv1x1_avx2 without constant weights", n.describe());
  auto st = std::make_shared<State>();
  st->g = *g;
  st->e = convEpilogue(n);
  st->stream =
      onednn::conv1x1Streams(g->N * g->Mb * kBlock * g->pixels * static_cast<int64_t>(sizeof(float)), st->e.sum);
  // W [M, C] -> W' [cPad, mPad] (zero-padded), packed into panels.
  const int64_t cPad = g->Cb * kBlock, mPad = g->Mb * kBlock;
  std::vector<float> wt(static_cast<size_t>(cPad * mPad), 0.f);
  const float* wp = w->data<float>();
  for (int64_t m = 0; m < g->M; ++m)
    for (int64_t c = 0; c < g->C; ++c) wt[static_cast<size_t>(c * mPad + m)] = wp[m * g->C + c];
  GemmGeometry gg;
  gg.M = 1;
  gg.K = cPad;
  gg.N = mPad;
  st->w.allocate(numPanels(mPad, sgemm::panelWidth()) * cPad * sgemm::panelWidth());
  packPanels(wt.data(), gg, sgemm::panelWidth(), st->w.data);
  return [st](ops::KernelContext& k) { run(*st, k); };
}

}  // namespace
}  // namespace graft::backends::cpu::conv1x1

GRAFT_REGISTER_CPU_KERNELS(conv1x1_avx2) {
  using namespace graft::backends::cpu::conv1x1;
  // Ahead of oneDNN's convolution (priority 0), where it takes the node.
  r.add({graft::ops::kGraftDomain, "FusedConv", "conv1x1_avx2", supports, make, 1});
}
