// runtime: hostile input (issue 16) through the C++ API: resource limits, one session run from
// several threads (also under ThreadSanitizer: make test-tsan), special files, atomic checkpoint
// writes from concurrent processes, names that are not UTF-8, validated values.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <graft/graft.hpp>

#include <atomic>
#include <fstream>
#include <limits>
#include <thread>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"
#include "onnx/validate_names.hpp"
#include "support/file_util.hpp"
#include "support/limits.hpp"

namespace graft {
namespace {

using testing::errorOf;

// y = x * 2 + w, x FLOAT [2, 4], w a weight [2, 4].
std::string smallModel(const std::string& inputName = "x") {
  ir::Graph g("small");
  ir::Tensor* x =
      g.addTensor(inputName, ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{2, 4})), ir::TensorKind::Input);
  g.addInput(x);
  NDArray two(DataType::Float, Shape{});
  *two.data<float>() = 2.0f;
  NDArray w(DataType::Float, Shape{2, 4});
  for (int i = 0; i < 8; ++i) w.data<float>()[i] = static_cast<float>(i);
  ir::Tensor* twoT = g.addInitializer("two", two, ir::TensorKind::Constant);
  ir::Tensor* wT = g.addInitializer("w", w, ir::TensorKind::Variable);
  ir::Tensor* m = g.addNode("Mul", "", {x, twoT}, {"m"})->output(0);
  ir::Tensor* y = g.addNode("Add", "", {m, wT}, {"y"})->output(0);
  y->setType(ir::ValueType::tensor(TensorInfo(DataType::Float, Shape{2, 4})));
  g.addOutput(y);
  return onnxio::saveModelBytes(g);
}

TEST(Reliability, ThreadCountsAreBoundedBeforeAnythingStarts) {
  auto& dm = DeviceManager::createDeviceManager();
  std::string msg = errorOf([&] { dm.createCpuDevice(1, 1000000); });
  EXPECT_NE(msg.find("coresPerVirtualDevice = 1000000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("limit of"), std::string::npos) << msg;
  msg = errorOf([&] { dm.createCpuDevice(40000); });
  EXPECT_NE(msg.find("numVirtualDevices = 40000"), std::string::npos) << msg;
  SessionOptions o;
  o.numThreads = 100000;
  msg = errorOf(
      [&] { InferenceSession::createFromOnnxModel(smallModel(), DataFlow(1, {"y"}), dm.createCpuDevice(), {}, o); });
  EXPECT_NE(msg.find("SessionOptions.numThreads = 100000"), std::string::npos) << msg;
  // Within the limit is fine.
  o.numThreads = support::maxThreadsPerDevice();
  EXPECT_NO_THROW(InferenceSession::createFromOnnxModel(smallModel(), DataFlow(1, {"y"}), dm.createCpuDevice(), {}, o));
}

TEST(Reliability, AllocationsBeyondMemoryAreRefused) {
  EXPECT_EQ(support::saturatingMul(int64_t{1} << 40, int64_t{1} << 40), std::numeric_limits<int64_t>::max());
  std::string msg = errorOf([] { support::checkAllocation("the test", std::numeric_limits<int64_t>::max()); });
  EXPECT_NE(msg.find("the test needs"), std::string::npos) << msg;
  EXPECT_NO_THROW(support::checkAllocation("the test", 1024));
}

// One kernel thread: the point is the session's own state (ThreadSanitizer runs this test, and
// libgomp's threads are not instrumented).
TEST(Reliability, RunFromSeveralThreadsIsSerialised) {
  auto s = InferenceSession::createFromOnnxModel(smallModel(), DataFlow(1, {"y"}),
                                                 DeviceManager::createDeviceManager().createCpuDevice(1, 1));
  s->prepareDevice();
  std::atomic<int> failures{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) {
        NDArray x(DataType::Float, Shape{2, 4});
        for (int e = 0; e < 8; ++e) x.data<float>()[e] = static_cast<float>(k);
        NDArray y(DataType::Float, Shape{2, 4});
        StepIO io({{"x", x}}, {{"y", y}});
        try {
          s->run(io);
        } catch (const std::exception&) {
          ++failures;
          continue;
        }
        for (int e = 0; e < 8; ++e)
          if (y.data<float>()[e] != 2.0f * k + e) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Reliability, SpecialFilesAreRefusedByName) {
  testing::TempDir dir;
  std::string fifo = dir.file("f");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto dev = DeviceManager::createDeviceManager().createCpuDevice();
  for (const auto& [path, kind] : std::vector<std::pair<std::string, std::string>>{
           {fifo, "a FIFO"}, {dir.path().string(), "a directory"}, {"/dev/zero", "a character device"}}) {
    std::string msg = errorOf([&] { InferenceSession::createFromOnnxModel(path, DataFlow(1, {"y"}), dev); });
    EXPECT_NE(msg.find(kind), std::string::npos) << msg;
    EXPECT_EQ(msg.find("does not exist"), std::string::npos) << msg;
  }
  std::string msg =
      errorOf([&] { InferenceSession::createFromOnnxModel(dir.file("none.onnx"), DataFlow(1, {"y"}), dev); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST(Reliability, AtomicWritesNeverFollowPlantedLinksAndCleanUp) {
  testing::TempDir dir;
  std::string victim = dir.file("victim");
  std::ofstream(victim) << "precious";
  ASSERT_EQ(symlink(victim.c_str(), dir.file("ck.onnx.tmp").c_str()), 0);
  support::writeFileAtomically("model file", dir.file("ck.onnx"), "new bytes");
  std::ifstream v(victim);
  std::string text((std::istreambuf_iterator<char>(v)), {});
  EXPECT_EQ(text, "precious");
  EXPECT_NE(errorOf([] { support::writeFileAtomically("model file", "", "x"); }).find("empty"), std::string::npos);
  std::string msg = errorOf([&] { support::writeFileAtomically("model file", dir.file("no/such/ck.onnx"), "x"); });
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  std::filesystem::create_directory(dir.file("isdir"));
  msg = errorOf([&] { support::writeFileAtomically("model file", dir.file("isdir"), "x"); });
  EXPECT_NE(msg.find("a directory"), std::string::npos) << msg;
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) (void)e, ++entries;
  EXPECT_EQ(entries, 4);  // victim, the planted link, ck.onnx, isdir: no temporary file left
}

// Two forked writers replace one file 200 times each with contents of different sizes; the parent
// reads it all the while. A read must always be one writer's whole contents.
TEST(Reliability, ConcurrentWritersLastRenameWinsNoTornReads) {
  testing::TempDir dir;
  std::string path = dir.file("ck.onnx");
  std::string a(100000, 'a'), b(70000, 'b');
  support::writeFileAtomically("model file", path, a);
  pid_t pids[2];
  for (int w = 0; w < 2; ++w) {
    pids[w] = fork();
    ASSERT_GE(pids[w], 0);
    if (pids[w] == 0) {
      try {
        for (int i = 0; i < 200; ++i) support::writeFileAtomically("model file", path, w ? b : a);
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
  }
  int torn = 0, reads = 0;
  for (;;) {
    int status = 0;
    bool done = waitpid(pids[0], &status, WNOHANG) != 0 && waitpid(pids[1], &status, WNOHANG) != 0;
    std::ifstream f(path, std::ios::binary);
    std::string got((std::istreambuf_iterator<char>(f)), {});
    ++reads;
    if (got != a && got != b) ++torn;
    if (done) break;
  }
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) (void)e, ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(Reliability, NamesMustBeUtf8) {
  EXPECT_TRUE(onnxio::isValidUtf8("plain, é, 漢字, 😀"));
  EXPECT_FALSE(onnxio::isValidUtf8("\x9e\x9e"));
  EXPECT_FALSE(onnxio::isValidUtf8("\xc0\x80"));          // overlong
  EXPECT_FALSE(onnxio::isValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(onnxio::isValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_EQ(onnxio::escapeBytes("a\x9e\\"), "a\\x9e\\\\");
  std::string msg = errorOf([] {
    InferenceSession::createFromOnnxModel(smallModel("\x9e\x9e\x9e\x9e"), DataFlow(1, {"y"}),
                                          DeviceManager::createDeviceManager().createCpuDevice());
  });
  EXPECT_NE(msg.find("not valid UTF-8: '\\x9e\\x9e\\x9e\\x9e'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Mul"), std::string::npos) << msg;  // the node that reads it
}

TEST(Reliability, OptimizerValuesAreValidatedInTheCore) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(errorOf([&] {
              SGD({{"defaultLearningRate", {nan, false}}});
            }).find("learningRate must be a finite"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              SGD({{"defaultLearningRate", {-1.0f, true}}});
            }).find("learningRate must be >= 0"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              SGD({{"defaultVelocityScaling", {0.0f, true}}});
            }).find("velocityScaling must be > 0"),
            std::string::npos);
  EXPECT_NE(errorOf([] { Adam({{"defaultBeta2", {1.0f, true}}}); }).find("beta2 must be in [0, 1)"), std::string::npos);
  SGD ok({{"defaultLearningRate", {0.1f, true}}});
  EXPECT_NE(errorOf([&] {
              ok.insertSpecific("w", {{"momentum", {2.0f, true}}});
            }).find("for weight 'w'"),
            std::string::npos);
}

TEST(Reliability, AnchorArraysMustHoldExactlyOneStep) {
  auto s = InferenceSession::createFromOnnxModel(smallModel(), DataFlow(1, {"y"}),
                                                 DeviceManager::createDeviceManager().createCpuDevice());
  NDArray x(DataType::Float, Shape{2, 4});
  NDArray big(DataType::Float, Shape{200, 4});
  StepIO io({{"x", x}}, {{"y", big}});
  std::string msg = errorOf([&] { s->run(io); });
  EXPECT_NE(msg.find("anchor array 'y' has shape [200, 4]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace graft
