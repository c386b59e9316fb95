// Bindings of the Builder (as _BuilderCore; graft/builder.py wraps it with PopART's Python API)
// and of the op signatures the opset objects are generated from.
#include <graft/builder.hpp>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "numpy_util.hpp"
#include "support/check.hpp"

namespace graft::py {
namespace {

// numpy scalars (np.int64(3), np.float32(1.5), np.bool_(True)) become Python scalars.
pyb::object plainScalar(pyb::handle v) {
  if (!pyb::isinstance<pyb::array>(v) && pyb::hasattr(v, "dtype") && pyb::hasattr(v, "item")) return v.attr("item")();
  return pyb::reinterpret_borrow<pyb::object>(v);
}

AttributeValue attributeFrom(pyb::handle raw, const std::string& what) {
  pyb::object v = plainScalar(raw);
  if (pyb::isinstance<pyb::bool_>(v)) return int64_t{v.cast<bool>() ? 1 : 0};
  if (pyb::isinstance<pyb::int_>(v)) return v.cast<int64_t>();
  if (pyb::isinstance<pyb::float_>(v)) return v.cast<float>();
  if (pyb::isinstance<pyb::str>(v)) return v.cast<std::string>();
  if (pyb::isinstance<pyb::bytes>(v)) return v.cast<std::string>();
  if (pyb::isinstance<pyb::array>(v)) return copyOf(v, what);
  if (pyb::isinstance<pyb::list>(v) || pyb::isinstance<pyb::tuple>(v)) {
    std::vector<pyb::object> items;
    for (pyb::handle h : v) items.push_back(plainScalar(h));
    bool allInt = true, allNum = true, allStr = true;
    for (const auto& it : items) {
      bool isInt = pyb::isinstance<pyb::int_>(it);  // bool is an int too
      bool isNum = isInt || pyb::isinstance<pyb::float_>(it);
      allInt &= isInt;
      allNum &= isNum;
      allStr &= pyb::isinstance<pyb::str>(it);
    }
    if (allInt) {
      std::vector<int64_t> out;
      for (const auto& it : items) out.push_back(it.cast<int64_t>());
      return out;
    }
    if (allNum) {
      std::vector<float> out;
      for (const auto& it : items) out.push_back(it.cast<float>());
      return out;
    }
    if (allStr) {
      std::vector<std::string> out;
      for (const auto& it : items) out.push_back(it.cast<std::string>());
      return out;
    }
    GRAFT_THROW("{}: a list attribute must hold only integers, only numbers or only strings, got {}", what,
                pyb::repr(v).cast<std::string>());
  }
  GRAFT_THROW("{}: values of type {} cannot be attributes (expected int, float, str, a list of those, or a numpy "
              "array)", what, pyb::str(pyb::type::handle_of(v).attr("__name__")).cast<std::string>());
}

pyb::object attributeTo(const AttributeValue& v) {
  return std::visit(
      [](const auto& x) -> pyb::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, NDArray>) return toNumpy(x);
        else return pyb::cast(x);
      },
      v);
}

AttributeMap attributesFrom(const pyb::dict& d, const std::string& opType) {
  AttributeMap out;
  for (auto [k, v] : d) {
    std::string name = pyb::str(k).cast<std::string>();
    out[name] = attributeFrom(v, fmt::format("{} op: attribute '{}'", opType, name));
  }
  return out;
}

std::set<TensorId> idSet(pyb::handle ids) {
  if (pyb::isinstance<pyb::str>(ids)) return {ids.cast<std::string>()};
  std::set<TensorId> out;
  for (pyb::handle h : ids) out.insert(h.cast<std::string>());
  return out;
}

}  // namespace

void bindBuilder(pyb::module_& m) {
  pyb::enum_<AttributeKind>(m, "AttributeKind")
      .value("Int", AttributeKind::Int)
      .value("Float", AttributeKind::Float)
      .value("String", AttributeKind::String)
      .value("Ints", AttributeKind::Ints)
      .value("Floats", AttributeKind::Floats)
      .value("Strings", AttributeKind::Strings)
      .value("Tensor", AttributeKind::Tensor)
      .value("Graph", AttributeKind::Graph)
      .value("Other", AttributeKind::Other);

  pyb::class_<OpAttributeSignature>(m, "OpAttributeSignature")
      .def_readonly("name", &OpAttributeSignature::name)
      .def_readonly("kind", &OpAttributeSignature::kind)
      .def_readonly("required", &OpAttributeSignature::required)
      .def_property_readonly("hasDefault", [](const OpAttributeSignature& a) { return a.defaultValue.has_value(); })
      .def_property_readonly("defaultValue", [](const OpAttributeSignature& a) -> pyb::object {
        return a.defaultValue ? attributeTo(*a.defaultValue) : pyb::none();
      });

  pyb::class_<OpSignature>(m, "OpSignature")
      .def_readonly("domain", &OpSignature::domain)
      .def_readonly("type", &OpSignature::type)
      .def_readonly("sinceVersion", &OpSignature::sinceVersion)
      .def_readonly("numFormalInputs", &OpSignature::numFormalInputs)
      .def_readonly("minInputs", &OpSignature::minInputs)
      .def_readonly("maxInputs", &OpSignature::maxInputs)
      .def_readonly("minOutputs", &OpSignature::minOutputs)
      .def_readonly("maxOutputs", &OpSignature::maxOutputs)
      .def_readonly("attributes", &OpSignature::attributes)
      .def_readonly("doc", &OpSignature::doc)
      .def("__repr__", [](const OpSignature& s) {
        return fmt::format("OpSignature({}{}{}-{})", s.domain.empty() ? "" : s.domain + ".", s.type, "", s.sinceVersion);
      });

  m.def("builderOpSignatures", &builderOpSignatures, pyb::arg("domain"), pyb::arg("opsetVersion"),
        "The ops the Builder offers in a domain at an opset version (every op graft's registry knows).");
  m.attr("newestAiOnnxOpset") = newestAiOnnxOpset();
  m.def("findOpSignature", &findOpSignature, pyb::arg("domain"), pyb::arg("opType"), pyb::arg("opsetVersion"));

  pyb::class_<Builder>(m, "_BuilderCore")
      .def(pyb::init<>())
      .def(pyb::init([](const std::string& model) { return Builder::createFromOnnxModel(model); }),
           pyb::arg("modelProtoOrFilename"))
      .def("addInputTensor", pyb::overload_cast<const TensorInfo&, const std::string&>(&Builder::addInputTensor),
           pyb::arg("tensorInfo"), pyb::arg("debugName") = "")
      .def("addInitializedInputTensor",
           [](Builder& b, pyb::object value, const std::string& name) {
             return b.addInitializedInputTensor(copyOf(value, "addInitializedInputTensor('" + name + "')"), name);
           },
           pyb::arg("initVal"), pyb::arg("debugName") = "")
      .def("addOutputTensor", &Builder::addOutputTensor, pyb::arg("outputName"))
      .def("addOp",
           [](Builder& b, const std::string& type, const std::string& domain, int version,
              const std::vector<TensorId>& inputs, const pyb::dict& attrs, int numOutputs, const std::string& name) {
             return b.addOp(type, domain, version, inputs, attributesFrom(attrs, type), numOutputs, name);
           },
           pyb::arg("opType"), pyb::arg("domain"), pyb::arg("opsetVersion"), pyb::arg("inputs"),
           pyb::arg("attributes") = pyb::dict(), pyb::arg("numOutputs") = -1, pyb::arg("debugName") = "")
      .def("getModelProto", [](const Builder& b) { return pyb::bytes(b.getModelProto()); })
      .def("saveModelProto", &Builder::saveModelProto, pyb::arg("filename"))
      .def("setGraphName", &Builder::setGraphName, pyb::arg("name"))
      .def("getInputTensorIds", &Builder::getInputTensorIds)
      .def("getOutputTensorIds", &Builder::getOutputTensorIds)
      .def("getValueTensorIds", &Builder::getValueTensorIds)
      .def("getTrainableTensorIds", &Builder::getTrainableTensorIds)
      .def("hasTensor", &Builder::hasTensor, pyb::arg("id"))
      .def("isInitializer", &Builder::isInitializer, pyb::arg("id"))
      .def("getTensorInfo", &Builder::getTensorInfo, pyb::arg("id"))
      .def("getTensorShape", &Builder::getTensorShape, pyb::arg("id"))
      .def("getTensorDtypeString", &Builder::getTensorDtypeString, pyb::arg("id"))
      .def("onnxOpsetVersion", &Builder::onnxOpsetVersion)
      .def("_virtualGraph", &Builder::virtualGraph)
      .def("_pipelineStage", &Builder::pipelineStage)
      .def("_recomputeOutputInBackwardPass", &Builder::recomputeOutputInBackwardPass)
      .def("_getVirtualGraph", &Builder::getVirtualGraph)
      .def("_getPipelineStage", &Builder::getPipelineStage)
      .def("_getRecomputeOutputInBackwardPass", &Builder::getRecomputeOutputInBackwardPass)
      .def("pushAttributeScope", &Builder::pushAttributeScope)
      .def("popAttributeScope", &Builder::popAttributeScope)
      .def("currentAttributeScope", &Builder::currentAttributeScope)
      .def("pushNameScope", &Builder::pushNameScope)
      .def("popNameScope", &Builder::popNameScope)
      .def("getNameScope", &Builder::getNameScope, pyb::arg("name") = "")
      .def("addNodeAttribute",
           [](Builder& b, const std::string& name, pyb::object value, pyb::object outs) {
             b.addNodeAttribute(name, attributeFrom(value, "addNodeAttribute('" + name + "')"), idSet(outs));
           },
           pyb::arg("attributeName"), pyb::arg("attributeValue"), pyb::arg("nodeOutputNames"))
      .def("nodeHasAttribute",
           [](const Builder& b, const std::string& name, pyb::object outs) { return b.nodeHasAttribute(name, idSet(outs)); },
           pyb::arg("attributeName"), pyb::arg("nodeOutputNames"))
      .def("getNodeAttribute",
           [](const Builder& b, const std::string& name, pyb::object outs) {
             return attributeTo(b.getNodeAttribute(name, idSet(outs)));
           },
           pyb::arg("attributeName"), pyb::arg("nodeOutputNames"))
      .def("removeNodeAttribute",
           [](Builder& b, const std::string& name, pyb::object outs) { b.removeNodeAttribute(name, idSet(outs)); },
           pyb::arg("attributeName"), pyb::arg("nodeOutputNames"))
      .def("getAllNodeAttributeNames",
           [](const Builder& b, pyb::object outs) { return b.getAllNodeAttributeNames(idSet(outs)); },
           pyb::arg("nodeOutputNames"));
}

}  // namespace graft::py
