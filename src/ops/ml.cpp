// ai.onnx.ml ops that the ONNX node conformance cases use and that are cheap to have: Binarizer,
// ArrayFeatureExtractor and LabelEncoder (opset 4: keys and values as lists or as tensors).
// Their outputs are not differentiable (ONNX marks none of them so), so they have no VJP.
#include <cmath>
#include <cstring>
#include <map>

#include "ops/dtype_dispatch.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

constexpr const char* kMlDomain = "ai.onnx.ml";

// Binarizer: 1 where x > threshold, else 0 (NaN gives 0), in x's type.
KernelFn binarizerKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  double threshold = n.attrFloat("threshold", 0.0f);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    dispatch<kNumeric>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      T* yp = k.allocOutputUninit(0, x.dtype(), x.shape()).data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        bool on = static_cast<double>(static_cast<ComputeType<T>>(xp[i])) > threshold;
        yp[i] = static_cast<T>(static_cast<ComputeType<T>>(on ? 1 : 0));
      }
    });
  };
}

// ArrayFeatureExtractor(X, Y): the elements of X's last axis that Y indexes (Y flattened), as
// X[..., Y]. A 1-D X gives [1, len(Y)] (as onnxruntime and ONNX's reference).
KernelFn arrayFeatureExtractorKernel(CompileContext& c) {
  std::string what = c.node().describe();
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    const NDArray& idx = k.input(1);
    GRAFT_CHECK(x.rank() >= 1, "{}: X must have rank >= 1, got a scalar", what);
    GRAFT_CHECK(idx.dtype() == DataType::Int64, "{}: Y (the indices) must be INT64, got {}", what,
                dtypeName(idx.dtype()));
    int64_t last = x.dim(x.rank() - 1), rows = shapeProduct(x.shape(), 0, x.rank() - 1), m = idx.numel();
    const int64_t* ip = idx.data<int64_t>();
    for (int64_t j = 0; j < m; ++j)
      GRAFT_CHECK(ip[j] >= 0 && ip[j] < last, "{}: index {} is out of range for the last axis of X (size {})", what,
                  ip[j], last);
    Shape ys = x.rank() == 1 ? Shape{1, m} : Shape(x.shape().begin(), x.shape().end() - 1);
    if (x.rank() > 1) ys.push_back(m);
    dispatch<kAll>(x.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      T* yp = k.allocOutput(0, x.dtype(), ys).data<T>();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < m; ++j) yp[r * m + j] = xp[r * last + ip[j]];
    });
  };
}

// ---- LabelEncoder -------------------------------------------------------------------------------

/// A key of any kind, ordered: strings by value, integers exactly, floats with every NaN equal
/// (the specification maps NaN keys to NaN inputs).
struct Key {
  int kind = 0;  // 0 string, 1 integer, 2 float
  std::string s;
  int64_t i = 0;
  double f = 0;
  bool operator<(const Key& o) const {
    if (kind != o.kind) return kind < o.kind;
    if (kind == 0) return s < o.s;
    if (kind == 1) return i < o.i;
    bool an = std::isnan(f), bn = std::isnan(o.f);
    if (an || bn) return !an && bn;
    return f < o.f;
  }
};

/// Element j of `a` as a key: strings, integer types exactly, floating types as doubles.
Key keyOf(const NDArray& a, int64_t j, const std::string& what) {
  Key key;
  if (a.dtype() == DataType::String) {
    key.s = a.data<std::string>()[j];
    return key;
  }
  dispatch<kNumeric>(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      key.kind = 2;
      key.f = static_cast<double>(static_cast<ComputeType<T>>(a.data<T>()[j]));
    } else {
      key.kind = 1;
      key.i = static_cast<int64_t>(a.data<T>()[j]);
    }
  });
  return key;
}

NDArray stringsArray(const std::vector<std::string>& v) {
  NDArray a(DataType::String, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) a.data<std::string>()[i] = v[i];
  return a;
}
NDArray int64sArray(const std::vector<int64_t>& v) {
  NDArray a(DataType::Int64, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(a.rawData(), v.data(), v.size() * sizeof(int64_t));
  return a;
}
NDArray floatsArray(const std::vector<float>& v) {
  NDArray a(DataType::Float, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(a.rawData(), v.data(), v.size() * sizeof(float));
  return a;
}

KernelFn labelEncoderKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  const ir::Attributes& at = n.attrs();
  // Exactly one form of keys and one of values; the default matches the values' form.
  NDArray keys, values, def;
  int keyForms = 0, valueForms = 0;
  if (at.has("keys_strings")) keys = stringsArray(n.attrStrings("keys_strings")), ++keyForms;
  if (at.has("keys_int64s")) keys = int64sArray(n.attrInts("keys_int64s")), ++keyForms;
  if (at.has("keys_floats")) keys = floatsArray(n.attrFloats("keys_floats")), ++keyForms;
  if (at.has("keys_tensor")) keys = n.attrTensor("keys_tensor"), ++keyForms;
  if (at.has("values_strings")) {
    values = stringsArray(n.attrStrings("values_strings"));
    def = stringsArray({n.attrString("default_string", "_Unused")});
    ++valueForms;
  }
  if (at.has("values_int64s")) {
    values = int64sArray(n.attrInts("values_int64s"));
    def = int64sArray({n.attrInt("default_int64", -1)});
    ++valueForms;
  }
  if (at.has("values_floats")) {
    values = floatsArray(n.attrFloats("values_floats"));
    def = floatsArray({n.attrFloat("default_float", -0.0f)});
    ++valueForms;
  }
  if (at.has("values_tensor")) {
    values = n.attrTensor("values_tensor");
    ++valueForms;
    GRAFT_CHECK(at.has("default_tensor"), "{}: values_tensor needs default_tensor (the value for unknown keys)", what);
    def = n.attrTensor("default_tensor");
    GRAFT_CHECK(def.numel() == 1 && def.dtype() == values.dtype(),
                "{}: default_tensor must hold one {} value, got {} of shape {}", what, dtypeName(values.dtype()),
                dtypeName(def.dtype()), shapeToString(def.shape()));
  }
  GRAFT_CHECK(keyForms == 1,
              "{}: exactly one of keys_strings, keys_int64s, keys_floats and keys_tensor must be given, got {}", what,
              keyForms);
  GRAFT_CHECK(valueForms == 1,
              "{}: exactly one of values_strings, values_int64s, values_floats and values_tensor must be given, got {}",
              what, valueForms);
  GRAFT_CHECK(keys.numel() == values.numel(), "{}: {} keys but {} values", what, keys.numel(), values.numel());
  std::map<Key, int64_t> table;
  for (int64_t j = 0; j < keys.numel(); ++j) table.emplace(keyOf(keys, j, what + " keys"), j);  // first one wins
  bool stringKeys = keys.dtype() == DataType::String;
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK((x.dtype() == DataType::String) == stringKeys, "{}: the input is {} but the keys are {}", what,
                dtypeName(x.dtype()), dtypeName(keys.dtype()));
    dispatch<kAll>(values.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* yp = k.allocOutput(0, values.dtype(), x.shape()).data<T>();
      const T* vp = values.data<T>();
      const T& d = def.data<T>()[0];
      for (int64_t i = 0; i < x.numel(); ++i) {
        auto it = table.find(keyOf(x, i, what));
        yp[i] = it == table.end() ? d : vp[it->second];
      }
    });
  };
}

}  // namespace

GRAFT_REGISTER_OPS(ml) {
  r.add("Binarizer", kMlDomain).setReference(binarizerKernel);
  r.add("ArrayFeatureExtractor", kMlDomain).setReference(arrayFeatureExtractorKernel).noGradient({1});
  r.add("LabelEncoder", kMlDomain).setReference(labelEncoderKernel);
}

}  // namespace graft::ops
