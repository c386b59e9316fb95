// graft inspect: what a model is made of and whether graft can run it.
#include <algorithm>
#include <map>
#include <ostream>

#include "backends/backend.hpp"
#include "cli.hpp"
#include "format_util.hpp"
#include "ir/graph.hpp"
#include "plan/executable.hpp"
#include "runtime/session_impl.hpp"
#include "support/check.hpp"
#include "support/limits.hpp"

namespace graft::tools {
namespace {

struct Stats {
  std::map<std::string, int64_t> opCounts;
  int64_t nodes = 0;
  int64_t weightTensors = 0, weightValues = 0, weightBytes = 0;
  int64_t constTensors = 0, constValues = 0, constBytes = 0;
};

std::string opName(const ir::Node& n) { return n.domain().empty() ? n.type() : fmt::format("{}::{}", n.domain(), n.type()); }

void collect(const ir::Graph& g, Stats& s) {
  for (const ir::Tensor* t : g.initializers()) {
    const NDArray& a = *t->data();
    int64_t bytes = a.dtype() == DataType::String ? 0 : static_cast<int64_t>(a.nbytes());
    if (t->kind() == ir::TensorKind::Variable) {
      ++s.weightTensors, s.weightValues += a.numel(), s.weightBytes += bytes;
    } else {
      ++s.constTensors, s.constValues += a.numel(), s.constBytes += bytes;
    }
  }
  for (const ir::Node* n : g.nodes()) {
    ++s.nodes;
    ++s.opCounts[opName(*n)];
    for (const ir::Graph* sub : n->subgraphs()) collect(*sub, s);
  }
}

std::string nodeLabel(const ir::Node& n) {
  if (!n.name().empty()) return fmt::format("'{}'", n.name());
  if (n.output(0)) return fmt::format("output '{}'", n.output(0)->id());
  return fmt::format("#{}", n.id());
}

// Compiles the model as a pipelined inference session and prints its programs.
void printStages(const InspectOptions& o, const ir::Graph& g, std::ostream& out) {
  int64_t maxVg = -1;
  for (const ir::Node* n : g.nodes())
    if (n->virtualGraph) maxVg = std::max(maxVg, *n->virtualGraph);
  bool annotated = maxVg >= 0;
  if (o.virtualDevices > 0) support::checkVirtualDeviceCount("--virtual-devices", o.virtualDevices, 1);
  // A model's annotations can ask for any number of virtual devices: a worker thread each.
  if (o.virtualDevices <= 0 && annotated)
    support::checkVirtualDeviceCount("the model's largest virtual graph annotation (+1)", maxVg + 1, 1);
  int count = o.virtualDevices > 0 ? o.virtualDevices : annotated ? static_cast<int>(maxVg + 1) : 2;
  std::map<std::string, int64_t> dims = parseDims(o.dims);
  InputShapeInfo shapes;
  for (const ir::Tensor* t : g.inputs()) {
    const TensorInfo& info = t->info();
    if (!t->type().isTensor() || !info.hasShape() || info.isStatic()) continue;
    Shape s;
    for (const Dim& d : info.dims()) {
      auto it = dims.find(d.param);
      s.push_back(d.known() ? d.value : it != dims.end() ? it->second : 1);
    }
    shapes.add(t->id(), TensorInfo(info.dataType(), s));
  }
  SessionOptions so;
  so.virtualGraphMode = annotated ? VirtualGraphMode::Manual : VirtualGraphMode::Auto;
  so.enablePipelining = true;
  std::vector<TensorId> outs;
  for (const ir::Tensor* t : g.outputs()) outs.push_back(t->id());
  auto session = InferenceSession::createFromOnnxModel(o.model, DataFlow(1, outs),
                                                       DeviceManager::createDeviceManager().createCpuDevice(count, 1), shapes, so);
  session->prepareDevice();
  out << fmt::format("stages      {} split over {} virtual device{}\n", annotated ? "annotated (Manual)" : "Auto", count,
                     count == 1 ? "" : "s");
  out << session->stagesText();
}

}  // namespace

void inspectCommand(const InspectOptions& o, std::ostream& out) {
  GRAFT_CHECK(!o.model.empty(), "no model file given");
  onnxio::Model model = loadModelArgument(o.model);
  const ir::Graph& g = *model.graph;
  const auto& info = model.info;

  size_t width = 8;
  for (const ir::Tensor* t : g.inputs()) width = std::max(width, t->id().size());
  for (const ir::Tensor* t : g.outputs()) width = std::max(width, t->id().size());
  width = std::min<size_t>(width, 40);

  out << "model       " << o.model << "\n";
  out << fmt::format("producer    {}{}{}, ONNX IR version {}\n", info.producerName.empty() ? "(not set)" : info.producerName,
                     info.producerVersion.empty() ? "" : " ", info.producerVersion, info.irVersion);
  if (!info.docString.empty()) out << "doc         " << info.docString.substr(0, 200) << "\n";
  out << "opsets      ai.onnx " << g.opsetVersion();
  if (info.originalOpset != g.opsetVersion())
    out << " (converted from " << (info.originalOpset ? std::to_string(info.originalOpset) : "none") << ")";
  for (const auto& [d, v] : g.otherOpsets) out << ", " << d << " " << v;
  out << "\n";

  out << "inputs (" << g.inputs().size() << ")\n";
  for (const ir::Tensor* t : g.inputs()) out << fmt::format("  {:<{}}  {}\n", t->id(), width, t->type().str());
  out << "outputs (" << g.outputs().size() << ")\n";
  for (const ir::Tensor* t : g.outputs()) out << fmt::format("  {:<{}}  {}\n", t->id(), width, t->type().str());

  Stats s;
  collect(g, s);
  out << "ops         " << s.nodes << " node" << (s.nodes == 1 ? "" : "s") << " of " << s.opCounts.size() << " type"
      << (s.opCounts.size() == 1 ? "" : "s") << "\n";
  std::vector<std::pair<std::string, int64_t>> counts(s.opCounts.begin(), s.opCounts.end());
  std::stable_sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  size_t opWidth = 8;
  for (const auto& [op, c] : counts) opWidth = std::max(opWidth, op.size());
  for (const auto& [op, c] : counts) out << fmt::format("  {:<{}}  {:>6}\n", op, opWidth, c);
  out << fmt::format("parameters  {} values in {} tensor{} ({})\n", groupDigits(s.weightValues), s.weightTensors,
                     s.weightTensors == 1 ? "" : "s", humanBytes(static_cast<double>(s.weightBytes)));
  if (s.constTensors)
    out << fmt::format("constants   {} values in {} tensor{} ({})\n", groupDigits(s.constValues), s.constTensors,
                       s.constTensors == 1 ? "" : "s", humanBytes(static_cast<double>(s.constBytes)));

  auto backend = backends::makeCpuBackend(1);
  auto unsupported = plan::unsupportedNodes(g, *backend);
  if (unsupported.empty()) {
    out << "unsupported none: graft has a kernel for every op of this model\n";
  } else {
    std::map<std::string, std::vector<std::string>> byOp;
    for (const ir::Node* n : unsupported) byOp[opName(*n)].push_back(nodeLabel(*n));
    out << "unsupported " << byOp.size() << " op type" << (byOp.size() == 1 ? "" : "s") << " ("
        << unsupported.size() << " node" << (unsupported.size() == 1 ? "" : "s") << ") that graft cannot run yet:\n";
    for (const auto& [op, names] : byOp) {
      std::string shown = names.size() > 4 ? fmt::format("{}, ...", fmt::join(names.begin(), names.begin() + 4, ", "))
                                           : fmt::format("{}", fmt::join(names, ", "));
      out << fmt::format("  {:<{}}  {:>6}  {}\n", op, opWidth, names.size(), shown);
    }
  }
  if (o.stages) printStages(o, g, out);
  if (o.graph) out << "\n" << ir::printGraph(g);
}

}  // namespace graft::tools
