// The _graft extension module. graft::Error becomes the Python exception graft.Error (a
// RuntimeError, as PopART's popart_exception is); graft::InternalError (a bug in graft, not the
// caller's mistake) becomes graft.InternalError, a RuntimeError that is not a graft.Error.
#include <graft/error.hpp>

#include "bindings.hpp"

PYBIND11_MODULE(_graft, m) {
  namespace pyb = pybind11;
  m.doc() = "graft's C++ core; use the graft package, not this module.";
  pyb::register_exception<graft::Error>(m, "Error", PyExc_RuntimeError);
  pyb::register_exception<graft::InternalError>(m, "InternalError", PyExc_RuntimeError);
  graft::py::bindCore(m);
  graft::py::bindBuilder(m);
  graft::py::bindSession(m);
  graft::py::bindTraining(m);
}
