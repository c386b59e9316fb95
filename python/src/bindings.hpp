#pragma once
// The parts of the _graft extension module, each bound by its own file.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>

namespace graft::py {

namespace pyb = pybind11;

/// A Python integer (or anything with __index__) as a C++ integer in [lo, hi]: graft.Error naming
/// `what` when it is not an integer or out of range (pybind11 would raise TypeError).
int64_t checkedInt(pyb::handle value, const char* what, int64_t lo = std::numeric_limits<int>::min(),
                   int64_t hi = std::numeric_limits<int>::max());

/// TensorInfo, DataFlow, AnchorReturnType, InputShapeInfo, devices, options, patterns, logging.
void bindCore(pyb::module_& m);
/// Builder and op signatures.
void bindBuilder(pyb::module_& m);
/// Sessions and step IO.
void bindSession(pyb::module_& m);
/// Optimizers, OptimizerValue, ClipNormSettings and the training session core.
void bindTraining(pyb::module_& m);

}  // namespace graft::py
