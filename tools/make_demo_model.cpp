// Writes the demo models into a folder; run by the build:
//   mlp.onnx          a 784-128-10 MLP with fixed pseudo-random weights (graft run's example)
//   fashion_cnn.onnx  the Fashion-MNIST CNN `make demo` trains (tools/demo_model.hpp)
//   fashion_mlp.onnx  a Fashion-MNIST MLP (Gemm layers only)
#include <graft/error.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "demo_model.hpp"
#include "onnx/model_io.hpp"

namespace {

void writeBytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw graft::Error("cannot write " + path.string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_demo_model OUT_DIR\n";
    return 2;
  }
  try {
    std::filesystem::path dir(argv[1]);
    std::filesystem::create_directories(dir);
    auto g = graft::tools::buildDemoMlp();
    graft::onnxio::ModelInfo info;
    info.docString = "graft demo: a 784-128-10 MLP classifier with fixed pseudo-random weights";
    graft::onnxio::saveModelFile(*g, (dir / "mlp.onnx").string(), info);
    using graft::tools::FashionModelKind;
    writeBytes(dir / "fashion_cnn.onnx", graft::tools::buildFashionModel(FashionModelKind::Cnn));
    writeBytes(dir / "fashion_mlp.onnx", graft::tools::buildFashionModel(FashionModelKind::Mlp));
  } catch (const std::exception& e) {
    std::cerr << "make_demo_model: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
