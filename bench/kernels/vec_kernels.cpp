// Times the cpu backend's vectorised kernels against the reference kernels on representative
// single-op workloads (median of several runs), and a fused elementwise chain against the same
// ops unfused. Usage: vec_kernels_bench [runs] [filter]. Prints a Markdown table.
#include <graft/ndarray.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "ir/graph.hpp"
#include "ops/fused_program.hpp"
#include "passes/pass.hpp"
#include "plan/executable.hpp"
#include "support/float16.hpp"

using namespace graft;

namespace {

NDArray randomArray(DataType dt, Shape s, uint64_t seed, double lo = -2, double hi = 2) {
  NDArray a(dt, std::move(s));
  std::mt19937_64 r(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < a.numel(); ++i) {
    double v = u(r);
    switch (dt) {
      case DataType::Float: a.data<float>()[i] = static_cast<float>(v); break;
      case DataType::Int64: a.data<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DataType::Bool: a.data<bool>()[i] = v > 0; break;
      default: a.data<Half>()[i] = Half(static_cast<float>(v)); break;
    }
  }
  return a;
}

struct Workload {
  std::string name;
  std::function<std::unique_ptr<ir::Graph>()> build;
  std::vector<NDArray> inputs;  // graph inputs in order
};

// A graph of one node; inputs listed as `constant` become constants (indices, shapes).
std::unique_ptr<ir::Graph> oneNode(const std::string& type, const std::vector<NDArray>& in, const std::vector<bool>& constant,
                                   ir::Attributes attrs = {}, const std::string& domain = "", int nout = 1) {
  auto g = std::make_unique<ir::Graph>("bench");
  if (!domain.empty()) g->otherOpsets[domain] = 1;
  std::vector<ir::Tensor*> ts;
  for (size_t i = 0; i < in.size(); ++i) {
    std::string id = "in" + std::to_string(i);
    if (constant[i]) {
      ts.push_back(g->addInitializer(id, in[i], ir::TensorKind::Constant));
    } else {
      ir::Tensor* t = g->addTensor(id, ir::ValueType::tensor(TensorInfo(in[i].dtype(), in[i].shape())), ir::TensorKind::Input);
      g->addInput(t);
      ts.push_back(t);
    }
  }
  std::vector<std::string> outs;
  for (int i = 0; i < nout; ++i) outs.push_back("out" + std::to_string(i));
  ir::Node* n = g->addNode(type, domain, ts, outs, std::move(attrs));
  for (ir::Tensor* t : n->outputs()) g->addOutput(t);
  passes::PassContext ctx;
  passes::runPipeline(*g, {"infer-shapes"}, ctx);
  return g;
}

double medianMs(plan::Executable& exe, const std::vector<NDArray>& inputs, int runs) {
  std::vector<double> t;
  for (int r = -1; r < runs; ++r) {
    std::vector<ops::Value> in;
    for (const auto& a : inputs) in.push_back(ops::Value::fromTensor(a));
    auto t0 = std::chrono::steady_clock::now();
    exe.run(std::move(in));
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 0) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

ir::Attributes attrs(std::initializer_list<std::pair<std::string, ir::AttrValue>> l) {
  ir::Attributes a;
  for (const auto& [k, v] : l) a.set(k, v);
  return a;
}

std::vector<NDArray> inputsOf(const std::vector<NDArray>& all, const std::vector<bool>& constant) {
  std::vector<NDArray> out;
  for (size_t i = 0; i < all.size(); ++i)
    if (!constant[i]) out.push_back(all[i]);
  return out;
}

// Compiles every node with one given cpu kernel, to time kernels registered for the same op
// against each other (the backend itself picks one).
class OneKernel : public plan::KernelProvider {
 public:
  explicit OneKernel(const backends::cpu::CpuKernelDef& d) : def_(d) {}
  std::string name() const override { return def_.name; }
  bool supports(const ir::Node& n) const override { return def_.supports(n); }
  ops::KernelFn createKernel(ops::CompileContext& ctx) override { return def_.factory(ctx); }

 private:
  const backends::cpu::CpuKernelDef& def_;
};

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 7;
  std::string filter = argc > 2 ? argv[2] : "";
  auto F = DataType::Float;
  std::vector<Workload> ws;
  auto add = [&](std::string name, std::string type, std::vector<NDArray> in, std::vector<bool> constant, ir::Attributes a = {},
                 std::string domain = "", int nout = 1) {
    ws.push_back({name, [=] { return oneNode(type, in, constant, a, domain, nout); }, inputsOf(in, constant)});
  };
  NDArray big = randomArray(F, {64, 128, 768}, 1), big2 = randomArray(F, {64, 128, 768}, 2);
  NDArray act = randomArray(F, {8192, 768}, 3), act4 = randomArray(F, {4096, 3072}, 4);
  add("Add same shape [64,128,768]", "Add", {big, big2}, {false, false});
  add("Add bias row [8192,768]+[768]", "Add", {act, randomArray(F, {768}, 5)}, {false, false});
  add("Mul column [8192,768]*[8192,1]", "Mul", {act, randomArray(F, {8192, 1}, 6)}, {false, false});
  add("Relu [64,128,768]", "Relu", {big}, {false});
  add("Sigmoid [8192,768]", "Sigmoid", {act}, {false});
  add("Tanh [8192,768]", "Tanh", {act}, {false});
  add("Exp [8192,768]", "Exp", {act}, {false});
  add("GeluErf [4096,3072]", "GeluErf", {act4}, {false}, {}, "ai.graft");
  add("Where [8192,768]", "Where", {randomArray(DataType::Bool, {8192, 768}, 7), act, randomArray(F, {}, 8)}, {false, false, false});
  add("Cast float->half [8192,768]", "Cast", {act}, {false}, attrs({{"to", int64_t{10}}}));
  add("LayerNormalization [4096,768]", "LayerNormalization",
      {randomArray(F, {4096, 768}, 9), randomArray(F, {768}, 10), randomArray(F, {768}, 11)}, {false, true, true},
      attrs({{"axis", int64_t{-1}}}));
  add("ReduceSum last axis [8192,768]", "ReduceSum", {act, NDArray::scalar<int64_t>(DataType::Int64, -1).reshaped({1})},
      {false, true});
  add("ReduceMean axis 0 [8192,768]", "ReduceMean", {act}, {false}, attrs({{"axes", std::vector<int64_t>{0}}}));
  add("ArgMax last axis [8192,768]", "ArgMax", {act}, {false}, attrs({{"axis", int64_t{-1}}}));
  add("Transpose [32,128,12,64] 0213", "Transpose", {randomArray(F, {32, 128, 12, 64}, 12)}, {false},
      attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  add("Transpose [32,12,128,64] 0132", "Transpose", {randomArray(F, {32, 12, 128, 64}, 13)}, {false},
      attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
  NDArray ids = randomArray(DataType::Int64, {32, 128}, 14, 0, 30000);
  add("Gather embeddings [30522,768] x [32,128]", "Gather", {randomArray(F, {30522, 768}, 15), ids}, {true, false});
  add("Concat 3x[32,128,256] last axis", "Concat",
      {randomArray(F, {32, 128, 256}, 16), randomArray(F, {32, 128, 256}, 17), randomArray(F, {32, 128, 256}, 18)},
      {false, false, false}, attrs({{"axis", int64_t{-1}}}));
  NDArray sliceStarts = NDArray::scalar<int64_t>(DataType::Int64, 1).reshaped({1});
  NDArray sliceEnds = NDArray::scalar<int64_t>(DataType::Int64, 767).reshaped({1});
  NDArray sliceAxes = NDArray::scalar<int64_t>(DataType::Int64, 1).reshaped({1});
  add("Slice [8192,1:767]", "Slice", {act, sliceStarts, sliceEnds, sliceAxes}, {false, true, true, true});
  add("UnbroadcastTo [8192,768]->[768]", "UnbroadcastTo", {act, randomArray(F, {768}, 19)}, {false, false}, {}, "ai.graft");
  // Training-mode batch norm and its gradient, NCHW and channels last (ChannelBlocked, as the
  // cpu-layout-training pass writes it), at mobilenet_v2 b8's widest layer and a resnet one.
  for (Shape s : std::vector<Shape>{{8, 96, 112, 112}, {8, 256, 56, 56}}) {
    int64_t C = s[1];
    Shape nhwc{s[0], 1, s[2], s[3], C};
    std::string tag = "[" + std::to_string(s[0]) + "," + std::to_string(C) + "," + std::to_string(s[2]) + "," +
                      std::to_string(s[3]) + "]";
    NDArray x = randomArray(F, s, 30), xl = randomArray(F, nhwc, 30), dy = randomArray(F, s, 31),
            dyl = randomArray(F, nhwc, 31);
    std::vector<NDArray> params{randomArray(F, {C}, 32, 0.5, 1.5), randomArray(F, {C}, 33), randomArray(F, {C}, 34),
                                randomArray(F, {C}, 35, 0.5, 2)};
    ir::Attributes train = attrs({{"training_mode", int64_t{1}}, {"momentum", 0.f}});
    std::vector<NDArray> in{x};
    in.insert(in.end(), params.begin(), params.end());
    add("BatchNormalization train NCHW " + tag, "BatchNormalization", in, {false, true, true, true, true}, train, "",
        3);
    in[0] = xl;
    ir::Attributes blocked = train;
    blocked.set("op", std::string("BatchNormalization"));
    blocked.set("block", C);
    blocked.set("channels", C);
    add("BatchNormalization train NHWC " + tag, "ChannelBlocked", in, {false, true, true, true, true}, blocked,
        "ai.graft", 3);
    add("BatchNormalizationGrad NCHW " + tag, "BatchNormalizationGrad", {dy, x, params[0], params[2], params[3]},
        {false, false, true, true, true}, {}, "ai.graft", 3);
    ir::Attributes grad;
    grad.set("op", std::string("BatchNormalizationGrad"));
    grad.set("op_domain", std::string("ai.graft"));
    grad.set("block", C);
    grad.set("channels", C);
    grad.set("blocked_inputs", std::vector<int64_t>{0, 1});
    grad.set("input_channels", std::vector<int64_t>{C, C});
    add("BatchNormalizationGrad NHWC " + tag, "ChannelBlocked", {dyl, xl, params[0], params[2], params[3]},
        {false, false, true, true, true}, grad, "ai.graft", 3);
  }
  auto scalarF = [](float v) { return NDArray::scalar<float>(DataType::Float, v); };
  NDArray w = randomArray(F, {10000000}, 20), g = randomArray(F, {10000000}, 21), m = randomArray(F, {10000000}, 22),
          v = randomArray(F, {10000000}, 23, 0, 1);
  add("AdamUpdate 10M params", "AdamUpdate",
      {w, g, m, v, scalarF(1), scalarF(1e-3f), scalarF(0.01f), scalarF(0.9f), scalarF(0.999f), scalarF(1e-8f), scalarF(1),
       scalarF(100)},
      {false, false, false, false, false, true, true, true, true, true, true, true}, {}, "ai.graft", 0);
  add("SGDUpdate momentum 10M params", "SGDUpdate",
      {w, g, scalarF(0.01f), scalarF(0), scalarF(0.9f), scalarF(0), scalarF(1), scalarF(1), m},
      {false, false, true, true, true, true, true, true, false}, {}, "ai.graft", 0);
  // x * w + b -> tanh -> * 0.5 + 0.5 (five ops) as one FusedElementwise node.
  {
    using ops::fused::Code;
    ops::fused::Program p;
    p.instrs = {{Code::Mul, 0, 1}, {Code::Add, 3, 2}, {Code::Tanh, 4}, {Code::Const, -1, -1, -1, 0.5f},
                {Code::Mul, 5, 6}, {Code::Add, 7, 6}};
    p.outputs = {8};
    ir::Attributes a;
    p.toAttributes(a);
    add("FusedElementwise 5-op chain [8192,768]", "FusedElementwise", {act, randomArray(F, {768}, 24), randomArray(F, {768}, 25)},
        {false, false, false}, a, "ai.graft");
  }

  // The replicated optimizer step's gradient: (a + b) * 0.5 over a 1.6M-element slice, next to
  // the plain SGD update of the same slice.
  {
    using ops::fused::Code;
    ops::fused::Program p;
    p.instrs = {{Code::Add, 0, 1}, {Code::Const, -1, -1, -1, 0.5f}, {Code::Mul, 2, 3}};
    p.outputs = {4};
    ir::Attributes a;
    p.toAttributes(a);
    add("FusedElementwise (a + b) * 0.5 [1600000]", "FusedElementwise",
        {randomArray(F, {1600000}, 26), randomArray(F, {1600000}, 27)}, {false, false}, a, "ai.graft");
    add("Add [1600000] (the same output allocation)", "Add",
        {randomArray(F, {1600000}, 26), randomArray(F, {1600000}, 27)}, {false, false});
    add("SGDUpdate plain [1600000]", "SGDUpdate",
        {randomArray(F, {1600000}, 28), randomArray(F, {1600000}, 29), scalarF(0.01f), scalarF(0), scalarF(0),
         scalarF(0), scalarF(1), scalarF(1)},
        {false, false, true, true, true, true, true, true}, {}, "ai.graft", 0);
  }

  auto ref = backends::makeReferenceBackend();
  auto cpu1 = backends::makeCpuBackend(1);
  auto cpu2 = backends::makeCpuBackend(2);
  support::ThreadPool pool1(1), pool2(2);
  std::printf("| workload | reference ms | cpu 1 thread ms | cpu 2 threads ms | speedup (2 threads) |\n|---|---|---|---|---|\n");
  for (const Workload& wl : ws) {
    if (!filter.empty() && wl.name.find(filter) == std::string::npos) continue;
    auto g = wl.build();
    auto er = plan::compile(*g, *ref, pool1);
    auto e1 = plan::compile(*g, *cpu1, pool1);
    auto e2 = plan::compile(*g, *cpu2, pool2);
    double tr = medianMs(*er, wl.inputs, std::max(3, runs / 2));
    double t1 = medianMs(*e1, wl.inputs, runs);
    double t2 = medianMs(*e2, wl.inputs, runs);
    std::printf("| %s | %.2f | %.2f | %.2f | %.1fx |\n", wl.name.c_str(), tr, t1, t2, tr / t2);
    std::fflush(stdout);
  }
  // Ops with more than one cpu kernel (a kernel library's and a vectorised loop): each timed on
  // the same node, so that the table keeps the faster one at the higher priority.
  {
    std::vector<std::pair<std::string, std::unique_ptr<ir::Graph>>> gs;
    NDArray att = randomArray(F, {384, 128, 128}, 26);
    gs.emplace_back("Softmax [8192,768] axis -1", oneNode("Softmax", {act}, {false}, attrs({{"axis", int64_t{-1}}})));
    gs.emplace_back("Softmax [384,128,128] axis -1", oneNode("Softmax", {att}, {false}, attrs({{"axis", int64_t{-1}}})));
    gs.emplace_back("Softmax [8192,768] axis 0", oneNode("Softmax", {act}, {false}, attrs({{"axis", int64_t{0}}})));
    std::printf("\n| op | kernel | 2 threads ms |\n|---|---|---|\n");
    for (auto& [label, g] : gs) {
      if (!filter.empty() && label.find(filter) == std::string::npos) continue;
      const ir::Node& n = *g->nodes()[0];
      std::vector<NDArray> inputs{n.input(0)->info().shape() == act.shape() ? act : att};
      for (const auto* d : backends::cpu::CpuKernelRegistry::instance().all()) {
        if (d->type != n.type() || d->domain != n.domain() || !d->supports(n)) continue;
        OneKernel provider(*d);
        auto e = plan::compile(*g, provider, pool2);
        std::printf("| %s | %s (priority %d) | %.2f |\n", label.c_str(), d->name.c_str(), d->priority, medianMs(*e, inputs, runs));
        std::fflush(stdout);
      }
    }
  }
  // Fusion: the same five-op chain as separate nodes (reference, cpu) and after fuse-elementwise.
  {
    auto g = std::make_unique<ir::Graph>("chain");
    auto in = [&](const char* id, Shape sh) {
      ir::Tensor* t = g->addTensor(id, ir::ValueType::tensor(TensorInfo(F, sh)), ir::TensorKind::Input);
      g->addInput(t);
      return t;
    };
    ir::Tensor* x = in("x", {8192, 768});
    ir::Tensor* wt = in("w", {768});
    ir::Tensor* b = in("b", {768});
    ir::Tensor* half = g->addInitializer("half", NDArray::scalar<float>(F, 0.5f), ir::TensorKind::Constant);
    ir::Tensor* t = g->addNode("Mul", "", {x, wt}, {"m"})->output(0);
    t = g->addNode("Add", "", {t, b}, {"a"})->output(0);
    t = g->addNode("Tanh", "", {t}, {"t"})->output(0);
    t = g->addNode("Mul", "", {t, half}, {"h"})->output(0);
    t = g->addNode("Add", "", {t, half}, {"y"})->output(0);
    g->addOutput(t);
    passes::PassContext ctx;
    passes::runPipeline(*g, {"infer-shapes"}, ctx);
    std::vector<NDArray> inputs{act, randomArray(F, {768}, 24), randomArray(F, {768}, 25)};
    auto er = plan::compile(*g, *ref, pool1);
    auto eu = plan::compile(*g, *cpu2, pool2);
    double tr = medianMs(*er, inputs, std::max(3, runs / 2)), tu = medianMs(*eu, inputs, runs);
    passes::runPipeline(*g, {"fuse-elementwise"}, ctx);
    auto ef = plan::compile(*g, *cpu2, pool2);
    double tf = medianMs(*ef, inputs, runs);
    std::printf("\nfive-op chain [8192,768]: reference %.2f ms, cpu unfused %.2f ms, cpu fused (%zu node) %.2f ms: fusion %.1fx, "
                "total %.1fx\n", tr, tu, g->numNodes(), tf, tu / tf, tr / tf);
  }
  return 0;
}
