#pragma once
// Helpers shared by the unit tests: ONNX models built with the protobuf API, temporary folders,
// error messages.
#include <onnx/onnx_pb.h>

#include <graft/error.hpp>
#include <graft/ndarray.hpp>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <variant>
#include <vector>

namespace graft::testing {

/// n floats drawn uniformly from [lo, hi) by std::mt19937 seeded with `seed` (the same values on
/// every platform for a seed, so the tests' expected numbers stay put).
inline std::vector<float> randomVec(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}
/// n floats drawn uniformly from [-scale, scale).
inline std::vector<float> randomVec(size_t n, uint64_t seed, float scale = 1.0f) {
  return randomVec(n, seed, -scale, scale);
}

/// A float tensor of shape `s` holding `v`.
inline NDArray fromVec(const std::vector<float>& v, Shape s) {
  NDArray a(DataType::Float, std::move(s));
  std::copy(v.begin(), v.end(), a.data<float>());
  return a;
}

using ProtoDim = std::variant<int64_t, std::string>;

inline ::onnx::ModelProto makeModel(int64_t opset = 17) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("graft-tests");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

inline void setType(::onnx::ValueInfoProto* v, const std::string& name, int elemType, const std::vector<ProtoDim>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elemType);
  auto* shape = tt->mutable_shape();
  for (const auto& d : dims) {
    auto* pd = shape->add_dim();
    if (std::holds_alternative<int64_t>(d)) pd->set_dim_value(std::get<int64_t>(d));
    else pd->set_dim_param(std::get<std::string>(d));
  }
}

inline void addInput(::onnx::ModelProto& m, const std::string& name, const std::vector<ProtoDim>& dims,
                     int elemType = ::onnx::TensorProto::FLOAT) {
  setType(m.mutable_graph()->add_input(), name, elemType, dims);
}

inline void addOutput(::onnx::ModelProto& m, const std::string& name, const std::vector<ProtoDim>& dims,
                      int elemType = ::onnx::TensorProto::FLOAT) {
  setType(m.mutable_graph()->add_output(), name, elemType, dims);
}

inline ::onnx::NodeProto* addNode(::onnx::GraphProto* g, const std::string& type, const std::vector<std::string>& ins,
                                  const std::vector<std::string>& outs, const std::string& domain = "") {
  auto* n = g->add_node();
  n->set_op_type(type);
  if (!domain.empty()) n->set_domain(domain);
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  return n;
}

inline ::onnx::TensorProto* addFloatInitializer(::onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims,
                                                const std::vector<float>& values) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
  return t;
}

inline std::string serialize(const ::onnx::ModelProto& m) {
  std::string s;
  m.SerializeToString(&s);
  return s;
}

/// The message of the graft::Error `f` throws ("" when it throws nothing).
inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

/// A fresh, empty temporary folder, removed when the object goes.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "graft-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : throw Error("mkdtemp failed");
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace graft::testing
