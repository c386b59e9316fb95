#include "onnx/proto_convert.hpp"

#include <cstring>
#include <vector>

#include "support/check.hpp"
#include "support/float16.hpp"

namespace graft::onnxio {
namespace {

bool isSupportedDtype(int32_t code) {
  return code >= 1 && code <= 26 && code != 14 && code != 15;  // no complex types
}

// Bits per element of the types ONNX files pack several to a byte (4: two to a byte; 2: four),
// one per byte in an NDArray; 0 for the others.
int packedBits(DataType dt) {
  if (dt == DataType::Int4 || dt == DataType::UInt4 || dt == DataType::Float4E2M1) return 4;
  if (dt == DataType::Int2 || dt == DataType::UInt2) return 2;
  return 0;
}

template <class Src, class Dst>
void copyConvert(const Src& src, Dst* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(src[static_cast<int>(i)]);
}

}  // namespace

NDArray tensorFromProto(const ::onnx::TensorProto& t, const std::string& what) {
  GRAFT_CHECK(isSupportedDtype(t.data_type()), "{} has unsupported data type {}", what,
              t.data_type() == 14 || t.data_type() == 15 ? std::string("COMPLEX") : std::to_string(t.data_type()));
  GRAFT_CHECK(t.data_location() != ::onnx::TensorProto::EXTERNAL || t.has_raw_data(),
              "{} stores its data externally and it was not loaded", what);
  auto dtype = static_cast<DataType>(t.data_type());
  Shape shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape) GRAFT_CHECK(d >= 0, "{} has a negative dimension in shape {}", what, shapeToString(shape));
  int64_t n;
  try {
    n = shapeNumel(shape);
  } catch (const Error& e) {
    GRAFT_THROW("{}: {}", what, e.what());
  }
  auto mismatch = [&](int64_t have) {
    GRAFT_THROW("{} has {} values but its shape {} needs {}", what, have, shapeToString(shape), n);
  };
  if (dtype == DataType::String) {
    GRAFT_CHECK(t.string_data_size() == n, "{} has {} strings but its shape {} needs {}", what, t.string_data_size(),
                shapeToString(shape), n);
    NDArray a(dtype, shape);
    for (int64_t i = 0; i < n; ++i) a.data<std::string>()[i] = t.string_data(static_cast<int>(i));
    return a;
  }
  size_t esize = dtypeSize(dtype);
  if (int bits = packedBits(dtype)) {
    // 8/bits elements per byte, the first in the lowest bits; int32_data holds one byte per entry.
    uint64_t perByte = 8 / static_cast<uint64_t>(bits);
    uint64_t bytes = (static_cast<uint64_t>(n) + perByte - 1) / perByte;
    std::vector<uint8_t> packed;
    if (t.has_raw_data()) {
      if (t.raw_data().size() != bytes)
        GRAFT_THROW("{} has {} bytes of data but its shape {} of {} needs {}", what, t.raw_data().size(),
                    shapeToString(shape), dtypeName(dtype), bytes);
      packed.assign(t.raw_data().begin(), t.raw_data().end());
    } else {
      if (static_cast<uint64_t>(t.int32_data_size()) != bytes)
        mismatch(static_cast<int64_t>(perByte) * static_cast<int64_t>(t.int32_data_size()));
      for (int32_t v : t.int32_data()) packed.push_back(static_cast<uint8_t>(v));
    }
    NDArray a(dtype, shape);
    auto* dst = static_cast<uint8_t*>(a.rawData());
    auto mask = static_cast<uint8_t>((1u << bits) - 1), sign = static_cast<uint8_t>(1u << (bits - 1));
    bool isSigned = dtype == DataType::Int4 || dtype == DataType::Int2;
    for (int64_t i = 0; i < n; ++i) {
      auto u = static_cast<uint64_t>(i);
      uint8_t v = (packed[u / perByte] >> (bits * static_cast<int>(u % perByte))) & mask;
      dst[i] = isSigned && (v & sign) ? static_cast<uint8_t>(v | ~mask) : v;  // INT4/INT2 sign-extend
    }
    return a;
  }
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    if (static_cast<uint64_t>(raw.size()) != static_cast<uint64_t>(n) * esize)
      GRAFT_THROW("{} has {} bytes of data but its shape {} of {} needs {}", what, raw.size(), shapeToString(shape),
                  dtypeName(dtype), static_cast<uint64_t>(n) * esize);
    NDArray a(dtype, shape);
    if (n) std::memcpy(a.rawData(), raw.data(), raw.size());
    return a;
  }
  NDArray a(dtype, shape);
  switch (dtype) {
    case DataType::Float:
      if (t.float_data_size() != n) mismatch(t.float_data_size());
      copyConvert(t.float_data(), a.data<float>(), n);
      break;
    case DataType::Double:
      if (t.double_data_size() != n) mismatch(t.double_data_size());
      copyConvert(t.double_data(), a.data<double>(), n);
      break;
    case DataType::Int64:
      if (t.int64_data_size() != n) mismatch(t.int64_data_size());
      copyConvert(t.int64_data(), a.data<int64_t>(), n);
      break;
    case DataType::UInt32:
      if (t.uint64_data_size() != n) mismatch(t.uint64_data_size());
      copyConvert(t.uint64_data(), a.data<uint32_t>(), n);
      break;
    case DataType::UInt64:
      if (t.uint64_data_size() != n) mismatch(t.uint64_data_size());
      copyConvert(t.uint64_data(), a.data<uint64_t>(), n);
      break;
    case DataType::Int32:
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      copyConvert(t.int32_data(), a.data<int32_t>(), n);
      break;
    case DataType::Int16:
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      copyConvert(t.int32_data(), a.data<int16_t>(), n);
      break;
    case DataType::UInt16:
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      copyConvert(t.int32_data(), a.data<uint16_t>(), n);
      break;
    case DataType::Int8:
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      copyConvert(t.int32_data(), a.data<int8_t>(), n);
      break;
    case DataType::UInt8:
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      copyConvert(t.int32_data(), a.data<uint8_t>(), n);
      break;
    case DataType::Bool:
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      for (int64_t i = 0; i < n; ++i) a.data<uint8_t>()[i] = t.int32_data(static_cast<int>(i)) != 0;
      break;
    case DataType::Float8E4M3FN:
    case DataType::Float8E4M3FNUZ:
    case DataType::Float8E5M2:
    case DataType::Float8E5M2FNUZ:
    case DataType::Float8E8M0:  // one bit pattern per int32_data entry
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      copyConvert(t.int32_data(), a.data<uint8_t>(), n);
      break;
    case DataType::Float16:
    case DataType::BFloat16:  // stored as their bit patterns in int32_data
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      copyConvert(t.int32_data(), a.data<uint16_t>(), n);
      break;
    default:
      GRAFT_THROW("{} has unsupported data type {}", what, dtypeName(dtype));
  }
  return a;
}

void tensorToProto(const NDArray& a, const std::string& name, ::onnx::TensorProto* out) {
  out->Clear();
  out->set_name(name);
  out->set_data_type(static_cast<int32_t>(a.dtype()));
  for (int64_t d : a.shape()) out->add_dims(d);
  if (a.dtype() == DataType::String) {
    for (int64_t i = 0; i < a.numel(); ++i) out->add_string_data(a.data<std::string>()[i]);
  } else if (int bits = packedBits(a.dtype())) {
    int64_t perByte = 8 / bits;
    std::string packed(static_cast<size_t>((a.numel() + perByte - 1) / perByte), '\0');
    const auto* src = static_cast<const uint8_t*>(a.rawData());
    unsigned mask = (1u << bits) - 1;
    for (int64_t i = 0; i < a.numel(); ++i)
      packed[static_cast<size_t>(i / perByte)] |= static_cast<char>((src[i] & mask) << (bits * (i % perByte)));
    out->set_raw_data(packed);
  } else {
    out->set_raw_data(std::string(static_cast<const char*>(a.rawData()), a.nbytes()));
  }
}

NDArray sparseTensorFromProto(const ::onnx::SparseTensorProto& t, const std::string& what) {
  Shape shape(t.dims().begin(), t.dims().end());
  NDArray values = tensorFromProto(t.values(), what + " (values)");
  NDArray indices = tensorFromProto(t.indices(), what + " (indices)");
  GRAFT_CHECK(indices.dtype() == DataType::Int64, "{}: sparse indices must be INT64", what);
  NDArray dense(values.dtype(), shape);
  int64_t nnz = values.numel();
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t total = shapeNumel(shape);
  size_t es = dtypeSize(values.dtype());
  GRAFT_CHECK(values.dtype() != DataType::String, "{}: sparse string tensors are not supported", what);
  const int64_t* idx = indices.data<int64_t>();
  bool linear = indices.rank() == 1;
  GRAFT_CHECK(
      linear ? indices.numel() == nnz : (indices.rank() == 2 && indices.dim(0) == nnz && indices.dim(1) == rank),
      "{}: sparse indices have shape {}, expected [{}] or [{}, {}]", what, shapeToString(indices.shape()), nnz, nnz,
      rank);
  for (int64_t i = 0; i < nnz; ++i) {
    int64_t off = 0;
    if (linear) {
      off = idx[i];
    } else {
      for (int64_t d = 0; d < rank; ++d) {
        int64_t v = idx[i * rank + d];
        GRAFT_CHECK(v >= 0 && v < shape[d], "{}: sparse index {} out of range for dimension {}", what, v, d);
        off = off * shape[d] + v;
      }
    }
    GRAFT_CHECK(off >= 0 && off < total, "{}: sparse index {} out of range", what, off);
    std::memcpy(static_cast<char*>(dense.rawData()) + off * es, static_cast<const char*>(values.rawData()) + i * es,
                es);
  }
  return dense;
}

TensorInfo tensorInfoFromTypeProto(const ::onnx::TypeProto_Tensor& t) {
  auto dtype = static_cast<DataType>(t.elem_type());
  if (!t.has_shape()) return TensorInfo::unranked(dtype);
  std::vector<Dim> dims;
  for (const auto& d : t.shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0)
      dims.emplace_back(d.dim_value());
    else if (d.has_dim_param())
      dims.emplace_back(Dim(d.dim_param()));
    else
      dims.emplace_back();
  }
  return TensorInfo(dtype, std::move(dims));
}

ir::ValueType typeFromProto(const ::onnx::TypeProto& t, const std::string& what) {
  using VT = ir::ValueType;
  switch (t.value_case()) {
    case ::onnx::TypeProto::kTensorType:
      return VT::tensor(tensorInfoFromTypeProto(t.tensor_type()));
    case ::onnx::TypeProto::kSparseTensorType: {
      ::onnx::TypeProto_Tensor tt;
      tt.set_elem_type(t.sparse_tensor_type().elem_type());
      *tt.mutable_shape() = t.sparse_tensor_type().shape();
      return VT::tensor(tensorInfoFromTypeProto(tt));
    }
    case ::onnx::TypeProto::kSequenceType: {
      const auto& e = t.sequence_type().elem_type();
      GRAFT_CHECK(
          e.value_case() == ::onnx::TypeProto::kTensorType || e.value_case() == ::onnx::TypeProto::VALUE_NOT_SET,
          "{}: only sequences of tensors are supported", what);
      return VT::sequence(e.has_tensor_type() ? tensorInfoFromTypeProto(e.tensor_type()) : TensorInfo{});
    }
    case ::onnx::TypeProto::kOptionalType: {
      const auto& e = t.optional_type().elem_type();
      if (e.has_tensor_type()) return VT::optional(ir::ValueKind::Tensor, tensorInfoFromTypeProto(e.tensor_type()));
      if (e.has_sequence_type()) {
        const auto& se = e.sequence_type().elem_type();
        return VT::optional(ir::ValueKind::Sequence,
                            se.has_tensor_type() ? tensorInfoFromTypeProto(se.tensor_type()) : TensorInfo{});
      }
      // An optional whose element type is not known yet (still an optional).
      if (e.value_case() == ::onnx::TypeProto::VALUE_NOT_SET) return VT::optional(ir::ValueKind::Tensor, TensorInfo{});
      GRAFT_THROW("{}: optional of this type is not supported (only optionals of tensors and of sequences of tensors)",
                  what);
    }
    case ::onnx::TypeProto::VALUE_NOT_SET:
      return VT::tensor(TensorInfo{});
    default:
      GRAFT_THROW("{}: map types are not supported (only tensors, sequences of tensors and optionals)", what);
  }
}

namespace {
void tensorTypeToProto(const TensorInfo& info, ::onnx::TypeProto_Tensor* out) {
  out->set_elem_type(static_cast<int32_t>(info.dataType()));
  if (!info.hasShape()) return;
  auto* shape = out->mutable_shape();
  for (const Dim& d : info.dims()) {
    auto* pd = shape->add_dim();
    if (d.known())
      pd->set_dim_value(d.value);
    else if (!d.param.empty())
      pd->set_dim_param(d.param);
  }
}
}  // namespace

void typeToProto(const ir::ValueType& t, ::onnx::TypeProto* out) {
  out->Clear();
  if (!t.known() && t.kind == ir::ValueKind::Tensor) return;
  switch (t.kind) {
    case ir::ValueKind::Tensor:
      tensorTypeToProto(t.info, out->mutable_tensor_type());
      break;
    // A sequence or optional whose element type is unknown keeps its kind, with the element type
    // left unset (an element type of UNDEFINED would make ONNX's inference reject it).
    case ir::ValueKind::Sequence: {
      auto* e = out->mutable_sequence_type()->mutable_elem_type();
      if (t.known()) tensorTypeToProto(t.info, e->mutable_tensor_type());
      break;
    }
    case ir::ValueKind::Optional: {
      auto* e = out->mutable_optional_type()->mutable_elem_type();
      if (t.optionalOf == ir::ValueKind::Sequence) {
        auto* se = e->mutable_sequence_type()->mutable_elem_type();
        if (t.known()) tensorTypeToProto(t.info, se->mutable_tensor_type());
      } else if (t.known()) {
        tensorTypeToProto(t.info, e->mutable_tensor_type());
      }
      break;
    }
  }
}

ir::AttrValue attributeFromProto(const ::onnx::AttributeProto& a, const std::string& what,
                                 const std::function<ir::GraphPtr(const ::onnx::GraphProto&)>& importGraph) {
  using AP = ::onnx::AttributeProto;
  std::string where = what + ", attribute '" + a.name() + "'";
  switch (a.type()) {
    case AP::FLOAT:
      return a.f();
    case AP::INT:
      return static_cast<int64_t>(a.i());
    case AP::STRING:
      return a.s();
    case AP::TENSOR:
      return tensorFromProto(a.t(), where);
    case AP::SPARSE_TENSOR:
      return sparseTensorFromProto(a.sparse_tensor(), where);
    case AP::GRAPH:
      return importGraph(a.g());
    case AP::TYPE_PROTO:
      return typeFromProto(a.tp(), where);
    case AP::FLOATS:
      return std::vector<float>(a.floats().begin(), a.floats().end());
    case AP::INTS:
      return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case AP::STRINGS:
      return std::vector<std::string>(a.strings().begin(), a.strings().end());
    case AP::TENSORS: {
      std::vector<NDArray> v;
      for (const auto& t : a.tensors()) v.push_back(tensorFromProto(t, where));
      return v;
    }
    case AP::GRAPHS: {
      std::vector<ir::GraphPtr> v;
      for (const auto& g : a.graphs()) v.push_back(importGraph(g));
      return v;
    }
    case AP::UNDEFINED: {
      // Old exporters leave the type out; infer it from which field is set.
      if (a.has_f()) return a.f();
      if (a.has_i()) return static_cast<int64_t>(a.i());
      if (a.has_s()) return a.s();
      if (a.has_t()) return tensorFromProto(a.t(), where);
      if (a.has_g()) return importGraph(a.g());
      if (a.floats_size()) return std::vector<float>(a.floats().begin(), a.floats().end());
      if (a.ints_size()) return std::vector<int64_t>(a.ints().begin(), a.ints().end());
      if (a.strings_size()) return std::vector<std::string>(a.strings().begin(), a.strings().end());
      GRAFT_THROW("{} has no type and no value", where);
    }
    default:
      GRAFT_THROW("{} has an unsupported attribute type {}", where, static_cast<int>(a.type()));
  }
}

void attributeToProto(const std::string& name, const ir::AttrValue& v, ::onnx::AttributeProto* out,
                      const std::function<void(const ir::Graph&, ::onnx::GraphProto*)>& exportGraph) {
  using AP = ::onnx::AttributeProto;
  out->Clear();
  out->set_name(name);
  struct Visitor {
    AP* out;
    const std::function<void(const ir::Graph&, ::onnx::GraphProto*)>& exportGraph;
    void operator()(int64_t x) { out->set_type(AP::INT), out->set_i(x); }
    void operator()(float x) { out->set_type(AP::FLOAT), out->set_f(x); }
    void operator()(const std::string& s) { out->set_type(AP::STRING), out->set_s(s); }
    void operator()(const NDArray& a) { out->set_type(AP::TENSOR), tensorToProto(a, "", out->mutable_t()); }
    void operator()(const ir::GraphPtr& g) { out->set_type(AP::GRAPH), exportGraph(*g, out->mutable_g()); }
    void operator()(const ir::ValueType& t) { out->set_type(AP::TYPE_PROTO), typeToProto(t, out->mutable_tp()); }
    void operator()(const std::vector<int64_t>& x) {
      out->set_type(AP::INTS);
      for (auto i : x) out->add_ints(i);
    }
    void operator()(const std::vector<float>& x) {
      out->set_type(AP::FLOATS);
      for (auto f : x) out->add_floats(f);
    }
    void operator()(const std::vector<std::string>& x) {
      out->set_type(AP::STRINGS);
      for (const auto& s : x) out->add_strings(s);
    }
    void operator()(const std::vector<NDArray>& x) {
      out->set_type(AP::TENSORS);
      for (const auto& a : x) tensorToProto(a, "", out->add_tensors());
    }
    void operator()(const std::vector<ir::GraphPtr>& x) {
      out->set_type(AP::GRAPHS);
      for (const auto& g : x) exportGraph(*g, out->add_graphs());
    }
  };
  std::visit(Visitor{out, exportGraph}, v);
}

}  // namespace graft::onnxio
