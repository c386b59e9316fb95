#pragma once
// The parts of the _graft extension module, each bound by its own file.
#include <pybind11/pybind11.h>

namespace graft::py {

namespace pyb = pybind11;

/// TensorInfo, DataFlow, AnchorReturnType, InputShapeInfo, devices, options, patterns, logging.
void bindCore(pyb::module_& m);
/// Builder and op signatures.
void bindBuilder(pyb::module_& m);
/// Sessions and step IO.
void bindSession(pyb::module_& m);
/// Optimizers, OptimizerValue, ClipNormSettings and the training session core.
void bindTraining(pyb::module_& m);

}  // namespace graft::py
