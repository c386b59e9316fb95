#include "numpy_util.hpp"

#include <cstring>

#include "support/check.hpp"

namespace graft::py {

DataType dtypeFromNumpy(const pyb::dtype& dt, const std::string& what) {
  char kind = dt.kind();
  auto size = static_cast<int>(dt.itemsize());
  if (kind == 'f' && size == 4) return DataType::Float;
  if (kind == 'f' && size == 8) return DataType::Double;
  if (kind == 'f' && size == 2) return DataType::Float16;
  if (kind == 'b' && size == 1) return DataType::Bool;
  if (kind == 'i') {
    switch (size) {
      case 1: return DataType::Int8;
      case 2: return DataType::Int16;
      case 4: return DataType::Int32;
      case 8: return DataType::Int64;
    }
  }
  if (kind == 'u') {
    switch (size) {
      case 1: return DataType::UInt8;
      case 2: return DataType::UInt16;
      case 4: return DataType::UInt32;
      case 8: return DataType::UInt64;
    }
  }
  // ml_dtypes' bfloat16 registers as kind 'V' with this name.
  if (pyb::str(dt.attr("name")).cast<std::string>() == "bfloat16") return DataType::BFloat16;
  GRAFT_THROW("{}: numpy dtype {} is not supported by graft (supported: float16/32/64, int8/16/32/64, "
              "uint8/16/32/64, bool)", what, pyb::str(dt).cast<std::string>());
}

pyb::dtype numpyDtype(DataType dt) {
  GRAFT_CHECK(dt != DataType::BFloat16 && dt != DataType::String && dt != DataType::Undefined &&
                  dt != DataType::Complex64 && dt != DataType::Complex128,
              "{} tensors have no numpy dtype", dtypeName(dt));
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
  GRAFT_CHECK(a.dtype().attr("isnative").cast<bool>(), "{}: the array is not in native byte order; convert it with "
              "a.astype(a.dtype.newbyteorder('='))", what);
  GRAFT_CHECK(a.flags() & pyb::array::c_style, "{}: the array (shape {}) is not C-contiguous; pass "
              "numpy.ascontiguousarray(a)", what, pyb::str(a.attr("shape")).cast<std::string>());
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

NDArray copyOf(pyb::handle obj, const std::string& what) {
  pyb::module_ np = pyb::module_::import("numpy");
  pyb::array a = np.attr("ascontiguousarray")(obj);
  DataType dt = dtypeFromNumpy(a.dtype(), what);
  if (!a.dtype().attr("isnative").cast<bool>()) a = a.attr("astype")(a.dtype().attr("newbyteorder")("="));
  NDArray out(dt, Shape(a.shape(), a.shape() + a.ndim()));
  if (out.nbytes()) std::memcpy(out.rawData(), a.data(), out.nbytes());
  return out;
}

pyb::array toNumpy(const NDArray& a) {
  std::vector<pyb::ssize_t> shape(a.shape().begin(), a.shape().end());
  pyb::array out(numpyDtype(a.dtype()), shape);
  if (a.nbytes()) std::memcpy(out.mutable_data(), a.rawData(), a.nbytes());
  return out;
}

}  // namespace graft::py
