// Backend matrix cases (backend_cases.hpp): pools, normalisations and layout conversions.
#include "backend_cases.hpp"

#include <cmath>

namespace graft::testing::cases {

void poolCases() {
  struct P {
    std::string op;
    Shape x;
    ir::Attributes a;
    std::string tag;
  };
  std::vector<P> pools = {
      {"MaxPool", {1, 8, 9, 9}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}}), "3x3s2"},
      {"MaxPool",
       {1, 8, 9, 9},
       attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}),
       "pad"},
      {"MaxPool",
       {1, 3, 8, 8},
       attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}}),
       "ceil"},
      {"MaxPool", {1, 3, 9, 9}, attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}}), "dilated"},
      {"MaxPool", {2, 4, 10}, attrs({{"kernel_shape", Ints{3}}, {"auto_pad", std::string("SAME_UPPER")}}), "1d_same"},
      {"MaxPool", {1, 2, 5, 6, 7}, attrs({{"kernel_shape", Ints{2, 2, 3}}, {"strides", Ints{1, 2, 2}}}), "3d"},
      {"AveragePool", {1, 8, 9, 9}, attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}), "exclude_pad"},
      {"AveragePool",
       {1, 8, 9, 9},
       attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"count_include_pad", int64_t{1}}}),
       "include_pad"},
      {"AveragePool",
       {1, 3, 8, 8},
       attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}}),
       "ceil"},
      {"AveragePool",
       {1, 3, 8, 8},
       attrs(
           {{"kernel_shape", Ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}, {"count_include_pad", int64_t{1}}}),
       "same_lower_incl"},
      {"AveragePool", {2, 4, 11}, attrs({{"kernel_shape", Ints{4}}, {"strides", Ints{3}}}), "1d"},
      {"AveragePool", {1, 2, 6, 6, 6}, attrs({{"kernel_shape", Ints{2, 2, 2}}, {"strides", Ints{2, 2, 2}}}), "3d"},
      {"GlobalAveragePool", {2, 8, 7, 7}, {}, "2d"},
      {"GlobalAveragePool", {2, 5, 9}, {}, "1d"},
      {"GlobalMaxPool", {2, 8, 7, 7}, {}, "2d"},
      {"GlobalMaxPool", {1, 3, 3, 4, 5}, {}, "3d"},
  };
  for (const P& p : pools) {
    NDArray x = rnd(p.x, p.op + p.tag);
    add(p.op + "_" + p.tag, OpCase{p.op, {x}, p.a});
    add(p.op + "_" + p.tag + "_special_values", OpCase{p.op, {sprinkled(x)}, p.a});
    if (p.op != "MaxPool" && p.op != "AveragePool") continue;
    // The backward pass (ai.graft MaxPoolGrad / AveragePoolGrad) of the same window.
    Shape ys = runReference(OpCase{p.op, {x}, p.a}).at(0).shape();
    OpCase g{p.op + "Grad", {rnd(ys, p.tag + "dy"), x}, p.a};
    g.domain = "ai.graft";
    add(p.op + "Grad_" + p.tag, g);
  }
  // A max pool large enough that the NaN check runs split over the threads, with one NaN in the
  // last range only: the window that holds it must come out NaN.
  {
    NDArray x = rnd({2, 16, 96, 96}, "bigpool");
    x.data<float>()[x.numel() - 100] = std::numeric_limits<float>::quiet_NaN();
    add("MaxPool_large_one_nan",
        OpCase{"MaxPool", {x}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}})});
  }
  // Channel-blocked pools, BatchNormalization and LRN.
  for (int64_t b : {8, 16})
    for (int64_t C : {8, 13}) {
      std::string sfx = "_b" + std::to_string(b) + "_C" + std::to_string(C);
      NDArray x = rnd({2, C, 7, 7}, "cb" + sfx);
      auto blockedCase = [&](const std::string& op, std::vector<NDArray> in, ir::Attributes a) {
        a.set("op", op);
        a.set("block", b);
        a.set("channels", C);
        in.insert(in.begin(), blockOf(x, b));
        OpCase c{"ChannelBlocked", in, a};
        c.domain = "ai.graft";
        return c;
      };
      add("ChannelBlocked_MaxPool" + sfx,
          blockedCase("MaxPool", {},
                      attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})));
      {
        NDArray plain = x;
        x = sprinkled(plain);
        add("ChannelBlocked_MaxPool_special_values" + sfx,
            blockedCase("MaxPool", {},
                        attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})));
        x = plain;
      }
      add("ChannelBlocked_AveragePool" + sfx, blockedCase("AveragePool", {}, attrs({{"kernel_shape", Ints{2, 2}}})));
      add("ChannelBlocked_GlobalAveragePool" + sfx, blockedCase("GlobalAveragePool", {}, {}));
      add("ChannelBlocked_BatchNormalization" + sfx,
          blockedCase("BatchNormalization",
                      {rnd({C}, "s" + sfx), rnd({C}, "b" + sfx), rnd({C}, "m" + sfx), rnd({C}, "v" + sfx, 0.5, 2)},
                      attrs({{"epsilon", 1e-3f}})));
      add("ChannelBlocked_LRN" + sfx, blockedCase("LRN", {}, attrs({{"size", int64_t{5}}, {"alpha", 0.01f}})));
    }
  // graft's blocked and channels-last max pooling (vec_maxpool): ceil_mode's extra windows,
  // asymmetric pads, dilations, a kernel of one, many channels last, sizes that split over the
  // threads, NaN and infinities.
  struct Mp {
    Shape x;
    int64_t block;
    ir::Attributes a;
    std::string tag;
  };
  std::vector<Mp> maxPools = {
      {{2, 64, 23, 23},
       64,
       attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}}),
       "ceil_C64_last"},
      {{1, 24, 9, 11},
       8,
       attrs({{"kernel_shape", Ints{2, 3}}, {"pads", Ints{0, 1, 1, 2}}, {"strides", Ints{1, 2}}}),
       "asym_pads"},
      {{1, 20, 10, 10}, 16, attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 3}}}), "dilated_C20"},
      {{2, 5, 6, 6}, 5, attrs({{"kernel_shape", Ints{1, 1}}, {"strides", Ints{2, 2}}}), "k1_C5_last"},
      {{8, 32, 57, 57},
       32,
       attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}}),
       "large_C32_last"},
      // Rows wider than vec_maxpool's column chunks (kChunkBytes of window maxima): three chunks
      // with padding on both ends and ceil_mode's extra window, and two with dilated columns.
      {{1, 64, 9, 71},
       64,
       attrs({{"kernel_shape", Ints{3, 3}},
              {"strides", Ints{2, 2}},
              {"pads", Ints{1, 1, 1, 1}},
              {"ceil_mode", int64_t{1}}}),
       "chunks_C64_last"},
      {{1, 48, 5, 80}, 48, attrs({{"kernel_shape", Ints{2, 3}}, {"dilations", Ints{1, 2}}}), "chunks_dilated_C48_last"},
  };
  for (const Mp& m : maxPools) {
    for (bool special : {false, true}) {
      std::string n = "ChannelBlocked_MaxPool_" + m.tag + (special ? "_special_values" : "");
      NDArray x = rnd(m.x, n);
      if (special) x = sprinkled(x);
      ir::Attributes a = m.a;
      a.set("op", std::string("MaxPool"));
      a.set("block", m.block);
      a.set("channels", m.x[1]);
      OpCase c{"ChannelBlocked", {blockOf(x, m.block)}, a};
      c.domain = "ai.graft";
      add(n, c);
    }
  }
}

void normCases() {
  for (const Shape& s : std::vector<Shape>{{4, 6}, {2, 5, 7}, {2, 8, 5, 5}, {1, 3, 2, 3, 4}}) {
    std::string n = "BatchNormalization_" + shapeToString(s);
    int64_t C = s[1];
    add(n, OpCase{"BatchNormalization",
                  {rnd(s, n + "x"), rnd({C}, n + "s"), rnd({C}, n + "b"), rnd({C}, n + "m"), rnd({C}, n + "v", 0.1, 2)},
                  attrs({{"epsilon", 1e-4f}})});
  }
  for (int64_t size : {1, 3, 5})
    for (const Shape& s : std::vector<Shape>{{2, 7, 4, 4}, {1, 5, 6}}) {
      std::string n = "LRN_size" + std::to_string(size) + shapeToString(s);
      add(n, OpCase{"LRN", {rnd(s, n)}, attrs({{"size", size}, {"alpha", 0.02f}, {"beta", 0.6f}, {"bias", 1.5f}})});
    }
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (const Shape& s : std::vector<Shape>{{7}, {3, 10}, {2, 3, 5}, {2, 3, 4, 5}})
      for (int64_t axis = -static_cast<int64_t>(s.size()); axis < static_cast<int64_t>(s.size()); ++axis) {
        std::string n = std::string(op) + shapeToString(s) + "_axis" + std::to_string(axis);
        add(n, OpCase{op, {rnd(s, n, -5, 5)}, attrs({{"axis", axis}})});
      }
}

void reorderCases() {
  for (int64_t b : {8, 16})
    for (const Shape& s : std::vector<Shape>{{2, 3, 5}, {1, 16, 4, 4}, {2, 20, 3, 5}, {1, 9, 2, 3, 4}}) {
      std::string n = "Blocked_b" + std::to_string(b) + shapeToString(s);
      NDArray x = rnd(s, n);
      OpCase to{"ToBlocked", {x}, attrs({{"block", b}})};
      to.domain = "ai.graft";
      add("ToBlocked" + n, to);
      OpCase from{"FromBlocked", {blockOf(x, b)}, attrs({{"channels", s[1]}})};
      from.domain = "ai.graft";
      add("FromBlocked" + n, from);
    }
  // Between layouts: 16-channel blocks <-> channels last (the cpu-layout pass's Winograd
  // convolutions), 8 <-> 16.
  for (const Shape& s : std::vector<Shape>{{2, 32, 5, 5}, {1, 20, 3, 4}, {1, 16, 2, 3, 4}})
    for (auto [from, to] : {std::pair<int64_t, int64_t>{16, s[1]}, {s[1], 16}, {8, 16}, {16, 8}}) {
      std::string n = "Reblock_" + std::to_string(from) + "_to_" + std::to_string(to) + shapeToString(s);
      OpCase c{"Reblock", {blockOf(rnd(s, n), from)}, attrs({{"channels", s[1]}, {"block", to}})};
      c.domain = "ai.graft";
      add(n, c);
    }
}

}  // namespace graft::testing::cases
