// SessionOptions::autoThreads (runtime/session.cpp, tryFewerThreads): a small inference step is
// also compiled for one thread on its first run, and the faster plan is kept. Which one wins
// depends on the machine, so the tests force the one-thread plan (GRAFT_AUTO_THREADS=1) to check
// that it computes what the many-thread plan and the reference device compute, that the trial
// runs do not count in the profile, and where no trial is made (training, random ops, the option
// off).
#include <gtest/gtest.h>

#include <graft/builder.hpp>
#include <graft/graft.hpp>

#include <cstdlib>
#include <utility>

#include "../unit_test_util.hpp"

namespace graft {
namespace {

using testing::errorOf;
using testing::randomVec;

// x [3, 3, 8, 8] -> Conv 3->4 (3x3, pad 1) -> Relu -> `out`; `random`: + RandomUniformLike(x)-shaped
// noise of zero range (values unchanged, but the step draws random numbers). Batch 3: a batch that
// splits evenly over two threads runs its convolution in image bands under passive waits
// (onednn_conv.cpp), which no one-thread step replaces (another implementation).
std::string convModel(bool random, TensorId& out) {
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{3, 3, 8, 8}), "x");
  std::vector<float> w = randomVec(size_t{108}, 11, 0.5f);  // 4 x 3 x 3 x 3
  TensorId wt = b.addInitializedInputTensor(testing::fromVec(w, {4, 3, 3, 3}), "w");
  TensorId c = b.addOp("Conv", "", 17, {x, wt}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}).at(0);
  TensorId y = b.addOp("Relu", "", 17, {c}).at(0);
  if (random) {
    TensorId n = b.addOp("RandomUniformLike", "", 17, {y}, {{"low", 0.0f}, {"high", 0.0f}}).at(0);
    y = b.addOp("Add", "", 17, {y, n}).at(0);
  }
  b.addOutputTensor(y);
  out = y;
  return b.getModelProto();
}

class AutoThreads : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("GRAFT_AUTO_THREADS"); }

  struct Result {
    std::vector<float> y;
    int threads = 0;
    int64_t convCalls = 0;
    std::vector<std::string> convKernels;
  };
  static Result infer(std::shared_ptr<DeviceInfo> device, SessionOptions o, bool random = false, int steps = 3) {
    o.enableProfiling = true;
    TensorId y;
    std::string model = convModel(random, y);
    auto s = InferenceSession::createFromOnnxModel(model, DataFlow(1, {y}), std::move(device), {}, o);
    s->prepareDevice();
    std::vector<float> x = randomVec(size_t{576}, 5);  // 3 x 3 x 8 x 8
    auto anchors = s->initAnchorArrays();
    Result r;
    for (int i = 0; i < steps; ++i) {
      StepIO io({{"x", NDArray::wrap(x.data(), DataType::Float, {3, 3, 8, 8})}}, anchors);
      s->run(io);
    }
    const NDArray& out = anchors.at(y);
    r.y.assign(out.data<float>(), out.data<float>() + out.numel());
    r.threads = s->kernelThreads();
    for (const auto& p : s->profile())
      if (p.opType.find("Conv") != std::string::npos) {
        r.convCalls += p.calls;
        r.convKernels.insert(r.convKernels.end(), p.kernels.begin(), p.kernels.end());
      }
    return r;
  }
  static SessionOptions threads(int n, bool autoThreads = true) {
    SessionOptions o;
    o.numThreads = n;
    o.autoThreads = autoThreads;
    return o;
  }
};

TEST_F(AutoThreads, TheOneThreadPlanComputesWhatTheOthersDo) {
  DeviceManager dm;
  Result ref = infer(dm.createReferenceDevice(), SessionOptions());
  Result two = infer(dm.createCpuDevice(), threads(2, false));
  setenv("GRAFT_AUTO_THREADS", "1", 1);
  Result one = infer(dm.createCpuDevice(), threads(2));
  EXPECT_EQ(two.threads, 2);
  EXPECT_EQ(one.threads, 1);
  ASSERT_EQ(one.y.size(), ref.y.size());
  for (size_t i = 0; i < ref.y.size(); ++i) {
    EXPECT_NEAR(one.y[i], ref.y[i], 1e-5f) << i;
    EXPECT_NEAR(two.y[i], ref.y[i], 1e-5f) << i;
  }
  // The trial's runs are not in the profile: 3 steps, 3 convolutions.
  EXPECT_EQ(one.convCalls, 3);
  EXPECT_EQ(two.convCalls, 3);
}

// The mixed plan: the many-thread plan whose steps that ran faster on one thread run the
// one-thread plan's kernels. GRAFT_AUTO_THREADS=steps keeps it with every step that can.
TEST_F(AutoThreads, TheMixedPlanComputesWhatTheOthersDo) {
  DeviceManager dm;
  Result ref = infer(dm.createReferenceDevice(), SessionOptions());
  setenv("GRAFT_AUTO_THREADS", "steps", 1);
  Result mixed = infer(dm.createCpuDevice(), threads(2));
  EXPECT_EQ(mixed.threads, 2);  // the plan asked for, with some steps on one thread
  ASSERT_EQ(mixed.y.size(), ref.y.size());
  for (size_t i = 0; i < ref.y.size(); ++i) EXPECT_NEAR(mixed.y[i], ref.y[i], 1e-5f) << i;
  EXPECT_EQ(mixed.convCalls, 3);  // the trial's runs are not in the profile
  ASSERT_EQ(mixed.convKernels.size(), 1u);
  EXPECT_NE(mixed.convKernels[0].find(" on 1 thread"), std::string::npos) << mixed.convKernels[0];
  // Without the variable the choice is timed: whatever it keeps computes the same.
  unsetenv("GRAFT_AUTO_THREADS");
  Result timed = infer(dm.createCpuDevice(), threads(2));
  for (size_t i = 0; i < ref.y.size(); ++i) EXPECT_NEAR(timed.y[i], ref.y[i], 1e-5f) << i;
}

TEST_F(AutoThreads, NoTrialWhereItWouldChangeSomethingOrIsTurnedOff) {
  DeviceManager dm;
  setenv("GRAFT_AUTO_THREADS", "1", 1);
  EXPECT_EQ(infer(dm.createCpuDevice(), threads(2, false)).threads, 2);            // the option off
  EXPECT_EQ(infer(dm.createCpuDevice(), threads(2), /*random=*/true).threads, 2);  // draws random numbers
  EXPECT_EQ(infer(dm.createCpuDevice(), threads(1)).threads, 1);
  setenv("GRAFT_AUTO_THREADS", "0", 1);
  EXPECT_EQ(infer(dm.createCpuDevice(), threads(2)).threads, 2);
  setenv("GRAFT_AUTO_THREADS", "yes", 1);
  EXPECT_NE(errorOf([&] {
              infer(dm.createCpuDevice(), threads(2));
            }).find("GRAFT_AUTO_THREADS is 'yes': 0 (off), 1 (keep the one-thread plan), steps"),
            std::string::npos);
}

TEST_F(AutoThreads, TrainingKeepsItsThreads) {
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, Shape{4, 3}), "x");
  TensorId w = b.addInitializedInputTensor(testing::fromVec(randomVec(6, 3), {3, 2}), "w");
  TensorId y = b.addOp("MatMul", "", 17, {x, w}).at(0);
  TensorId loss = b.addOp("ReduceSumSquare", "", 17, {y}, {{"keepdims", int64_t{0}}}).at(0);
  b.addOutputTensor(loss);
  setenv("GRAFT_AUTO_THREADS", "1", 1);
  auto s = TrainingSession::createFromOnnxModel(b.getModelProto(), DataFlow(1, {loss}), loss, SGD(0.01),
                                                DeviceManager().createCpuDevice(), {}, threads(2));
  s->prepareDevice();
  std::vector<float> xv = randomVec(12, 4);
  auto anchors = s->initAnchorArrays();
  StepIO io({{"x", NDArray::wrap(xv.data(), DataType::Float, {4, 3})}}, anchors);
  s->run(io);
  EXPECT_EQ(s->kernelThreads(), 2);
}

}  // namespace
}  // namespace graft
