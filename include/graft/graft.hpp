#pragma once
/// @file graft.hpp  Everything a graft user includes.
#include <graft/dataflow.hpp>
#include <graft/device.hpp>
#include <graft/dtype.hpp>
#include <graft/error.hpp>
#include <graft/ndarray.hpp>
#include <graft/options.hpp>
#include <graft/session.hpp>
#include <graft/stepio.hpp>
#include <graft/tensor_info.hpp>
