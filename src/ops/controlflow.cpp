// Control flow: If, Loop and Scan. Their bodies are compiled once, with the node, into
// SubgraphRunners; each execution (a Loop iteration, a Scan step) reuses the compiled body. Bodies
// read outer-scope values through the node's implicit inputs, at any nesting depth.
#include <optional>

#include "ops/axis_copy.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

bool conditionValue(const Value& v, const std::string& what, const char* name) {
  GRAFT_CHECK(v.isTensor(), "{}: {} must be a bool tensor, got {}", what, name,
              v.isSequence() ? "a sequence" : "no value");
  const NDArray& t = v.tensor;
  GRAFT_CHECK(t.dtype() == DataType::Bool && t.numel() == 1, "{}: {} must be one bool value, got {} of shape {}", what,
              name, dtypeName(t.dtype()), shapeToString(t.shape()));
  return t.data<bool>()[0];
}

// Runs a body, naming the node and where it was (branch, iteration) in any error.
std::vector<Value> runBody(SubgraphRunner& body, std::vector<Value> in, const KernelContext& k, const std::string& what,
                           const std::string& where) {
  std::vector<Value> out;
  try {
    out = body.run(std::move(in), k);
  } catch (const Error& e) {
    GRAFT_THROW("{}: {}: {}", what, where, e.what());
  }
  for (size_t i = 0; i < out.size(); ++i)
    GRAFT_CHECK(!out[i].empty(), "{}: {}: the body produced no value for its output {}", what, where, i);
  return out;
}

const Value& requireValue(const Value& v, const std::string& what, size_t i) {
  GRAFT_CHECK(!v.empty(), "{}: input {} has no value", what, i);
  return v;
}

// The value of a stacked output (a Loop or Scan output collected over iterations) when there were
// no iterations: an empty tensor whose other dimensions come from the node's inferred output type,
// or else the body's per-iteration output type with the stacking axis inserted. Unknown
// dimensions become 0 (the tensor is empty either way). nullopt when neither type has a rank.
std::optional<NDArray> emptyStacked(const ir::Tensor* nodeOut, const ir::Tensor* bodyOut, int64_t axis) {
  auto dimsOf = [](const TensorInfo& info) {
    Shape s;
    for (const Dim& d : info.dims()) s.push_back(d.known() ? d.value : 0);
    return s;
  };
  DataType dt = DataType::Undefined;
  if (nodeOut && nodeOut->type().isTensor()) dt = nodeOut->info().dataType();
  if (dt == DataType::Undefined && bodyOut && bodyOut->type().isTensor()) dt = bodyOut->info().dataType();
  if (dt == DataType::Undefined) return std::nullopt;
  if (nodeOut && nodeOut->type().isTensor() && nodeOut->info().hasShape()) {
    Shape s = dimsOf(nodeOut->info());
    auto r = static_cast<int64_t>(s.size());
    int64_t a = axis < 0 ? axis + r : axis;
    if (a >= 0 && a < r) {
      s[a] = 0;
      return NDArray(dt, s);
    }
  }
  if (bodyOut && bodyOut->type().isTensor() && bodyOut->info().hasShape()) {
    Shape s = dimsOf(bodyOut->info());
    auto r = static_cast<int64_t>(s.size()) + 1;
    int64_t a = axis < 0 ? axis + r : axis;
    if (a >= 0 && a < r) {
      s.insert(s.begin() + a, 0);
      return NDArray(dt, s);
    }
  }
  return std::nullopt;
}

// ---- If ---------------------------------------------------------------------------------------

KernelFn ifKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  auto thenBody = c.compileSubgraph(*n.attrGraph("then_branch"));
  auto elseBody = c.compileSubgraph(*n.attrGraph("else_branch"));
  for (const auto& [name, b] : {std::pair{"then_branch", thenBody.get()}, std::pair{"else_branch", elseBody.get()}}) {
    GRAFT_CHECK(b->numInputs() == 0, "{}: {} must have no inputs, it has {}", what, name, b->numInputs());
    GRAFT_CHECK(b->numOutputs() == n.numOutputs(), "{}: {} has {} output(s), but the node has {}", what, name,
                b->numOutputs(), n.numOutputs());
  }
  return [=](KernelContext& k) {
    bool cond = conditionValue(k.inputValue(0), what, "the condition");
    auto outs = runBody(cond ? *thenBody : *elseBody, {}, k, what, cond ? "then_branch" : "else_branch");
    for (size_t i = 0; i < outs.size(); ++i) k.setOutputValue(i, std::move(outs[i]));
  };
}

// ---- Loop -------------------------------------------------------------------------------------

KernelFn loopKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  const ir::Graph& g = *n.attrGraph("body");
  auto body = c.compileSubgraph(g);
  GRAFT_CHECK(n.numInputs() >= 2, "{}: Loop needs the inputs M and cond (either may be empty), got {} input(s)", what,
              n.numInputs());
  size_t nCarried = n.numInputs() - 2;
  GRAFT_CHECK(body->numInputs() == 2 + nCarried,
              "{}: the body has {} input(s); expected {} (iteration number, condition "
              "and {} loop-carried value(s))",
              what, body->numInputs(), 2 + nCarried, nCarried);
  GRAFT_CHECK(body->numOutputs() >= 1 + nCarried,
              "{}: the body has {} output(s); expected at least {} (condition and {} "
              "loop-carried value(s))",
              what, body->numOutputs(), 1 + nCarried, nCarried);
  size_t nScan = body->numOutputs() - 1 - nCarried;
  GRAFT_CHECK(n.numOutputs() <= nCarried + nScan,
              "{}: the node has {} output(s), but the body gives {} loop-carried "
              "value(s) and {} scan output(s)",
              what, n.numOutputs(), nCarried, nScan);
  std::vector<std::optional<NDArray>> emptyScans(nScan);
  for (size_t j = 0; j < nScan; ++j)
    emptyScans[j] = emptyStacked(n.output(nCarried + j), g.outputs()[1 + nCarried + j], 0);

  return [=](KernelContext& k) {
    std::optional<int64_t> maxTrips;
    if (k.hasInput(0)) {
      const NDArray& m = k.input(0);
      GRAFT_CHECK(m.dtype() == DataType::Int64 && m.numel() == 1,
                  "{}: M (the trip count) must be one int64 value, got "
                  "{} of shape {}",
                  what, dtypeName(m.dtype()), shapeToString(m.shape()));
      maxTrips = m.data<int64_t>()[0];
    }
    // Without a cond input the loop starts as if it were true; the body's condition still ends it.
    bool cond = k.hasInput(1) ? conditionValue(k.inputValue(1), what, "input 'cond'") : true;
    std::vector<Value> carried(nCarried);
    for (size_t i = 0; i < nCarried; ++i) carried[i] = k.inputValue(2 + i);
    std::vector<std::vector<NDArray>> scans(nScan);
    for (int64_t it = 0; cond && (!maxTrips || it < *maxTrips); ++it) {
      std::vector<Value> in;
      in.reserve(2 + nCarried);
      in.push_back(Value::fromTensor(NDArray::scalar<int64_t>(DataType::Int64, it)));
      in.push_back(Value::fromTensor(NDArray::scalar<bool>(DataType::Bool, cond)));
      for (Value& v : carried) in.push_back(std::move(v));
      std::vector<Value> out = runBody(*body, std::move(in), k, what, fmt::format("iteration {}", it));
      cond = conditionValue(out[0], what + ": iteration " + std::to_string(it), "the body's condition output");
      for (size_t i = 0; i < nCarried; ++i) carried[i] = std::move(out[1 + i]);
      for (size_t j = 0; j < nScan; ++j) {
        Value& v = out[1 + nCarried + j];
        GRAFT_CHECK(v.isTensor(), "{}: iteration {}: scan output {} must be a tensor", what, it, j);
        scans[j].push_back(std::move(v.tensor));
      }
    }
    for (size_t i = 0; i < nCarried; ++i) k.setOutputValue(i, std::move(carried[i]));
    for (size_t j = 0; j < nScan; ++j) {
      if (!k.wantsOutput(nCarried + j)) continue;
      if (scans[j].empty()) {
        GRAFT_CHECK(emptyScans[j],
                    "{}: the loop ran no iterations, and the shape of scan output {} is not known; give "
                    "the body's output a shape",
                    what, j);
        k.setOutput(nCarried + j, emptyScans[j]->clone());
      } else {
        k.setOutput(nCarried + j, stackAxis(scans[j], 0, false, fmt::format("{}: scan output {}", what, j)));
      }
    }
  };
}

// ---- Scan -------------------------------------------------------------------------------------

std::vector<int64_t> perScanAttr(const ir::Node& n, const char* name, size_t count, bool direction) {
  std::vector<int64_t> v = n.attrInts(name, std::vector<int64_t>(count, 0));
  GRAFT_CHECK(v.size() == count, "{}: attribute '{}' has {} entries; expected {}", n.describe(), name, v.size(), count);
  if (direction)
    for (int64_t d : v)
      GRAFT_CHECK(d == 0 || d == 1, "{}: attribute '{}' holds {}; directions are 0 (forward) or 1 (reverse)",
                  n.describe(), name, d);
  return v;
}

KernelFn scanKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  const ir::Graph& g = *n.attrGraph("body");
  auto body = c.compileSubgraph(g);
  int64_t numScanInputs = n.attrInt("num_scan_inputs");
  GRAFT_CHECK(numScanInputs >= 1 && static_cast<size_t>(numScanInputs) <= n.numInputs(),
              "{}: num_scan_inputs is {}, "
              "but the node has {} input(s)",
              what, numScanInputs, n.numInputs());
  auto nScanIn = static_cast<size_t>(numScanInputs);
  size_t nState = n.numInputs() - nScanIn;
  GRAFT_CHECK(body->numInputs() == n.numInputs(),
              "{}: the body has {} input(s), but the node has {} ({} state and {} "
              "scan input(s))",
              what, body->numInputs(), n.numInputs(), nState, nScanIn);
  GRAFT_CHECK(body->numOutputs() >= nState, "{}: the body has {} output(s); expected at least the {} state value(s)",
              what, body->numOutputs(), nState);
  size_t nScanOut = body->numOutputs() - nState;
  GRAFT_CHECK(n.numOutputs() <= body->numOutputs(), "{}: the node has {} output(s), but the body has {}", what,
              n.numOutputs(), body->numOutputs());
  std::vector<int64_t> inAxes = perScanAttr(n, "scan_input_axes", nScanIn, false);
  std::vector<int64_t> inDirs = perScanAttr(n, "scan_input_directions", nScanIn, true);
  std::vector<int64_t> outAxes = perScanAttr(n, "scan_output_axes", nScanOut, false);
  std::vector<int64_t> outDirs = perScanAttr(n, "scan_output_directions", nScanOut, true);
  std::vector<std::optional<NDArray>> emptyScans(nScanOut);
  for (size_t j = 0; j < nScanOut; ++j)
    emptyScans[j] = emptyStacked(n.output(nState + j), g.outputs()[nState + j], outAxes[j]);

  return [=](KernelContext& k) {
    std::vector<int64_t> axes(nScanIn);
    int64_t len = -1;
    for (size_t j = 0; j < nScanIn; ++j) {
      const Value& v = k.inputValue(nState + j);
      GRAFT_CHECK(v.isTensor(), "{}: scan input {} must be a tensor", what, j);
      const NDArray& x = v.tensor;
      GRAFT_CHECK(x.rank() >= 1, "{}: scan input {} is a scalar; it needs an axis to scan", what, j);
      axes[j] = normalizeAxis(inAxes[j], x.rank(), what + ": scan_input_axes");
      if (len < 0) len = x.dim(axes[j]);
      GRAFT_CHECK(x.dim(axes[j]) == len, "{}: scan input {} has {} entries along axis {}, but scan input 0 has {}",
                  what, j, x.dim(axes[j]), axes[j], len);
    }
    std::vector<Value> state(nState);
    for (size_t i = 0; i < nState; ++i) state[i] = requireValue(k.inputValue(i), what, i);
    std::vector<std::vector<NDArray>> scans(nScanOut);
    for (int64_t t = 0; t < len; ++t) {
      std::vector<Value> in;
      in.reserve(nState + nScanIn);
      for (Value& v : state) in.push_back(std::move(v));
      for (size_t j = 0; j < nScanIn; ++j)
        in.push_back(Value::fromTensor(takeAxis(k.input(nState + j), axes[j], inDirs[j] ? len - 1 - t : t)));
      std::vector<Value> out = runBody(*body, std::move(in), k, what, fmt::format("step {}", t));
      for (size_t i = 0; i < nState; ++i) state[i] = std::move(out[i]);
      for (size_t j = 0; j < nScanOut; ++j) {
        Value& v = out[nState + j];
        GRAFT_CHECK(v.isTensor(), "{}: step {}: scan output {} must be a tensor", what, t, j);
        scans[j].push_back(std::move(v.tensor));
      }
    }
    for (size_t i = 0; i < nState; ++i) k.setOutputValue(i, std::move(state[i]));
    for (size_t j = 0; j < nScanOut; ++j) {
      if (!k.wantsOutput(nState + j)) continue;
      if (scans[j].empty()) {
        GRAFT_CHECK(emptyScans[j],
                    "{}: the scan inputs are empty, and the shape of scan output {} is not known; give the "
                    "body's output a shape",
                    what, j);
        k.setOutput(nState + j, emptyScans[j]->clone());
        continue;
      }
      std::string where = fmt::format("{}: scan output {}", what, j);
      int64_t axis = normalizeAxis(outAxes[j], scans[j][0].rank() + 1, where + ": scan_output_axes");
      k.setOutput(nState + j, stackAxis(scans[j], axis, outDirs[j] != 0, where));
    }
  };
}

}  // namespace

GRAFT_REGISTER_OPS(controlflow) {
  r.add("If").setReference(ifKernel).noGradient({0});
  r.add("Loop").setReference(loopKernel).noGradient({0, 1});
  r.add("Scan").setReference(scanKernel);
}

}  // namespace graft::ops
