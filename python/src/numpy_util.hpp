#pragma once
// Conversions between numpy arrays and graft's NDArray / DataType.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <graft/ndarray.hpp>

#include <string>

namespace graft::py {

namespace pyb = pybind11;

/// The graft type of a numpy dtype; throws graft::Error naming `what` when graft has none.
/// A name given as a Python dict key (tensor ids, hyper-parameters): graft::Error naming `what` when it is not a str,
/// or when it does not encode to UTF-8 (a lone surrogate, as bytes decoded with surrogateescape leave), instead of
/// pybind11's "Unable to cast" RuntimeError.
std::string dictKeyOf(pyb::handle key, const std::string& what);

DataType dtypeFromNumpy(const pyb::dtype& dt, const std::string& what);
/// The numpy dtype of a graft type: numpy's own, ml_dtypes' for BFLOAT16, the FLOAT8 types, INT4,
/// UINT4 and FLOAT4E2M1, object for STRING. Throws graft::Error for UNDEFINED.
pyb::dtype numpyDtype(DataType dt);
/// Accepts a numpy dtype, a numpy scalar type, a Python type or a type name ("FLOAT", "float32").
DataType dtypeFromObject(pyb::handle obj, const std::string& what);

/// A view of a numpy array's memory (no copy). The array must be an ndarray, C-contiguous,
/// aligned, in native byte order and (when `writable`) writeable; otherwise graft::Error naming
/// `what` says what is wrong. The caller keeps the array alive while the view is used.
NDArray viewOf(pyb::handle obj, const std::string& what, bool writable);
/// A view that keeps a reference to the array (released with the GIL held).
NDArray ownedViewOf(pyb::handle obj, const std::string& what, bool writable);
/// True for numpy arrays of str ('U') or object dtype: graft copies those (STRING tensors hold
/// std::string objects), never views them.
bool isStringArray(pyb::handle obj);
/// A STRING NDArray from an array-like of str (UTF-8 encoded) or bytes; graft::Error naming
/// `what` for any other element.
NDArray stringsOf(pyb::handle obj, const std::string& what);
/// A copy of any array-like as an NDArray (string arrays as STRING).
NDArray copyOf(pyb::handle obj, const std::string& what);
/// A numpy copy of an NDArray.
pyb::array toNumpy(const NDArray& a);

}  // namespace graft::py
