#include <graft/stepio.hpp>

#include <algorithm>

#include "support/check.hpp"

namespace graft {

StepIO::StepIO(std::map<TensorId, NDArray> inputs, std::map<TensorId, NDArray> outputs)
    : inputs_(std::move(inputs)), outputs_(std::move(outputs)) {}

void StepIO::beginStep(const Shape& leadingDims, const std::string& meaning) {
  leading_ = leadingDims;
  meaning_ = meaning;
  runs_ = shapeNumel(leadingDims);
  inIndex_.clear();
  outIndex_.clear();
  expected_.clear();
}

StepValue IStepIO::inValue(const TensorId& id, bool) {
  GRAFT_THROW(
      "model input '{}' is a sequence or an optional, which this StepIO cannot supply (it passes tensors; "
      "in Python give a list of arrays, or None)",
      id);
}

void IStepIO::outValue(const TensorId& id, const StepValue& value) {
  GRAFT_THROW(
      "anchor '{}' returns {}, which this StepIO cannot take (it writes tensors into arrays it holds; in Python "
      "leave the anchor to initAnchorArrays, which returns such values as lists or None)",
      id,
      value.kind == StepValue::Kind::Sequence ? "a sequence"
      : value.kind == StepValue::Kind::None   ? "an absent optional (None)"
                                              : "a tensor whose shape only the run decides");
}

void StepIO::expectResults(const TensorId& id, int64_t count) { expected_[id] = count; }

namespace {
// Chunk `index` of the chunks along the leading dimensions (the whole array when there are none).
NDArray chunkOf(const NDArray& a, const Shape& leading, int64_t index, const std::string& what,
                const std::string& meaning) {
  if (leading.empty()) return a;
  bool ok = a.rank() >= static_cast<int64_t>(leading.size()) && std::equal(leading.begin(), leading.end(), a.shape().begin());
  GRAFT_CHECK(ok, "{}: expected leading dimensions {} ({}, each only when > 1: one entry per model run), got an array of "
              "shape {}", what, shapeToString(leading), meaning, shapeToString(a.shape()));
  Shape s(a.shape().begin() + static_cast<long>(leading.size()), a.shape().end());
  size_t chunkBytes = static_cast<size_t>(shapeNumel(s)) * dtypeSize(a.dtype());
  auto* base = static_cast<char*>(const_cast<void*>(a.rawData()));
  // The chunk keeps the whole array's buffer alive through a copy of the array.
  auto keep = std::make_shared<NDArray>(a);
  return NDArray::wrap(base + chunkBytes * index, a.dtype(), s, keep);
}
}  // namespace

NDArray StepIO::in(const TensorId& id, const TensorInfo&, bool) {
  auto it = inputs_.find(id);
  GRAFT_CHECK(it != inputs_.end(), "no input array for model input '{}' in the StepIO", id);
  int64_t i = inIndex_[id]++;
  GRAFT_CHECK(i < runs_, "input '{}' was read more than {} times in one step", id, runs_);
  return chunkOf(it->second, leading_, i, "input '" + id + "'", meaning_);
}

NDArray StepIO::out(const TensorId& id, DataType dtype, const Shape& shape) {
  auto it = outputs_.find(id);
  GRAFT_CHECK(it != outputs_.end(), "no anchor array for anchor '{}' in the StepIO", id);
  const NDArray& a = it->second;
  GRAFT_CHECK(a.dtype() == dtype, "anchor array '{}' is {}, but the tensor is {}", id, dtypeName(a.dtype()), dtypeName(dtype));
  int64_t chunk = shapeNumel(shape);
  GRAFT_CHECK(chunk == 0 || a.numel() % chunk == 0,
              "anchor array '{}' has shape {}, which does not hold whole chunks of shape {}", id, shapeToString(a.shape()),
              shapeToString(shape));
  int64_t count = chunk == 0 ? 1 : a.numel() / chunk;
  auto want = expected_.find(id);
  GRAFT_CHECK(
      want == expected_.end() || chunk == 0 || count == want->second,
      "anchor array '{}' has shape {} ({} elements), but one step returns {} result{} of shape {} ({} elements): "
      "shape it as Session.anchorArrayShape says",
      id, shapeToString(a.shape()), a.numel(), want == expected_.end() ? 0 : want->second,
      want != expected_.end() && want->second == 1 ? "" : "s", shapeToString(shape),
      want == expected_.end() ? 0 : want->second * chunk);
  int64_t i = outIndex_[id]++;
  GRAFT_CHECK(i < count, "anchor array '{}' of shape {} has room for {} results of shape {}, but more were returned", id,
              shapeToString(a.shape()), count, shapeToString(shape));
  auto* base = static_cast<char*>(const_cast<void*>(a.rawData()));
  auto keep = std::make_shared<NDArray>(a);
  return NDArray::wrap(base + static_cast<size_t>(chunk) * dtypeSize(dtype) * i, dtype, shape, keep);
}

StepIOCallback::StepIOCallback(InputCallback in, InputCompleteCallback inComplete, OutputCallback out,
                               OutputCompleteCallback outComplete)
    : in_(std::move(in)), inComplete_(std::move(inComplete)), out_(std::move(out)), outComplete_(std::move(outComplete)) {
  GRAFT_CHECK(in_ && out_, "StepIOCallback needs an input and an output callback");
}

NDArray StepIOCallback::in(const TensorId& id, const TensorInfo&, bool prefetch) { return in_(id, prefetch); }
void StepIOCallback::inComplete(const TensorId& id) {
  if (inComplete_) inComplete_(id);
}
NDArray StepIOCallback::out(const TensorId& id, DataType dtype, const Shape& shape) {
  NDArray a = out_(id);
  GRAFT_CHECK(a.dtype() == dtype && a.shape() == shape, "output callback for '{}' returned a {} array of shape {}, expected {} {}",
              id, dtypeName(a.dtype()), shapeToString(a.shape()), dtypeName(dtype), shapeToString(shape));
  return a;
}
void StepIOCallback::outComplete(const TensorId& id) {
  if (outComplete_) outComplete_(id);
}

}  // namespace graft
