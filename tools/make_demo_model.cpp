// Writes the demo MLP (tools/demo_model.hpp) as an ONNX file; run by the build.
#include <graft/error.hpp>

#include <filesystem>
#include <iostream>

#include "demo_model.hpp"
#include "onnx/model_io.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_demo_model OUT.onnx\n";
    return 2;
  }
  try {
    std::filesystem::path out(argv[1]);
    if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
    auto g = graft::tools::buildDemoMlp();
    graft::onnxio::ModelInfo info;
    info.docString = "graft demo: a 784-128-10 MLP classifier with fixed pseudo-random weights";
    graft::onnxio::saveModelFile(*g, out.string(), info);
  } catch (const std::exception& e) {
    std::cerr << "make_demo_model: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
