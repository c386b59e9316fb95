// onnx: importing models built with the ONNX protobuf API, external data, export round trips,
// opset conversion and malformed files.
#include <gtest/gtest.h>
#include <onnx/defs/schema.h>

#include <cstring>
#include <fstream>

#include "../unit_test_util.hpp"
#include "ir/graph.hpp"
#include "onnx/model_io.hpp"

namespace graft::onnxio {
namespace {

using namespace graft::testing;
namespace fs = std::filesystem;

void writeFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// y = Relu(x) with x FLOAT [batch, 3].
::onnx::ModelProto reluModel() {
  auto m = makeModel();
  addInput(m, "x", {std::string("batch"), int64_t{3}});
  addNode(m.mutable_graph(), "Relu", {"x"}, {"y"})->set_name("relu");
  addOutput(m, "y", {std::string("batch"), int64_t{3}});
  return m;
}

TEST(OnnxImport, SymbolicDimsKeepTheirNames) {
  Model model = loadModelBytes(serialize(reluModel()));
  const ir::Graph& g = *model.graph;
  ASSERT_EQ(g.inputs().size(), 1u);
  const TensorInfo& x = g.inputs()[0]->info();
  EXPECT_EQ(x.dataType(), DataType::Float);
  ASSERT_EQ(x.rank(), 2);
  EXPECT_FALSE(x.dims()[0].known());
  EXPECT_EQ(x.dims()[0].param, "batch");
  EXPECT_EQ(x.dims()[1].value, 3);
  EXPECT_EQ(x.str(), "FLOAT [batch, 3]");
  EXPECT_EQ(g.outputs()[0]->info().str(), "FLOAT [batch, 3]");
  EXPECT_EQ(model.info.producerName, "graft-tests");
  EXPECT_EQ(model.info.originalOpset, 17);
}

TEST(OnnxImport, InitializersBecomeWeightsOrConstants) {
  auto m = makeModel();
  addInput(m, "x", {int64_t{2}});
  addFloatInitializer(m.mutable_graph(), "w", {2}, {1.5f, -2.0f});
  auto* idx = m.mutable_graph()->add_initializer();
  idx->set_name("shape");
  idx->set_data_type(::onnx::TensorProto::INT64);
  idx->add_dims(1);
  idx->add_int64_data(2);
  addNode(m.mutable_graph(), "Add", {"x", "w"}, {"s"});
  addNode(m.mutable_graph(), "Reshape", {"s", "shape"}, {"y"});
  addOutput(m, "y", {int64_t{2}});
  Model model = loadModelBytes(serialize(m));
  const ir::Tensor& w = model.graph->tensor("w");
  EXPECT_EQ(w.kind(), ir::TensorKind::Variable);
  ASSERT_NE(w.data(), nullptr);
  EXPECT_EQ(w.data()->data<float>()[0], 1.5f);
  EXPECT_EQ(w.data()->data<float>()[1], -2.0f);
  EXPECT_EQ(model.graph->tensor("shape").kind(), ir::TensorKind::Constant);
}

// ---- external data ------------------------------------------------------------------------------

// y = Add(x, w) where w FLOAT [2] lives in an external file at `location`.
::onnx::ModelProto externalModel(const std::string& location) {
  auto m = makeModel();
  addInput(m, "x", {int64_t{2}});
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->set_data_location(::onnx::TensorProto::EXTERNAL);
  auto* kv = w->add_external_data();
  kv->set_key("location");
  kv->set_value(location);
  addNode(m.mutable_graph(), "Add", {"x", "w"}, {"y"});
  addOutput(m, "y", {int64_t{2}});
  return m;
}

std::string twoFloats(float a, float b) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &a, 4);
  std::memcpy(s.data() + 4, &b, 4);
  return s;
}

TEST(OnnxExternalData, LoadsFromTheModelsFolder) {
  TempDir dir;
  fs::create_directories(dir.path() / "data");
  writeFile(dir.file("data/w.bin"), twoFloats(3.0f, 4.0f));
  writeFile(dir.file("model.onnx"), serialize(externalModel("data/w.bin")));
  Model model = loadModelFile(dir.file("model.onnx"));
  const NDArray* w = model.graph->tensor("w").data();
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->data<float>()[0], 3.0f);
  EXPECT_EQ(w->data<float>()[1], 4.0f);
}

TEST(OnnxExternalData, OffsetAndLengthAreHonouredAndChecked) {
  TempDir dir;
  writeFile(dir.file("w.bin"), "PAD!" + twoFloats(5.0f, 6.0f));
  auto m = externalModel("w.bin");
  auto* w = m.mutable_graph()->mutable_initializer(0);
  auto* off = w->add_external_data();
  off->set_key("offset");
  off->set_value("4");
  writeFile(dir.file("model.onnx"), serialize(m));
  Model model = loadModelFile(dir.file("model.onnx"));
  EXPECT_EQ(model.graph->tensor("w").data()->data<float>()[1], 6.0f);

  off->set_value("8");  // only 4 bytes left for 8
  writeFile(dir.file("model.onnx"), serialize(m));
  std::string msg = errorOf([&] { loadModelFile(dir.file("model.onnx")); });
  // ONNX's checker finds it first; without the checker, graft's own check does.
  EXPECT_NE(msg.find("(tensor name: w) raw_data size (4 bytes) is too small"), std::string::npos) << msg;
  ImportOptions unchecked;
  unchecked.check = false;
  msg = errorOf([&] { loadModelFile(dir.file("model.onnx"), unchecked); });
  EXPECT_NE(msg.find("'w' has 4 bytes of data but its shape [2] of FLOAT needs 8"), std::string::npos) << msg;

  off->set_value("100");  // past the end of the file
  writeFile(dir.file("model.onnx"), serialize(m));
  msg = errorOf([&] { loadModelFile(dir.file("model.onnx")); });
  EXPECT_NE(msg.find("offset 100 is outside 'w.bin'"), std::string::npos) << msg;

  for (const char* bad : {"12abc", "-4", "", "99999999999999999999"}) {
    off->set_value(bad);
    writeFile(dir.file("model.onnx"), serialize(m));
    msg = errorOf([&] { loadModelFile(dir.file("model.onnx")); });
    EXPECT_NE(msg.find("malformed external data entry 'offset'"), std::string::npos) << msg;
  }
}

TEST(OnnxExternalData, RejectsAbsolutePaths) {
  TempDir dir;
  writeFile(dir.file("w.bin"), twoFloats(1, 2));
  writeFile(dir.file("model.onnx"), serialize(externalModel(dir.file("w.bin"))));
  std::string msg = errorOf([&] { loadModelFile(dir.file("model.onnx")); });
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is absolute"), std::string::npos) << msg;
}

TEST(OnnxExternalData, RejectsDotDot) {
  TempDir dir;
  fs::create_directories(dir.path() / "model");
  writeFile(dir.file("w.bin"), twoFloats(1, 2));
  writeFile(dir.file("model/model.onnx"), serialize(externalModel("../w.bin")));
  std::string msg = errorOf([&] { loadModelFile(dir.file("model/model.onnx")); });
  EXPECT_NE(msg.find("leaves the model's folder"), std::string::npos) << msg;
  // Also when the path comes back into the folder.
  writeFile(dir.file("model/w.bin"), twoFloats(1, 2));
  writeFile(dir.file("model/model.onnx"), serialize(externalModel("sub/../../model/w.bin")));
  msg = errorOf([&] { loadModelFile(dir.file("model/model.onnx")); });
  EXPECT_NE(msg.find("leaves the model's folder"), std::string::npos) << msg;
}

TEST(OnnxExternalData, RejectsSymlinksThatEscape) {
  TempDir dir;
  fs::create_directories(dir.path() / "model");
  writeFile(dir.file("secret.bin"), twoFloats(1, 2));
  fs::create_symlink(dir.path() / "secret.bin", dir.path() / "model" / "w.bin");
  writeFile(dir.file("model/model.onnx"), serialize(externalModel("w.bin")));
  std::string msg = errorOf([&] { loadModelFile(dir.file("model/model.onnx")); });
  EXPECT_NE(msg.find("outside the model's folder"), std::string::npos) << msg;
  // A symlinked folder that escapes is caught the same way.
  fs::create_directories(dir.path() / "elsewhere");
  writeFile(dir.file("elsewhere/w.bin"), twoFloats(1, 2));
  fs::create_directory_symlink(dir.path() / "elsewhere", dir.path() / "model" / "sub");
  writeFile(dir.file("model/model.onnx"), serialize(externalModel("sub/w.bin")));
  msg = errorOf([&] { loadModelFile(dir.file("model/model.onnx")); });
  EXPECT_NE(msg.find("outside the model's folder"), std::string::npos) << msg;
}

TEST(OnnxExternalData, MissingFileAndBytesWithoutFolder) {
  TempDir dir;
  writeFile(dir.file("model.onnx"), serialize(externalModel("absent.bin")));
  std::string msg = errorOf([&] { loadModelFile(dir.file("model.onnx")); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  msg = errorOf([&] { loadModelBytes(serialize(externalModel("w.bin"))); });
  EXPECT_NE(msg.find("without a folder"), std::string::npos) << msg;
}

// ---- export -------------------------------------------------------------------------------------

TEST(OnnxExport, RoundTripKeepsNodesAttributesWeightsAndDims) {
  ir::Graph g("net");
  auto* x = g.addTensor("x", ir::ValueType::tensor(TensorInfo(DataType::Float, {Dim("n"), Dim(4)})), ir::TensorKind::Input);
  g.addInput(x);
  NDArray w(DataType::Float, {4, 2});
  for (int i = 0; i < 8; ++i) w.data<float>()[i] = 0.25f * static_cast<float>(i);
  ir::Tensor* wt = g.addInitializer("w", w);
  ir::Tensor* mm = g.addNode("MatMul", "", {x, wt}, {"mm"}, {}, "matmul")->output(0);
  ir::Attributes a;
  a.set("perm", std::vector<int64_t>{1, 0});
  ir::Tensor* t = g.addNode("Transpose", "", {mm}, {"t"}, a, "transpose")->output(0);
  ir::Attributes lr;
  lr.set("alpha", 0.125f);
  ir::Node* leaky = g.addNode("LeakyRelu", "", {t}, {"y"}, lr, "leaky");
  leaky->virtualGraph = 1;
  leaky->output(0)->setType(ir::ValueType::tensor(TensorInfo(DataType::Float, {Dim(2), Dim("n")})));
  g.addOutput(leaky->output(0));
  ModelInfo info;
  info.producerName = "round-trip";
  info.metadata["k"] = "v";

  TempDir dir;
  saveModelFile(g, dir.file("m.onnx"), info);
  Model back = loadModelFile(dir.file("m.onnx"));
  const ir::Graph& h = *back.graph;
  EXPECT_EQ(back.info.producerName, "round-trip");
  EXPECT_EQ(back.info.metadata.at("k"), "v");
  EXPECT_EQ(h.inputs()[0]->info().str(), "FLOAT [n, 4]");
  EXPECT_EQ(h.outputs()[0]->info().str(), "FLOAT [2, n]");
  ASSERT_EQ(h.numNodes(), 3u);
  std::vector<std::string> types;
  for (const ir::Node* n : h.schedule()) types.push_back(n->type());
  EXPECT_EQ(types, (std::vector<std::string>{"MatMul", "Transpose", "LeakyRelu"}));
  const ir::Node* l = h.tensor("y").producer();
  EXPECT_EQ(l->name(), "leaky");
  EXPECT_FLOAT_EQ(l->attrFloat("alpha"), 0.125f);
  EXPECT_EQ(l->virtualGraph, std::optional<int64_t>(1));
  EXPECT_EQ(h.tensor("t").producer()->attrInts("perm"), (std::vector<int64_t>{1, 0}));
  const NDArray* w2 = h.tensor("w").data();
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w2->shape(), (Shape{4, 2}));
  EXPECT_EQ(std::memcmp(w2->rawData(), w.rawData(), w.nbytes()), 0);
  // Intermediate types were inferred on import.
  EXPECT_EQ(h.tensor("mm").info().str(), "FLOAT [n, 2]");
  // Saving again gives the same bytes: export is deterministic.
  EXPECT_EQ(saveModelBytes(h, back.info), saveModelBytes(*loadModelBytes(saveModelBytes(h, back.info)).graph, back.info));
}

// ---- opset conversion -----------------------------------------------------------------------------

TEST(OnnxOpset, ConvertsOpset9ToTheNewest) {
  auto m = makeModel(9);
  addInput(m, "x", {int64_t{3}});
  auto* u = addNode(m.mutable_graph(), "Unsqueeze", {"x"}, {"u"});
  auto* axes = u->add_attribute();
  axes->set_name("axes");
  axes->set_type(::onnx::AttributeProto::INTS);
  axes->add_ints(0);
  addNode(m.mutable_graph(), "Sigmoid", {"u"}, {"y"});
  addOutput(m, "y", {int64_t{1}, int64_t{3}});
  Model model = loadModelBytes(serialize(m));
  EXPECT_EQ(model.info.originalOpset, 9);
  EXPECT_EQ(model.graph->opsetVersion(), kCanonicalOpset);
  EXPECT_EQ(kCanonicalOpset, 28);
  const ir::Node* un = model.graph->tensor("u").producer();
  ASSERT_NE(un, nullptr);
  EXPECT_EQ(un->type(), "Unsqueeze");
  // Opset 13 moved Unsqueeze's axes from an attribute to an input.
  EXPECT_FALSE(un->attrs().has("axes"));
  ASSERT_EQ(un->numInputs(), 2u);
  ASSERT_TRUE(un->hasInput(1));
  EXPECT_EQ(model.graph->tensor("u").info().str(), "FLOAT [1, 3]");
}

TEST(OnnxOpset, RejectsNewerOpsets) {
  auto m = reluModel();
  m.mutable_opset_import(0)->set_version(99);
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("uses ai.onnx opset 99, newer than graft supports (newest: ai.onnx opset 28"), std::string::npos)
      << msg;
}

TEST(OnnxOpset, RejectsNewerIrVersions) {
  auto m = reluModel();
  m.set_ir_version(kNewestIrVersion + 1);
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("has IR version 15, newer than graft supports (newest: IR version 14"), std::string::npos) << msg;
}

TEST(OnnxOpset, UnknownOpVersionNamesTheNode) {
  // Relu exists in ai.onnx, but an ai.onnx.ml opset newer than ONNX's is refused by name, and an
  // op that no opset defines is the checker's error naming the node.
  auto m = reluModel();
  auto* ml = m.add_opset_import();
  ml->set_domain("ai.onnx.ml");
  ml->set_version(99);
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("uses ai.onnx.ml opset 99, newer than graft supports"), std::string::npos) << msg;
  auto m2 = reluModel();
  m2.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
  m2.mutable_graph()->mutable_node(0)->set_name("mystery");
  msg = errorOf([&] { loadModelBytes(serialize(m2)); });
  EXPECT_NE(msg.find("is not a valid ONNX model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NoSuchOp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mystery"), std::string::npos) << msg;
}

TEST(OnnxOpset, CanonicalOpsetIsTheLibrarysNewest) {
  const auto& ranges = ::onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  EXPECT_EQ(ranges.at("").second, kCanonicalOpset);
}

// ---- malformed files --------------------------------------------------------------------------------

TEST(OnnxMalformed, TruncatedBytesThrowGraftErrors) {
  auto m = reluModel();
  addFloatInitializer(m.mutable_graph(), "unused", {4}, {1, 2, 3, 4});
  std::string bytes = serialize(m);
  int errors = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      loadModelBytes(bytes.substr(0, n));
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  std::string msg = errorOf([&] { loadModelBytes(bytes.substr(0, bytes.size() - 3)); });
  EXPECT_NE(msg.find("is not an ONNX model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(OnnxMalformed, FilesThatAreNotOnnx) {
  TempDir dir;
  writeFile(dir.file("notes.txt"), "this is not a model\n");
  std::string msg = errorOf([&] { loadModelFile(dir.file("notes.txt")); });
  EXPECT_NE(msg.find("notes.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is not an ONNX model"), std::string::npos) << msg;
  writeFile(dir.file("empty.onnx"), "");
  msg = errorOf([&] { loadModelFile(dir.file("empty.onnx")); });
  EXPECT_NE(msg.find("it is empty"), std::string::npos) << msg;
  msg = errorOf([&] { loadModelFile(dir.file("absent.onnx")); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  msg = errorOf([&] { loadModelFile(dir.path().string()); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

TEST(OnnxMalformed, ShapeWhoseElementCountOverflowsInt64) {
  auto m = reluModel();
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("huge");
  t->set_data_type(::onnx::TensorProto::FLOAT);
  t->add_dims(int64_t{1} << 40);
  t->add_dims(int64_t{1} << 40);
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("Tensor dimension product overflow (tensor name: huge)"), std::string::npos) << msg;
  ImportOptions unchecked;  // graft's own check, behind the checker's
  unchecked.check = false;
  msg = errorOf([&] { loadModelBytes(serialize(m), unchecked); });
  EXPECT_NE(msg.find("'huge'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("int64"), std::string::npos) << msg;
}

TEST(OnnxMalformed, DataThatDoesNotMatchTheShape) {
  auto m = reluModel();
  addFloatInitializer(m.mutable_graph(), "w", {3}, {1, 2});
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_NE(msg.find("(tensor name: w) float_data size (2) is too small for the declared shape (3"), std::string::npos)
      << msg;
  ImportOptions unchecked;  // graft's own check, behind the checker's
  unchecked.check = false;
  msg = errorOf([&] { loadModelBytes(serialize(m), unchecked); });
  EXPECT_NE(msg.find("initializer 'w' has 2 values but its shape [3] needs 3"), std::string::npos) << msg;
}

TEST(OnnxMalformed, ValuesAssignedTwiceOrNeverDefined) {
  auto m = reluModel();
  addNode(m.mutable_graph(), "Neg", {"nowhere"}, {"z"});
  std::string msg = errorOf([&] { loadModelBytes(serialize(m)); });
  EXPECT_FALSE(msg.empty());
}

}  // namespace
}  // namespace graft::onnxio
