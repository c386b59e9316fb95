// tools: graft train on tiny synthetic data sets (run in-process), its data files (IDX), optimizer
// specs, the progress bar, and the Fashion-MNIST demo models.
#include <gtest/gtest.h>
#include <zlib.h>

#include <graft/builder.hpp>
#include <graft/graft.hpp>

#include <cmath>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "../unit_test_util.hpp"
#include "cli.hpp"
#include "cli_test_util.hpp"
#include "demo_model.hpp"
#include "idx.hpp"
#include "npy.hpp"
#include "optimizer_spec.hpp"
#include "progress.hpp"
#include "train_data.hpp"

namespace graft::tools {
namespace {

using testing::cli;
using testing::contains;
using testing::Result;

// The train loss of every epoch, from lines "epoch E/N  train loss X ...".
std::vector<double> epochLosses(const std::string& out) {
  std::vector<double> v;
  std::regex re(R"(epoch \d+/\d+  train loss ([0-9.]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) v.push_back(std::stod((*it)[1]));
  return v;
}

double reportedAccuracy(const std::string& out) {
  std::smatch m;
  std::regex re(R"(test +[0-9,]+ samples: test loss [0-9.]+  accuracy ([0-9.]+)%)");
  return std::regex_search(out, m, re) ? std::stod(m[1]) : -1;
}

NDArray floats(Shape shape, const std::vector<float>& v) {
  NDArray a(DataType::Float, std::move(shape));
  std::copy(v.begin(), v.end(), a.data<float>());
  return a;
}

// Three Gaussian blobs in the plane, one per class; labels int64 (or `labelType`).
void writeBlobs(const std::string& xPath, const std::string& yPath, int64_t n, uint64_t seed,
                DataType labelType = DataType::Int64) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  const float centers[3][2] = {{2, 0}, {-1, 1.7f}, {-1, -1.7f}};
  NDArray x(DataType::Float, {n, 2});
  NDArray y(DataType::Int64, {n});
  for (int64_t i = 0; i < n; ++i) {
    int64_t c = static_cast<int64_t>(rng() % 3);
    x.data<float>()[2 * i] = centers[c][0] + noise(rng);
    x.data<float>()[2 * i + 1] = centers[c][1] + noise(rng);
    y.data<int64_t>()[i] = c;
  }
  writeNpy(xPath, x);
  writeNpy(yPath, labelType == DataType::Int64 ? y : convertForInput(y, labelType, "labels"));
}

// x FLOAT [batch, 2] -> Gemm (weights all zero) -> logits [batch, 3] (-> Softmax / LogSoftmax -> probs).
std::string linearClassifier(const std::string& head = "") {
  Builder b;
  TensorId x = b.addInputTensor(TensorInfo(DataType::Float, {Dim("batch"), Dim(2)}), "x");
  TensorId w = b.addInitializedInputTensor(NDArray(DataType::Float, {2, 3}), "w");
  TensorId bias = b.addInitializedInputTensor(NDArray(DataType::Float, {3}), "bias");
  TensorId y = b.addOp("Gemm", "", 17, {x, w, bias}).at(0);
  if (!head.empty()) y = b.addOp(head, "", 17, {y}, {{"axis", int64_t{-1}}}).at(0);
  b.addOutputTensor(y);
  return b.getModelProto();
}

class Train : public ::testing::Test {
 protected:
  void SetUp() override {
    model = dir.file("linear.onnx");
    writeFile(model, linearClassifier());
    x = dir.file("x.npy");
    y = dir.file("y.npy");
    tx = dir.file("tx.npy");
    ty = dir.file("ty.npy");
    writeBlobs(x, y, 240, 1);
    writeBlobs(tx, ty, 90, 2);
  }
  static void writeFile(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  // Exit code 1 with a message containing `part`.
  void fails(std::vector<std::string> args, const std::string& part) {
    Result r = cli(std::move(args));
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_TRUE(contains(r.err, part)) << "expected '" << part << "' in: " << r.err;
  }
  std::vector<std::string> base() {
    return {"train", model, "--input", "x=" + x, "--label", "label=" + y, "--loss", "softmax-ce", "--progress", "none"};
  }
  testing::TempDir dir;
  std::string model, x, y, tx, ty;
};

TEST_F(Train, SoftmaxCrossEntropyLearnsAndWritesARunnableModel) {
  std::string trained = dir.file("out/trained.onnx");
  auto args = base();
  args.insert(args.end(), {"--optimizer", "sgd:lr=0.1,momentum=0.9", "--batch-size", "16", "--epochs", "4", "--eval",
                           "x=" + tx, "--eval", "label=" + ty, "--output", trained});
  Result r = cli(args);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<double> losses = epochLosses(r.out);
  ASSERT_EQ(losses.size(), 4u) << r.out;
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << r.out;
  double acc = reportedAccuracy(r.out);
  EXPECT_GT(acc, 90.0) << r.out;
  EXPECT_TRUE(contains(r.out, "15 steps per epoch")) << r.out;
  EXPECT_TRUE(contains(r.out, "wrote      " + trained)) << r.out;

  // The written model is the input model (input x, one output, no label) with trained weights:
  // its accuracy on the test data is the one reported.
  auto session = InferenceSession::createFromOnnxModel(trained, DataFlow(1, std::vector<TensorId>{"Gemm:0"}),
                                                       DeviceManager::createDeviceManager().createCpuDevice());
  EXPECT_EQ(session->inputIds(), std::vector<TensorId>{"x"});
  NDArray xs = readNpy(tx), ys = readNpy(ty);
  auto anchors = std::map<TensorId, NDArray>{{"Gemm:0", NDArray(DataType::Float, {90, 3})}};
  StepIO io({{"x", xs}}, anchors);
  session->run(io);
  int64_t right = countCorrect(anchors.at("Gemm:0"), ys, 1);
  EXPECT_NEAR(100.0 * static_cast<double>(right) / 90.0, acc, 0.01);
  WeightsIO w;
  w.insert("w", NDArray(DataType::Float, {2, 3}));
  session->readWeights(w);
  EXPECT_GT(std::abs(w.weight("w").data<float>()[0]), 0.1f);  // trained away from zero
}

TEST_F(Train, CpuAndReferenceDevicesAgree) {
  std::vector<std::vector<double>> losses;
  for (const char* device : {"cpu", "reference"}) {
    auto args = base();
    args.insert(args.end(), {"--optimizer", "adam:lr=0.01", "--batch-size", "24", "--epochs", "3", "--device", device});
    Result r = cli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    losses.push_back(epochLosses(r.out));
  }
  ASSERT_EQ(losses[0].size(), 3u);
  for (size_t e = 0; e < 3; ++e) EXPECT_NEAR(losses[0][e], losses[1][e], 1e-3) << "epoch " << e + 1;
}

TEST_F(Train, ProgressLinesShowStepsLossAndRate) {
  auto args = base();
  args[args.size() - 1] = "lines";
  args.insert(args.end(), {"--batch-size", "8", "--epochs", "2"});
  Result r = cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "epoch 1/2")) << r.err;
  EXPECT_TRUE(contains(r.err, "30/30 steps")) << r.err;
  EXPECT_TRUE(contains(r.err, "samples/s")) << r.err;
  EXPECT_TRUE(contains(r.err, "loss 0.")) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(ETA \d+:\d\d)"))) << r.err;
}

TEST_F(Train, ProfileShowsOpTimesAndReorders) {
  auto args = base();
  args.insert(args.end(), {"--batch-size", "8", "--epochs", "1", "--profile"});
  Result r = cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "profile    time in kernels by op type (training steps)")) << r.out;
  EXPECT_TRUE(contains(r.out, "Gemm")) << r.out;
  // A Gemm model has no activation layouts to convert: the count is there, and it is zero.
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(reorders   0\.0 per training step, 0\.00 MB)"))) << r.out;
}

TEST_F(Train, NllOnProbabilitiesAndLogProbabilities) {
  for (const char* head : {"Softmax", "LogSoftmax"}) {
    std::string m = dir.file(std::string(head) + ".onnx");
    writeFile(m, linearClassifier(head));
    Result r = cli({"train",      m,        "--input",      "x=" + x,      "--label",
                    "label=" + y, "--loss", "nll",          "--optimizer", "adam:lr=0.05",
                    "--epochs",   "3",      "--batch-size", "16",          "--progress",
                    "none",       "--eval", "x=" + tx,      "--eval",      "label=" + ty});
    ASSERT_EQ(r.code, 0) << head << ": " << r.err;
    std::vector<double> losses = epochLosses(r.out);
    ASSERT_EQ(losses.size(), 3u);
    EXPECT_LT(losses.back(), 0.6 * losses.front()) << head << "\n" << r.out;
    EXPECT_GT(reportedAccuracy(r.out), 90.0) << r.out;
    EXPECT_EQ(contains(r.out, "log-probabilities"), std::string(head) == "LogSoftmax") << r.out;
  }
}

TEST_F(Train, RegressionLossesAndSeveralBatchesPerStep) {
  // t = x @ [1, -2] + 0.5 (a [n, 1] target) from a Gemm with one output.
  Builder b;
  TensorId in = b.addInputTensor(TensorInfo(DataType::Float, {Dim("n"), Dim(2)}), "x");
  TensorId w = b.addInitializedInputTensor(NDArray(DataType::Float, {2, 1}), "w");
  TensorId c = b.addInitializedInputTensor(NDArray(DataType::Float, {1}), "c");
  b.addOutputTensor(b.addOp("Gemm", "", 17, {in, w, c}).at(0));
  std::string m = dir.file("regression.onnx");
  writeFile(m, b.getModelProto());
  NDArray xs = readNpy(x);
  NDArray t(DataType::Double, {xs.dim(0), 1});  // float64 targets are converted to float32
  for (int64_t i = 0; i < xs.dim(0); ++i)
    t.data<double>()[i] = xs.data<float>()[2 * i] - 2 * xs.data<float>()[2 * i + 1] + 0.5;
  std::string tPath = dir.file("t.npy");
  writeNpy(tPath, t);
  for (const char* loss : {"mse", "l1"}) {
    Result r = cli({"train",
                    m,
                    "--input",
                    "x=" + x,
                    "--label",
                    "t=" + tPath,
                    "--loss",
                    loss,
                    "--optimizer",
                    "sgd:lr=0.05",
                    "--epochs",
                    "3",
                    "--batch-size",
                    "10",
                    "--batches-per-step",
                    "4",
                    "--progress",
                    "none",
                    "--eval",
                    "x=" + x,
                    "--eval",
                    "t=" + tPath});
    ASSERT_EQ(r.code, 0) << loss << ": " << r.err;
    EXPECT_TRUE(contains(r.out, "4 batches per step: 6 steps per epoch")) << r.out;
    EXPECT_TRUE(contains(r.out, "converted from float64")) << r.out;
    std::vector<double> losses = epochLosses(r.out);
    ASSERT_EQ(losses.size(), 3u);
    EXPECT_LT(losses.back(), 0.5 * losses.front()) << loss << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "accuracy")) << r.out;
  }
  // A learning rate that makes the loss overflow stops with a message, not with NaN weights.
  Result r = cli({"train", m, "--input", "x=" + x, "--label", "t=" + tPath, "--loss", "mse", "--optimizer",
                  "sgd:lr=1e30", "--progress", "none"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "training diverged; try a smaller learning rate than in --optimizer sgd:lr=1e30"))
      << r.err;
}

TEST_F(Train, ALossTensorOfTheModel) {
  // The model computes its own loss from a label input: --loss names it, the label is an --input.
  Builder b;
  TensorId in = b.addInputTensor(TensorInfo(DataType::Float, {Dim("batch"), Dim(2)}), "x");
  TensorId label = b.addInputTensor(TensorInfo(DataType::Int32, {Dim("batch")}), "label");
  TensorId w = b.addInitializedInputTensor(NDArray(DataType::Float, {2, 3}), "w");
  TensorId logits = b.addOp("MatMul", "", 17, {in, w}).at(0);
  TensorId lp = b.addOp("LogSoftmax", "", 17, {logits}, {{"axis", int64_t{1}}}).at(0);
  TensorId loss = b.addOp("Nll", "ai.graphcore", 1, {lp, label},
                          {{"reduction", std::string("Mean")}, {"inputIsLogProbability", int64_t{1}}})
                      .at(0);
  b.addOutputTensor(logits);
  std::string m = dir.file("with_loss.onnx");
  writeFile(m, b.getModelProto());
  Result r = cli({"train",        m,
                  "--input",      "x=" + x,
                  "--input",      "label=" + y,
                  "--loss",       loss,
                  "--optimizer",  "sgd:lr=0.2",
                  "--epochs",     "3",
                  "--batch-size", "12",
                  "--progress",   "none",
                  "--eval",       "x=" + tx,
                  "--eval",       "label=" + ty,
                  "--output",     dir.file("with_loss_trained.onnx")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "(converted from int64)")) << r.out;  // labels int64 -> the model's int32
  std::vector<double> losses = epochLosses(r.out);
  ASSERT_EQ(losses.size(), 3u);
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << r.out;
  EXPECT_TRUE(contains(r.out, "test loss")) << r.out;
}

TEST_F(Train, UnsignedLabelsAndFixedBatch) {
  // uint8 labels (as IDX files hold them) convert to int64; a model with a fixed batch of 20
  // takes its batch size from the model and evaluates whole batches only.
  std::string y8 = dir.file("y8.npy");
  writeBlobs(dir.file("unused.npy"), y8, 240, 1, DataType::UInt8);
  Builder b;
  TensorId in = b.addInputTensor(TensorInfo(DataType::Float, Shape{20, 2}), "x");
  TensorId w = b.addInitializedInputTensor(NDArray(DataType::Float, {2, 3}), "w");
  b.addOutputTensor(b.addOp("MatMul", "", 17, {in, w}).at(0));
  std::string m = dir.file("fixed.onnx");
  writeFile(m, b.getModelProto());
  Result r = cli({"train", m, "--input", "x=" + x, "--label", "label=" + y8, "--loss", "softmax-ce", "--progress",
                  "none", "--eval", "x=" + tx, "--eval", "label=" + ty});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "20 samples per batch")) << r.out;
  EXPECT_TRUE(contains(r.out, "(converted from uint8)")) << r.out;
  EXPECT_TRUE(contains(r.out, "test       80 samples")) << r.out;
  EXPECT_TRUE(contains(r.out, "10 samples left out (the model fixes the batch at 20)")) << r.out;
  fails({"train", m, "--input", "x=" + x, "--label", "label=" + y8, "--loss", "softmax-ce", "--batch-size", "8"},
        "--batch-size 8: the model fixes the batch dimension at 20");
}

TEST_F(Train, BadOptionsAndDataAreNamed) {
  auto with = [&](std::vector<std::string> extra) {
    auto a = base();
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  fails({"train", model, "--input", "x=" + x, "--label", "label=" + y, "--loss", "hinge"},
        "--loss 'hinge' is neither a loss kind (nll, softmax-ce, mse, l1) nor a tensor of the model");
  fails({"train", model, "--input", "x=" + x, "--label", "label=" + y, "--loss", "softmax-ce:nope"},
        "the model has no tensor 'nope' (its outputs: Gemm:0)");
  fails({"train", model, "--input", "x=" + x, "--loss", "softmax-ce"}, "--loss softmax-ce needs a label array");
  fails(with({"--optimizer", "sgd"}), "the learning rate is required, for example sgd:lr=0.01");
  fails(with({"--optimizer", "rmsprop:lr=0.1,beta1=0.9"}), "rmsprop has no parameter 'beta1'");
  fails(with({"--optimizer", "sgd:lr=fast"}), "lr must be a finite number, got 'fast'");
  fails(with({"--optimizer", "sgd:lr=0.1,momentum=1.5"}), "momentum must be in [0, 1), got 1.5");
  fails(with({"--optimizer", "adagrand:lr=0.1"}), "unknown optimizer 'adagrand'");
  fails(with({"--input", "z=" + x}), "--input z: the model has no input 'z' (its inputs: x, label)");
  fails(with({"--batch-size", "500"}), "the training data has 240 samples, fewer than one step of 1 batch of 500");
  fails(with({"--eval", "x=" + tx}), "--eval has no 'label'");
  fails({"train", model, "--input", "x=" + x, "--label", "label=" + x, "--loss", "softmax-ce"},
        "one sample is [2]; softmax-ce on 'Gemm:0' (FLOAT [batch, 3]) needs labels of shape [batch]");
  fails({"train", model, "--input", "x=" + x, "--label", "w=" + y, "--loss", "softmax-ce"},
        "--label w: the model already has a tensor 'w'");
  fails({"train", model, "--input", "x=" + x, "--label", "x=" + y, "--loss", "softmax-ce"},
        "'x' is given both with --input and --label");
  fails({"train", model, "--input", "x=" + dir.file("missing.npy"), "--label", "label=" + y, "--loss", "mse"},
        "does not exist");

  // Data that does not fit the model.
  std::string fy = dir.file("fy.npy"), big = dir.file("big.npy"), short_ = dir.file("short.npy"),
              wide = dir.file("wide.npy");
  writeNpy(fy, floats({240}, std::vector<float>(240, 1.0f)));
  NDArray labels(DataType::Int64, {240});
  labels.data<int64_t>()[7] = 3;
  writeNpy(big, labels);
  writeNpy(short_, NDArray(DataType::Int64, {100}));
  writeNpy(wide, NDArray(DataType::Float, {240, 3}));
  fails({"train", model, "--input", "x=" + x, "--label", "label=" + fy, "--loss", "softmax-ce"},
        "holds float32 values; softmax-ce needs integer class indices");
  fails({"train", model, "--input", "x=" + x, "--label", "label=" + big, "--loss", "softmax-ce"},
        "label 3 at position 7 is not a class index in [0, 3)");
  fails({"train", model, "--input", "x=" + x, "--label", "label=" + short_, "--loss", "softmax-ce"},
        "arrays differ in their number of samples");
  fails({"train", model, "--input", "x=" + wide, "--label", "label=" + y, "--loss", "softmax-ce"},
        "has shape [240, 3] but the model input is FLOAT [batch, 2]: dimension 1 must be 2");
  std::string fx = dir.file("fx.npy");
  writeNpy(fx, NDArray(DataType::Int64, {240, 2}));  // integers convert to float: accepted
  EXPECT_EQ(
      cli({"train", model, "--input", "x=" + fx, "--label", "label=" + y, "--loss", "softmax-ce", "--progress", "none"})
          .code,
      0);

  // Usage errors (CLI11) exit with 2.
  EXPECT_EQ(cli({"train", model, "--input", "x=" + x}).code, 2);  // --loss is required
  EXPECT_EQ(cli(with({"--epochs", "0"})).code, 2);
  EXPECT_EQ(cli(with({"--progress", "fancy"})).code, 2);
}

// ---- data files -------------------------------------------------------------------------------

std::string idxBytes(uint8_t type, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift : {24, 16, 8, 0}) s += static_cast<char>((d >> shift) & 0xFF);
  return s + data;
}

TEST(IdxFile, ParsesBigEndianElements) {
  NDArray u = parseIdx(idxBytes(0x08, {2, 3}, std::string("\x01\x02\x03\x04\x05\xFF", 6)));
  EXPECT_EQ(u.dtype(), DataType::UInt8);
  EXPECT_EQ(u.shape(), (Shape{2, 3}));
  EXPECT_EQ(u.data<uint8_t>()[5], 255);
  NDArray i = parseIdx(idxBytes(0x0C, {2}, std::string("\x00\x00\x01\x02\xFF\xFF\xFF\xFE", 8)));
  EXPECT_EQ(i.dtype(), DataType::Int32);
  EXPECT_EQ(i.data<int32_t>()[0], 258);
  EXPECT_EQ(i.data<int32_t>()[1], -2);
  NDArray f = parseIdx(idxBytes(0x0D, {1}, std::string("\x3F\xC0\x00\x00", 4)));
  EXPECT_EQ(f.data<float>()[0], 1.5f);
}

TEST(IdxFile, BadFilesAreNamed) {
  auto fails = [](const std::string& bytes, const std::string& part) {
    try {
      parseIdx(bytes, "'f.idx'");
      ADD_FAILURE() << "no error for " << part;
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), part)) << e.what();
    }
  };
  fails("\x93NUMPY", "'f.idx' is not an IDX file");
  fails(idxBytes(0x07, {1}, "x"), "unknown element type code 0x07");
  fails(std::string("\0\0\x08\x03\0\0", 6), "is truncated");
  fails(idxBytes(0x08, {2, 2}, "abc"), "announces [2, 2] UINT8 values (4 bytes of data) but the file has 3");
  fails(idxBytes(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, ""), "is too large");
}

TEST(IdxFile, ReadsGzipAndPlainFilesAndNpy) {
  testing::TempDir dir;
  std::string bytes = idxBytes(0x08, {3}, "\x07\x08\x09");
  std::string gz = dir.file("labels-idx1-ubyte.gz"), plain = dir.file("labels-idx1-ubyte");
  gzFile f = gzopen(gz.c_str(), "wb");
  ASSERT_TRUE(f);
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  std::ofstream(plain, std::ios::binary) << bytes;
  for (const auto& p : {gz, plain}) {
    NDArray a = readArrayFile(p);
    EXPECT_EQ(a.shape(), Shape{3});
    EXPECT_EQ(a.data<uint8_t>()[2], 9);
  }
  // A truncated gzip stream is an error, not a short array.
  std::ifstream in(gz, std::ios::binary);
  std::string z((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir.file("cut.gz"), std::ios::binary) << z.substr(0, z.size() - 6);
  EXPECT_THROW(readArrayFile(dir.file("cut.gz")), Error);
  writeNpy(dir.file("a.npy"), NDArray(DataType::Float, {2}));
  EXPECT_EQ(readArrayFile(dir.file("a.npy")).dtype(), DataType::Float);
  EXPECT_THROW(readArrayFile(dir.file("none.gz")), Error);
}

TEST(TrainData, ConversionsKeepValuesOrRefuse) {
  NDArray i = NDArray(DataType::Int64, {3});
  i.data<int64_t>()[0] = -1;
  i.data<int64_t>()[2] = 300;
  NDArray f = convertForInput(i, DataType::Float, "a");
  EXPECT_EQ(f.data<float>()[2], 300.0f);
  EXPECT_EQ(convertForInput(i, DataType::Int16, "a").data<int16_t>()[0], -1);
  EXPECT_THROW(convertForInput(i, DataType::UInt8, "a"), Error);  // -1 and 300 do not fit
  EXPECT_THROW(convertForInput(f, DataType::Int64, "a"), Error);  // floats never become integers
  NDArray scores = floats({2, 3}, {0, 5, 1, 9, NAN, 2});
  NDArray labels(DataType::Int64, {2});
  labels.data<int64_t>()[0] = 1;
  labels.data<int64_t>()[1] = 0;
  EXPECT_EQ(countCorrect(scores, labels, 1), 2);
  int64_t rows[] = {1, 1, 0};
  NDArray g(DataType::Float, {3, 3});
  gatherRows(scores, rows, 3, g);
  EXPECT_EQ(g.data<float>()[0], 9.0f);
  EXPECT_EQ(g.data<float>()[8], 1.0f);
}

// ---- optimizer specs and the progress bar --------------------------------------------------------

TEST(OptimizerSpec, KindsAndParameters) {
  ParsedOptimizer sgd = parseOptimizerSpec("sgd:lr=0.05, momentum=0.9,nesterov");
  ASSERT_EQ(sgd.optimizer->type(), OptimizerType::SGD);
  EXPECT_TRUE(static_cast<SGD&>(*sgd.optimizer).nesterov());
  EXPECT_FLOAT_EQ(sgd.optimizer->get("learningRate").val(), 0.05f);
  EXPECT_FLOAT_EQ(sgd.optimizer->get("momentum").val(), 0.9f);
  EXPECT_EQ(sgd.description, "SGD (nesterov): lr 0.05, momentum 0.9");
  ParsedOptimizer adamw = parseOptimizerSpec("AdamW:lr=1e-3");
  auto& a = static_cast<Adam&>(*adamw.optimizer);
  EXPECT_EQ(a.weightDecayMode(), WeightDecayMode::Decay);
  EXPECT_FLOAT_EQ(a.get("weightDecay").val(), 0.01f);
  EXPECT_EQ(adamw.description, "AdamW: lr 0.001, decoupled weight decay 0.01");
  auto adam = parseOptimizerSpec("adam:lr=1e-3,wd=1e-4,clip=1");
  EXPECT_EQ(static_cast<Adam&>(*adam.optimizer).weightDecayMode(), WeightDecayMode::L2Regularization);
  ASSERT_EQ(adam.optimizer->clipNormSettings().size(), 1u);
  EXPECT_FLOAT_EQ(adam.optimizer->clipNormSettings()[0].maxNorm(), 1.0f);
  EXPECT_EQ(static_cast<Adaptive&>(*parseOptimizerSpec("centered-rmsprop:lr=0.01").optimizer).mode(),
            AdaptiveMode::CenteredRMSProp);
  EXPECT_EQ(static_cast<Adam&>(*parseOptimizerSpec("lamb:lr=0.01").optimizer).mode(), AdamMode::Lamb);
  for (const char* bad : {"", "sgd:lr=0", "sgd:lr=0.1,lr=0.2", "sgd:lr=0.1,wd", "sgd:lr=0.1,nesterov",
                          "adam:lr=0.1,beta2=1", "adam:lr=inf", "sgd:lr=0.1,clip=-1"})
    EXPECT_THROW(parseOptimizerSpec(bad), Error) << bad;
}

TEST(Progress, BarAndLines) {
  EXPECT_EQ(clockTime(0), "0:00");
  EXPECT_EQ(clockTime(65.9), "1:05");
  EXPECT_EQ(clockTime(3723), "1:02:03");
  EXPECT_EQ(clockTime(NAN), "--:--");
  std::ostringstream lines;
  ProgressBar l(lines, ProgressMode::Lines, "epoch 1/1", 20, 8);
  for (int i = 0; i <= 20; ++i) l.update(i, i ? 1.0 / i : NAN);
  l.finish();
  std::string s = lines.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 10) << s;  // every other step
  EXPECT_TRUE(contains(s, "epoch 1/1 20/20 steps  loss 0.0500")) << s;
  EXPECT_TRUE(contains(s, "total")) << s;
  std::ostringstream bar;
  ProgressBar b(bar, ProgressMode::Bar, "epoch 2/3", 4, 8);
  b.update(4, 0.25);
  b.finish();
  EXPECT_TRUE(contains(bar.str(), "\repoch 2/3 [========================] 4/4 steps  loss 0.2500")) << bar.str();
  EXPECT_EQ(bar.str().back(), '\n');
  std::ostringstream none;
  ProgressBar n(none, ProgressMode::None, "x", 4, 8);
  n.update(4, 1);
  n.finish();
  EXPECT_EQ(none.str(), "");
}

// ---- the Fashion-MNIST demo models ----------------------------------------------------------------

TEST(FashionModel, TakesRawImagesAndReturnsLogits) {
  for (auto kind : {FashionModelKind::Cnn, FashionModelKind::Mlp}) {
    std::string bytes = buildFashionModel(kind);
    EXPECT_EQ(bytes, buildFashionModel(kind));  // a fixed function of the seed
    EXPECT_NE(bytes, buildFashionModel(kind, 7));
    auto s = InferenceSession::createFromOnnxModel(bytes, DataFlow(1, std::vector<TensorId>{"fc2/Gemm:0"}),
                                                   DeviceManager::createDeviceManager().createCpuDevice());
    EXPECT_EQ(s->inputInfo("image").str(), "UINT8 [batch, 28, 28]");
    NDArray images(DataType::UInt8, {2, 28, 28});
    for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
    std::map<TensorId, NDArray> out{{"fc2/Gemm:0", NDArray(DataType::Float, {2, 10})}};
    StepIO io({{"image", images}}, out);
    s->run(io);
    const NDArray& logits = out.at("fc2/Gemm:0");
    bool finiteAndVaried = true;
    for (int64_t i = 0; i < logits.numel(); ++i) finiteAndVaried &= std::isfinite(logits.data<float>()[i]);
    EXPECT_TRUE(finiteAndVaried);
    EXPECT_NE(logits.data<float>()[0], logits.data<float>()[1]);
    // Only the layers' weights and biases are trained (the normalization constants are not).
    std::vector<TensorId> weights = s->weightIds();
    EXPECT_EQ(weights.size(), kind == FashionModelKind::Cnn ? 8u : 4u);
  }
}

}  // namespace
}  // namespace graft::tools
