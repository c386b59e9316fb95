// Times oneDNN forward-inference convolutions (NHWC activations, weights as the primitive picks,
// bias and ReLU, the residual sum where the block has one) of the zoo's resnet50, squeezenet1_1
// and (most of) mobilenet_v2 layers; the same source builds against the oneDNN 2.x API (Debian's
// 2.6) and the 3.x API (PyPI's onednn-cpu-gomp 3.2), so that the two versions can be compared
// without porting graft (bench/onednn_versions.sh builds and runs both; docs/cpu-backend.md has
// the numbers). Prints per-model totals: each layer's median of 10 timed runs times its count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <dnnl.hpp>
#include <string>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

struct L {
  int C, M, H, k, s, p, g, count;
  bool sum;
};

double timeConv(engine& eng, stream& st, int N, const L& l, std::string* impl) {
  int OH = (l.H + 2 * l.p - l.k) / l.s + 1;
  memory::dims src{N, l.C, l.H, l.H}, dst{N, l.M, OH, OH};
  memory::dims wei = l.g == 1 ? memory::dims{l.M, l.C, l.k, l.k} : memory::dims{l.g, l.M / l.g, l.C / l.g, l.k, l.k};
  memory::desc sd(src, dt::f32, tag::acdb), dd(dst, dt::f32, tag::acdb), wd(wei, dt::f32, tag::any);
  memory::desc bd({l.M}, dt::f32, tag::a);
  post_ops po;
  if (l.sum) po.append_sum(1.f);
#if DNNL_VERSION_MAJOR >= 3
  po.append_eltwise(algorithm::eltwise_relu, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(po);
  convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference, algorithm::convolution_direct, sd, wd, bd,
                                         dd, {l.s, l.s}, {0, 0}, {l.p, l.p}, {l.p, l.p}, attr);
#else
  po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(po);
  convolution_forward::desc d(prop_kind::forward_inference, algorithm::convolution_direct, sd, wd, bd, dd, {l.s, l.s},
                              {0, 0}, {l.p, l.p}, {l.p, l.p});
  convolution_forward::primitive_desc pd(d, attr, eng);
#endif
  *impl = pd.impl_info_str();
  memory s(sd, eng), w(pd.weights_desc(), eng), b(bd, eng), o(dd, eng);
  std::fill((float*)s.get_data_handle(), (float*)s.get_data_handle() + sd.get_size() / 4, 0.5f);
  std::fill((float*)w.get_data_handle(), (float*)w.get_data_handle() + pd.weights_desc().get_size() / 4, 0.01f);
  convolution_forward c(pd);
  std::vector<double> t;
  for (int r = 0; r < 12; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    c.execute(st, {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, o}});
    st.wait();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin() + 2, t.end());
  return t[2 + (t.size() - 2) / 2];
}

int main(int argc, char** argv) {
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  int N = argc > 1 ? atoi(argv[1]) : 8;
  std::vector<std::pair<std::string, std::vector<L>>> models = {
      {"resnet50", {{3, 64, 224, 7, 2, 3, 1, 1, false},     {64, 64, 56, 1, 1, 0, 1, 1, false},
                    {256, 64, 56, 1, 1, 0, 1, 2, false},    {64, 64, 56, 3, 1, 1, 1, 3, false},
                    {64, 256, 56, 1, 1, 0, 1, 3, true},     {64, 256, 56, 1, 1, 0, 1, 1, false},
                    {256, 128, 56, 1, 1, 0, 1, 1, false},   {128, 128, 56, 3, 2, 1, 1, 1, false},
                    {256, 512, 56, 1, 2, 0, 1, 1, false},   {512, 128, 28, 1, 1, 0, 1, 3, false},
                    {128, 128, 28, 3, 1, 1, 1, 3, false},   {128, 512, 28, 1, 1, 0, 1, 4, true},
                    {512, 256, 28, 1, 1, 0, 1, 1, false},   {256, 256, 28, 3, 2, 1, 1, 1, false},
                    {512, 1024, 28, 1, 2, 0, 1, 1, false},  {1024, 256, 14, 1, 1, 0, 1, 5, false},
                    {256, 256, 14, 3, 1, 1, 1, 5, false},   {256, 1024, 14, 1, 1, 0, 1, 6, true},
                    {1024, 512, 14, 1, 1, 0, 1, 1, false},  {512, 512, 14, 3, 2, 1, 1, 1, false},
                    {1024, 2048, 14, 1, 2, 0, 1, 1, false}, {2048, 512, 7, 1, 1, 0, 1, 2, false},
                    {512, 512, 7, 3, 1, 1, 1, 2, false},    {512, 2048, 7, 1, 1, 0, 1, 3, true}}},
      {"squeezenet1_1",
       {{3, 64, 224, 3, 2, 0, 1, 1, false},
        {64, 16, 55, 1, 1, 0, 1, 1, false},
        {16, 64, 55, 1, 1, 0, 1, 2, false},
        {16, 64, 55, 3, 1, 1, 1, 2, false},
        {128, 16, 55, 1, 1, 0, 1, 1, false},
        {128, 32, 27, 1, 1, 0, 1, 1, false},
        {32, 128, 27, 1, 1, 0, 1, 2, false},
        {32, 128, 27, 3, 1, 1, 1, 2, false},
        {256, 32, 27, 1, 1, 0, 1, 1, false},
        {256, 48, 13, 1, 1, 0, 1, 1, false},
        {48, 192, 13, 1, 1, 0, 1, 2, false},
        {48, 192, 13, 3, 1, 1, 1, 2, false},
        {384, 48, 13, 1, 1, 0, 1, 1, false},
        {384, 64, 13, 1, 1, 0, 1, 1, false},
        {64, 256, 13, 1, 1, 0, 1, 2, false},
        {64, 256, 13, 3, 1, 1, 1, 2, false},
        {512, 64, 13, 1, 1, 0, 1, 1, false},
        {512, 1000, 13, 1, 1, 0, 1, 1, false}}},
      {"mobilenet_v2 (part)", {{3, 32, 224, 3, 2, 1, 1, 1, false},     {32, 32, 112, 3, 1, 1, 32, 1, false},
                               {32, 16, 112, 1, 1, 0, 1, 1, false},    {16, 96, 112, 1, 1, 0, 1, 1, false},
                               {96, 96, 112, 3, 2, 1, 96, 1, false},   {96, 24, 56, 1, 1, 0, 1, 1, false},
                               {24, 144, 56, 1, 1, 0, 1, 2, false},    {144, 144, 56, 3, 1, 1, 144, 1, false},
                               {144, 24, 56, 1, 1, 0, 1, 1, true},     {144, 144, 56, 3, 2, 1, 144, 1, false},
                               {144, 32, 28, 1, 1, 0, 1, 1, false},    {32, 192, 28, 1, 1, 0, 1, 3, false},
                               {192, 192, 28, 3, 1, 1, 192, 2, false}, {192, 32, 28, 1, 1, 0, 1, 2, true},
                               {384, 384, 14, 3, 1, 1, 384, 3, false}, {64, 384, 14, 1, 1, 0, 1, 4, false},
                               {384, 64, 14, 1, 1, 0, 1, 3, true},     {960, 960, 7, 3, 1, 1, 960, 3, false},
                               {160, 960, 7, 1, 1, 0, 1, 3, false},    {960, 160, 7, 1, 1, 0, 1, 2, true},
                               {320, 1280, 7, 1, 1, 0, 1, 1, false}}},
  };
  const dnnl_version_t* v = dnnl_version();
  printf("oneDNN %d.%d.%d, batch %d\n", v->major, v->minor, v->patch, N);
  for (auto& [name, layers] : models) {
    double total = 0, flops = 0;
    std::string impls;
    for (const L& l : layers) {
      std::string impl;
      double t = timeConv(eng, st, N, l, &impl);
      int OH = (l.H + 2 * l.p - l.k) / l.s + 1;
      flops += 2.0 * N * l.M * OH * OH * (l.C / l.g) * l.k * l.k * l.count;
      total += t * l.count;
      if (impls.find(impl) == std::string::npos) impls += impl + " ";
    }
    printf("%-20s %8.2f ms  %6.1f GFLOP/s  %s\n", name.c_str(), total * 1e3, flops / total * 1e-9, impls.c_str());
  }
}
