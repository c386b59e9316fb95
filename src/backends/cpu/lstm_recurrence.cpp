// The recurrent product of graft's batched LSTM kernels (lstm_recurrence.hpp).
#include "backends/cpu/lstm_recurrence.hpp"

#include <algorithm>
#include <cstring>

#include "backends/cpu/bf16.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/sgemm_avx2.hpp"

namespace graft::backends::cpu {

using onednn::memory;

void RecurrentSlice::packFrom(const float* r) const {
  rows.resize(static_cast<size_t>(4 * nu * H));
  for (int64_t q = 0; q < 4; ++q) std::memcpy(rows.data() + q * nu * H, r + (q * H + u0) * H, sizeof(float) * nu * H);
  if (ownGemm) {
    // B' [H, 4nu] is the gathered rows [4nu, H] read transposed (geometry.transB).
    packPanels(rows.data(), geometry, sgemm::panelWidth(), panels.data);
    return;
  }
  auto& eng = onednn::engine();
  memory from(user, eng, static_cast<void*>(rows.data()));
  onednn::execute(pack, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, weights}});
}

void RecurrentSlice::run(const float* h, float* gates) const {
  if (ownGemm) return sgemm::gemmSerial(geometry, h, H, panels.data, gates);
  srcMem.set_data_handle(const_cast<float*>(h));
  dstMem.set_data_handle(gates);
  onednn::execute(
      prim,
      {{DNNL_ARG_SRC, srcMem}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dstMem}, {DNNL_ARG_SCRATCHPAD, scratch}});
}

std::vector<RecurrentSlice> makeRecurrentSlices(int64_t N, int64_t H, int team, std::string* impl) {
  team = static_cast<int>(std::clamp<int64_t>(team, 1, (H + 15) / 16));  // a block of 16 units each at least
  auto f32 = memory::data_type::f32;
  auto& eng = onednn::engine();
  onednn::setThreads(1);
  std::vector<RecurrentSlice> slices;
  try {
    for (int tid = 0; tid < team; ++tid) {
      RecurrentSlice m;
      const std::pair<int64_t, int64_t> units = hiddenUnitRange(H, tid, team);
      m.u0 = units.first;
      m.nu = units.second - units.first;
      m.N = N;
      m.H = H;
      if (sgemm::available()) {
        m.ownGemm = true;
        m.geometry.M = N;
        m.geometry.K = H;
        m.geometry.N = 4 * m.nu;
        m.geometry.transB = true;
        m.panels.allocate(numPanels(m.geometry.N, sgemm::panelWidth()) * H * sgemm::panelWidth());
        if (impl) *impl = "sgemm_avx2";
        slices.push_back(std::move(m));
        continue;
      }
      m.src = memory::desc({N, H}, f32, memory::format_tag::ab);
      m.dst = memory::desc({N, 4 * m.nu}, f32, memory::format_tag::ab);
      // [H, 4nu] read column by column from R's rows: element (k, j) at j * H + k.
      m.user = memory::desc({H, 4 * m.nu}, f32, memory::format_tag::ba);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(m.src, memory::desc({H, 4 * m.nu}, f32, memory::format_tag::any), m.dst), attr, eng);
      if (isReferenceImplementation(pd.impl_info_str())) return {};
      if (impl) *impl = pd.impl_info_str();
      m.prim = dnnl::matmul(pd);
      m.scratch = memory(pd.scratchpad_desc(), eng);
      m.weights = memory(pd.weights_desc(), eng);
      m.srcMem = memory(m.src, eng, static_cast<void*>(nullptr));
      m.dstMem = memory(m.dst, eng, static_cast<void*>(nullptr));
      m.pack = dnnl::reorder(dnnl::reorder::primitive_desc(eng, m.user, eng, pd.weights_desc()));
      slices.push_back(std::move(m));
    }
  } catch (const dnnl::error&) {
    return {};
  }
  return slices;
}

}  // namespace graft::backends::cpu
