// Cases of the cpu backend's data-movement kernels (vec_move.cpp), compared with the reference
// kernels by the backend matrix (cpu_vs_reference_test.cpp): several element sizes (1, 2, 4, 8 bytes and bool),
// contiguous and strided patterns, empty tensors, negative axes and indices, and bad inputs (which both backends must
// refuse).
#include "vec_cases.hpp"

namespace graft::testing {
namespace {

NDArray ints(Shape s, const std::vector<int64_t>& v) {
  NDArray a(DataType::Int64, std::move(s));
  for (int64_t i = 0; i < a.numel(); ++i) a.data<int64_t>()[i] = v[static_cast<size_t>(i)];
  return a;
}

VecCase make(std::string label, std::string type, std::vector<NDArray> in, ir::Attributes a = {}, int nout = 1) {
  VecCase c;
  c.label = std::move(label);
  c.op = OpCase{std::move(type), std::move(in), std::move(a), nout, ""};
  c.rtol = 0;
  c.atol = 0;
  return c;
}

const DataType kTypes[] = {DataType::Float, DataType::Double, DataType::Float16, DataType::Int8, DataType::Int64, DataType::Bool};

GRAFT_VEC_CASES(vec_move) {
  uint64_t seed = 700;
  auto rnd = [&](DataType dt, Shape s) { return randomArray(dt, std::move(s), seed++, -5, 5); };
  for (DataType dt : kTypes) {
    std::string t(dtypeName(dt));
    // Transpose: inner axis kept, inner axis moved, reversed, with size-1 axes, empty.
    for (const auto& [s, perm] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
             {{4, 33, 6, 17}, {0, 2, 1, 3}}, {{4, 6, 33, 17}, {0, 1, 3, 2}}, {{5, 7, 9}, {2, 1, 0}},
             {{1, 64, 1, 40}, {3, 1, 2, 0}}, {{130, 70}, {1, 0}}, {{3, 0, 4}, {1, 2, 0}}}) {
      cases.push_back(make(t + " " + shapeToString(s), "Transpose", {rnd(dt, s)}, attrs({{"perm", perm}})));
    }
    cases.push_back(make(t + " default perm", "Transpose", {rnd(dt, {3, 4, 5})}));
    // Concat along every axis, with an empty input.
    for (int64_t axis : {0, 1, -1}) {
      cases.push_back(make(t + " axis " + std::to_string(axis), "Concat",
                           {rnd(dt, {3, 4, 5}), rnd(dt, {3, 4, 5}), rnd(dt, {3, 4, 5})}, attrs({{"axis", axis}})));
    }
    cases.push_back(make(t + " uneven", "Concat", {rnd(dt, {6, 2, 9}), rnd(dt, {6, 7, 9}), rnd(dt, {6, 0, 9})},
                         attrs({{"axis", int64_t{1}}})));
    // Split: equal parts, sizes as an input, along the last axis.
    cases.push_back(make(t + " equal", "Split", {rnd(dt, {6, 10})}, attrs({{"axis", int64_t{0}}}), 3));
    cases.push_back(make(t + " sizes", "Split", {rnd(dt, {4, 10, 3}), ints({3}, {2, 5, 3})}, attrs({{"axis", int64_t{1}}}), 3));
    cases.push_back(make(t + " last axis", "Split", {rnd(dt, {5, 12})}, attrs({{"axis", int64_t{-1}}}), 2));
    // Fewer rows than twice the threads and at least 256 KB: copied in 128 KB chunks over the
    // threads (copyChunked), chunks ending inside the pieces.
    if (dt == DataType::Float || dt == DataType::Int8) {
      const int64_t w = dt == DataType::Int8 ? 1031 : 257;
      cases.push_back(make(t + " axis 0, chunked", "Concat", {rnd(dt, {300, w}), rnd(dt, {101, w}), rnd(dt, {0, w})},
                           attrs({{"axis", int64_t{0}}})));
      cases.push_back(make(t + " 2 rows, chunked", "Concat", {rnd(dt, {2, 70 * w}), rnd(dt, {2, 30 * w + 1})},
                           attrs({{"axis", int64_t{1}}})));
      cases.push_back(make(t + " axis 0, chunked", "Split", {rnd(dt, {401, w}), ints({3}, {130, 0, 271})},
                           attrs({{"axis", int64_t{0}}}), 3));
      cases.push_back(make(t + " 3 rows, chunked", "Split", {rnd(dt, {3, 100 * w}), ints({2}, {37 * w, 63 * w})},
                           attrs({{"axis", int64_t{1}}}), 2));
    }
    // Slice: steps, negative indices, clamping, reversed.
    cases.push_back(make(t + " rows", "Slice", {rnd(dt, {20, 30}), ints({1}, {3}), ints({1}, {17}), ints({1}, {0})}));
    cases.push_back(make(t + " step 2", "Slice",
                         {rnd(dt, {20, 30}), ints({2}, {1, 2}), ints({2}, {19, 29}), ints({2}, {0, 1}), ints({2}, {3, 2})}));
    cases.push_back(make(t + " negative", "Slice",
                         {rnd(dt, {8, 9, 10}), ints({1}, {-1}), ints({1}, {-100}), ints({1}, {-1}), ints({1}, {-2})}));
    cases.push_back(make(t + " clamped", "Slice", {rnd(dt, {8, 9}), ints({1}, {-100}), ints({1}, {100}), ints({1}, {1})}));
    // Expand: scalar, row, column, prepended axes.
    cases.push_back(make(t + " scalar", "Expand", {rnd(dt, {}), ints({2}, {3, 40})}));
    cases.push_back(make(t + " row", "Expand", {rnd(dt, {1, 40}), ints({3}, {2, 30, 40})}));
    cases.push_back(make(t + " column", "Expand", {rnd(dt, {30, 1}), ints({2}, {30, 41})}));
    cases.push_back(make(t + " grows nothing", "Expand", {rnd(dt, {4, 5}), ints({1}, {1})}));
    // Gather: rows of a table, negative indices, inner axis.
    cases.push_back(make(t + " rows", "Gather", {rnd(dt, {50, 16}), ints({2, 3}, {0, 49, -1, 7, 7, -50})}));
    cases.push_back(make(t + " axis 1", "Gather", {rnd(dt, {4, 9, 5}), ints({4}, {8, 0, -3, 2})}, attrs({{"axis", int64_t{1}}})));
    cases.push_back(make(t + " scalar index", "Gather", {rnd(dt, {6, 7}), ints({}, {3})}, attrs({{"axis", int64_t{-1}}})));
    // GatherElements along each axis.
    cases.push_back(make(t + " axis 0", "GatherElements", {rnd(dt, {4, 5}), ints({3, 5}, {0, 1, 2, 3, -1, 3, 2, 1, 0, -4, 1, 1, 1, 1, 1})}));
    cases.push_back(make(t + " axis 1", "GatherElements", {rnd(dt, {3, 4}), ints({3, 2}, {0, 3, -1, 2, 1, 1})},
                         attrs({{"axis", int64_t{1}}})));
    // Tile.
    cases.push_back(make(t + " 2d", "Tile", {rnd(dt, {3, 5}), ints({2}, {4, 3})}));
    cases.push_back(make(t + " 3d once", "Tile", {rnd(dt, {2, 3, 4}), ints({3}, {1, 1, 1})}));
    cases.push_back(make(t + " zero", "Tile", {rnd(dt, {2, 3}), ints({2}, {0, 2})}));
    // Pad (constant): both sides, negative pads crop, a constant value.
    if (dt != DataType::Bool) {
      NDArray v = randomArray(dt, {}, seed++, 1, 2);
      cases.push_back(make(t + " both sides", "Pad", {rnd(dt, {3, 4, 5}), ints({6}, {0, 1, 2, 1, 0, 3}), v}));
      cases.push_back(make(t + " crop", "Pad", {rnd(dt, {6, 7}), ints({4}, {-1, 2, -2, 0})}));
    }
  }
  // Bad inputs: both backends refuse them.
  cases.push_back(make("index out of range", "Gather", {rnd(DataType::Float, {5, 3}), ints({2}, {1, 5})}));
  cases.back().expectError = "indices value 5 is out of range for axis 0 of size 5";
  cases.push_back(make("index out of range", "GatherElements", {rnd(DataType::Float, {3, 3}), ints({1, 3}, {0, 3, 1})}));
  cases.back().expectError = "indices value 3 is out of range";
  cases.push_back(make("split sizes do not add up", "Split", {rnd(DataType::Float, {4, 10}), ints({2}, {3, 3})},
                       attrs({{"axis", int64_t{1}}}), 2));
  cases.back().expectError = "split sizes sum to 6, but axis 1 has size 10";
  cases.push_back(make("zero step", "Slice",
                       {rnd(DataType::Float, {4, 4}), ints({1}, {0}), ints({1}, {4}), ints({1}, {0}), ints({1}, {0})}));
  cases.back().expectError = "step for axis 0 is 0";
  cases.push_back(make("negative repeats", "Tile", {rnd(DataType::Float, {2, 3}), ints({2}, {1, -1})}));
  cases.back().expectError = "repeats must be >= 0, got -1";
  cases.push_back(make("shapes do not broadcast", "Expand", {rnd(DataType::Float, {3, 4}), ints({2}, {5, 4})}));
  cases.back().expectError = "do not broadcast";
  for (size_t i = cases.size() - 6; i < cases.size(); ++i) cases[i].expectFast = false;
}

}  // namespace
}  // namespace graft::testing
