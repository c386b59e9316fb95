#include "numpy_util.hpp"

#include <algorithm>
#include <cstring>

#include <pybind11/stl.h>

#include "support/check.hpp"

namespace graft::py {
using namespace pybind11::literals;
namespace {
// The types numpy itself lacks, which ml_dtypes adds (numpy name = graft's dtypeNumpyName).
constexpr DataType kMlDtypes[] = {DataType::BFloat16,   DataType::Float8E4M3FN,   DataType::Float8E4M3FNUZ,
                                  DataType::Float8E5M2, DataType::Float8E5M2FNUZ, DataType::Int4,
                                  DataType::UInt4,      DataType::Float4E2M1,     DataType::Float8E8M0,
                                  DataType::Int2,       DataType::UInt2};
}  // namespace

std::string dictKeyOf(pyb::handle key, const std::string& what) {
  GRAFT_CHECK(pyb::isinstance<pyb::str>(key), "{} must be str, got {}", what, pyb::repr(key).cast<std::string>());
  try {
    return key.cast<std::string>();
  } catch (const pyb::cast_error&) {
    GRAFT_THROW("{}: the name {} is not valid UTF-8 (it holds a lone surrogate)", what,
                pyb::repr(key).cast<std::string>());
  }
}

DataType dtypeFromNumpy(const pyb::dtype& dt, const std::string& what) {
  char kind = dt.kind();
  auto size = static_cast<int>(dt.itemsize());
  // ml_dtypes' types (bfloat16, float8_*, int4, uint4, float4_e2m1fn) go by the names graft's
  // table uses as numpy names, before the kinds: some report kind 'f' or 'i' with one byte.
  {
    std::string name = pyb::str(dt.attr("name")).cast<std::string>();
    for (DataType t : kMlDtypes)
      if (name == dtypeNumpyName(t)) return t;
  }
  if (kind == 'f' && size == 4) return DataType::Float;
  if (kind == 'f' && size == 8) return DataType::Double;
  if (kind == 'f' && size == 2) return DataType::Float16;
  if (kind == 'b' && size == 1) return DataType::Bool;
  if (kind == 'i') {
    switch (size) {
      case 1:
        return DataType::Int8;
      case 2:
        return DataType::Int16;
      case 4:
        return DataType::Int32;
      case 8:
        return DataType::Int64;
    }
  }
  if (kind == 'u') {
    switch (size) {
      case 1:
        return DataType::UInt8;
      case 2:
        return DataType::UInt16;
      case 4:
        return DataType::UInt32;
      case 8:
        return DataType::UInt64;
    }
  }
  // Strings: numpy's fixed-width str arrays and object arrays (of str) both map to STRING.
  if (kind == 'U' || kind == 'O') return DataType::String;
  GRAFT_THROW(
      "{}: numpy dtype {} is not supported by graft (supported: float16/32/64, int8/16/32/64, "
      "uint8/16/32/64, bool, str or object (STRING), and ml_dtypes' bfloat16, float8_e4m3fn, "
      "float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, int4, uint4, float4_e2m1fn)",
      what, pyb::str(dt).cast<std::string>());
}

pyb::dtype numpyDtype(DataType dt) {
  GRAFT_CHECK(dt != DataType::Undefined, "tensors of undefined type have no numpy dtype");
  if (dt == DataType::String) return pyb::dtype("O");
  if (std::find(std::begin(kMlDtypes), std::end(kMlDtypes), dt) != std::end(kMlDtypes)) {
    pyb::module_ ml;
    try {
      ml = pyb::module_::import("ml_dtypes");
    } catch (const pyb::error_already_set&) {
      GRAFT_THROW(
          "{} tensors need the ml_dtypes package for their numpy dtype (pip install ml_dtypes; the onnx "
          "package depends on it)",
          dtypeName(dt));
    }
    return pyb::dtype::from_args(ml.attr(std::string(dtypeNumpyName(dt)).c_str()));
  }
  return pyb::dtype(std::string(dtypeNumpyName(dt)));
}

DataType dtypeFromObject(pyb::handle obj, const std::string& what) {
  if (pyb::isinstance<pyb::str>(obj)) return dtypeFromString(obj.cast<std::string>());
  pyb::dtype dt;
  try {
    dt = pyb::dtype::from_args(pyb::reinterpret_borrow<pyb::object>(obj));
  } catch (const pyb::error_already_set&) {
    GRAFT_THROW("{}: {} is not a data type", what, pyb::repr(obj).cast<std::string>());
  }
  return dtypeFromNumpy(dt, what);
}

namespace {

NDArray wrapChecked(const pyb::array& a, const std::string& what, bool writable, std::shared_ptr<void> owner) {
  DataType dt = dtypeFromNumpy(a.dtype(), what);
  GRAFT_CHECK(dt != DataType::String,
              "{}: a string array cannot be used in place; graft copies it (internal: use "
              "copyOf)",
              what);
  GRAFT_CHECK(a.dtype().attr("isnative").cast<bool>(),
              "{}: the array is not in native byte order; convert it with "
              "a.astype(a.dtype.newbyteorder('='))",
              what);
  GRAFT_CHECK(a.flags() & pyb::array::c_style,
              "{}: the array (shape {}) is not C-contiguous; pass "
              "numpy.ascontiguousarray(a)",
              what, pyb::str(a.attr("shape")).cast<std::string>());
  GRAFT_CHECK(a.attr("flags").attr("aligned").cast<bool>(), "{}: the array is not aligned; pass a.copy()", what);
  GRAFT_CHECK(!writable || a.writeable(), "{}: the array is read-only, but graft writes results into it", what);
  Shape shape(a.shape(), a.shape() + a.ndim());
  void* data = const_cast<void*>(a.data());
  if (owner) return NDArray::wrap(data, dt, std::move(shape), std::move(owner));
  return NDArray::wrap(data, dt, std::move(shape));
}

pyb::array asNdarray(pyb::handle obj, const std::string& what) {
  GRAFT_CHECK(pyb::isinstance<pyb::array>(obj), "{}: expected a numpy array, got {}", what,
              pyb::str(pyb::type::handle_of(obj).attr("__name__")).cast<std::string>());
  return pyb::reinterpret_borrow<pyb::array>(obj);
}

}  // namespace

NDArray viewOf(pyb::handle obj, const std::string& what, bool writable) {
  return wrapChecked(asNdarray(obj, what), what, writable, nullptr);
}

NDArray ownedViewOf(pyb::handle obj, const std::string& what, bool writable) {
  pyb::array a = asNdarray(obj, what);
  // The reference is dropped with the GIL held, from whichever thread frees the last view.
  auto* ref = new pyb::object(a);
  std::shared_ptr<void> owner(ref, [](void* p) {
    pyb::gil_scoped_acquire gil;
    delete static_cast<pyb::object*>(p);
  });
  return wrapChecked(a, what, writable, std::move(owner));
}

bool isStringArray(pyb::handle obj) {
  if (!pyb::isinstance<pyb::array>(obj)) return false;
  char kind = pyb::reinterpret_borrow<pyb::array>(obj).dtype().kind();
  return kind == 'U' || kind == 'O';
}

NDArray stringsOf(pyb::handle obj, const std::string& what) {
  pyb::module_ np = pyb::module_::import("numpy");
  pyb::array a = np.attr("asarray")(obj, "dtype"_a = "O");
  Shape shape(a.shape(), a.shape() + a.ndim());
  NDArray out(DataType::String, shape);
  pyb::list flat = a.attr("ravel")().attr("tolist")();
  auto* dst = out.data<std::string>();
  for (size_t i = 0; i < flat.size(); ++i) {
    pyb::handle e = flat[i];
    if (pyb::isinstance<pyb::bytes>(e))
      dst[i] = e.cast<std::string>();
    else if (pyb::isinstance<pyb::str>(e))
      dst[i] = e.cast<std::string>();
    else
      GRAFT_THROW("{}: element {} of the string array is a {}, not a str", what, i,
                  pyb::str(pyb::type::handle_of(e).attr("__name__")).cast<std::string>());
  }
  return out;
}

NDArray copyOf(pyb::handle obj, const std::string& what) {
  pyb::module_ np = pyb::module_::import("numpy");
  if (isStringArray(obj)) return stringsOf(obj, what);
  // asarray(order="C"), not ascontiguousarray: that one makes a 0-d array (a scalar) 1-d.
  pyb::array a = np.attr("asarray")(obj, pyb::arg("order") = "C");
  DataType dt = dtypeFromNumpy(a.dtype(), what);
  if (dt == DataType::String) return stringsOf(a, what);
  if (!a.dtype().attr("isnative").cast<bool>()) a = a.attr("astype")(a.dtype().attr("newbyteorder")("="));
  NDArray out(dt, Shape(a.shape(), a.shape() + a.ndim()));
  if (out.nbytes()) std::memcpy(out.rawData(), a.data(), out.nbytes());
  return out;
}

pyb::array toNumpy(const NDArray& a) {
  std::vector<pyb::ssize_t> shape(a.shape().begin(), a.shape().end());
  if (a.dtype() == DataType::String) {
    pyb::list items;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const std::string& e = a.data<std::string>()[i];
      // ONNX strings are bytes; UTF-8 ones (all that graft's ops write from str) come back as str.
      PyObject* u = PyUnicode_DecodeUTF8(e.data(), static_cast<Py_ssize_t>(e.size()), "strict");
      if (u) {
        items.append(pyb::reinterpret_steal<pyb::object>(u));
      } else {
        PyErr_Clear();
        items.append(pyb::bytes(e));
      }
    }
    pyb::module_ np = pyb::module_::import("numpy");
    pyb::array out = np.attr("empty")(a.numel(), "dtype"_a = "O");
    for (int64_t i = 0; i < a.numel(); ++i) out[pyb::int_(i)] = items[static_cast<size_t>(i)];
    return out.attr("reshape")(pyb::tuple(pyb::cast(shape)));
  }
  pyb::array out(numpyDtype(a.dtype()), shape);
  if (a.nbytes()) std::memcpy(out.mutable_data(), a.rawData(), a.nbytes());
  return out;
}

}  // namespace graft::py
