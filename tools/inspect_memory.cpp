#include "inspect_memory.hpp"

#include <graft/graft.hpp>

#include <CLI/CLI.hpp>

#include <map>
#include <ostream>

#include "runtime/session_impl.hpp"
#include "support/check.hpp"

namespace graft::tools {

void addMemoryOptions(CLI::App& inspect, MemoryInspectOptions& o) {
  inspect.add_flag("--memory", o.memory, "Compile for the cpu device and print the static memory plan");
  inspect.add_flag("--kernels", o.kernels,
                   "Compile for the cpu device and print the kernel (and oneDNN implementation) of every step");
  inspect.add_option("--loss", o.loss, "With --memory: plan a training step (SGD) that minimises this tensor")
      ->type_name("TENSOR");
}

void printMemoryPlan(const std::string& model, const MemoryInspectOptions& o, std::ostream& out) {
  std::map<std::string, int64_t> dims;
  for (const std::string& d : o.dims) {
    auto eq = d.find('=');
    GRAFT_CHECK(eq != std::string::npos && eq > 0, "--dim '{}': expected NAME=SIZE, for example --dim batch=8", d);
    std::string name = d.substr(0, eq), text = d.substr(eq + 1);
    int64_t v = -1;
    try {
      size_t used = 0;
      v = std::stoll(text, &used);
      if (used != text.size()) v = -1;
    } catch (const std::exception&) {
      v = -1;
    }
    GRAFT_CHECK(v >= 0, "--dim {}: the size must be a non-negative integer, got '{}'", name, text);
    dims[name] = v;
  }
  // The inputs' shapes with symbolic dimensions bound, so that every value gets a static size.
  onnxio::Model m = loadModelArgument(model);
  InputShapeInfo shapes;
  for (const ir::Tensor* t : m.graph->inputs()) {
    const TensorInfo& info = t->info();
    if (!t->type().isTensor() || !info.hasShape()) continue;
    Shape s;
    for (const Dim& dim : info.dims()) {
      auto it = dim.param.empty() ? dims.end() : dims.find(dim.param);
      s.push_back(dim.known() ? dim.value : it != dims.end() ? it->second : 1);
    }
    shapes.add(t->id(), TensorInfo(info.dataType(), s));
  }
  std::vector<TensorId> anchors;
  for (const ir::Tensor* t : m.graph->outputs()) anchors.push_back(t->id());
  auto device = DeviceManager::createDeviceManager().createCpuDevice();
  std::unique_ptr<Session> session;
  if (o.loss.empty()) {
    session = InferenceSession::createFromOnnxModel(model, DataFlow(1, anchors), device, shapes);
  } else {
    session = TrainingSession::createFromOnnxModel(model, DataFlow(1, {o.loss}), o.loss,
                                                   SGD({{"defaultLearningRate", {0.01f, true}}}), device, shapes);
  }
  session->prepareDevice();
  std::string what = o.loss.empty() ? "inference" : "training step, loss " + o.loss;
  if (o.memory) {
    MemoryPlanSummary plan = session->memoryPlan(o.perValue);
    out << "memory plan (" << what << ", cpu device)\n" << plan.text;
  }
  if (o.kernels) {
    const auto* plan = &session->impl().anyPlan();
    std::vector<const plan::Executable*> exes;
    if (plan->exe) exes.push_back(plan->exe.get());
    if (plan->staged)
      for (const auto& e : plan->staged->exes) exes.push_back(e.get());
    out << "kernels (" << what << ", cpu device): the kernel each step runs, as compiled\n";
    for (const plan::Executable* exe : exes)
      for (const plan::StepKernel& k : exe->stepKernels())
        out << fmt::format("  {:<48} {:<20} {}{}\n", k.node, k.opType, k.kernel,
                           k.implementation.empty() ? "" : " (" + k.implementation + ")");
  }
}

}  // namespace graft::tools
