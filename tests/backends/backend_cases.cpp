// The kernel libraries' cases of the backend test matrix (cpu_vs_reference_test.cpp says how they
// run): many shapes and attribute combinations per op, weights both constant (packed at compile
// time) and fed at run time.
#include "backend_cases.hpp"

#include <cctype>
#include <cmath>
#include <functional>
#include <limits>

namespace graft::testing {
namespace {

using Ints = std::vector<int64_t>;

std::vector<BackendCase>& cases() {
  static std::vector<BackendCase> all;
  return all;
}

uint64_t seedOf(const std::string& s) { return std::hash<std::string>{}(s)&0xffffff; }

void add(std::string name, OpCase op, std::vector<bool> constant = {}, double tol = 1e-4) {
  for (char& ch : name)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  constant.resize(op.inputs.size(), false);
  cases().push_back({std::move(name), std::move(op), std::move(constant), tol, tol});
}

NDArray rnd(Shape s, const std::string& salt, double lo = -1, double hi = 1) {
  return randomArray(DataType::Float, std::move(s), seedOf(salt), lo, hi);
}

// Plain [N, C, S...] -> [N, ceil(C/b), S..., b].
NDArray blockOf(const NDArray& x, int64_t b) {
  OpCase c{"ToBlocked", {x}, attrs({{"block", b}})};
  c.domain = "ai.graft";
  return runReference(c).at(0);
}

// x (float32) rounded to bf16, as a BFLOAT16 array (the reference's Cast: to nearest even).
NDArray toBf16(const NDArray& x) {
  return runReference(OpCase{"Cast", {x}, attrs({{"to", static_cast<int64_t>(DataType::BFloat16)}})}).at(0);
}

ir::Attributes activationAttrs(const std::string& act) {
  ir::Attributes a;
  if (act.empty()) return a;
  if (act == "Gelu") {
    a.set("activation", act);
    a.set("activation_domain", std::string("ai.graphcore"));
    return a;
  }
  if (act == "GeluErf") {  // ai.graft's exact Gelu (fuse-gelu writes it)
    a.set("activation", act);
    a.set("activation_domain", std::string("ai.graft"));
    return a;
  }
  a.set("activation", act);
  if (act == "LeakyRelu") a.set("activation_alpha", 0.1f);
  if (act == "Elu") a.set("activation_alpha", 0.8f);
  if (act == "HardSigmoid") {
    a.set("activation_alpha", 0.25f);
    a.set("activation_beta", 0.4f);
  }
  if (act == "Clip") {
    a.set("activation_alpha", -0.3f);
    a.set("activation_beta", 0.6f);
  }
  return a;
}

// `x` with NaN, +inf, -inf and denormals sprinkled in (issue 16: the cpu's max pooling dropped
// NaN, the reference kept it).
NDArray sprinkled(const NDArray& x) {
  NDArray y = x.clone();
  float* p = y.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (i % 23 == 5)
      p[i] = std::numeric_limits<float>::quiet_NaN();
    else if (i % 29 == 7)
      p[i] = std::numeric_limits<float>::infinity();
    else if (i % 31 == 11)
      p[i] = -std::numeric_limits<float>::infinity();
    else if (i % 37 == 13)
      p[i] = 1e-40f;
  }
  return y;
}

const std::vector<std::string> kActivations = {"",          "Relu",        "LeakyRelu", "Sigmoid",  "Tanh", "Elu",
                                               "HardSwish", "HardSigmoid", "Clip",      "Softplus", "Gelu", "GeluErf"};

// A convolution's geometry: X's and W's shapes, the window attributes, a name.
struct ConvGeo {
  Shape x, w;
  ir::Attributes a;
  std::string tag;
};

// Its backward ops' view: dY's shape, ConvGradWeight's attributes and ConvGradInput's.
struct ConvGradGeo {
  Shape ys;
  ir::Attributes weight, input;
};
ConvGradGeo convGradGeo(const ConvGeo& g) {
  ConvGradGeo r;
  r.ys = runReference(OpCase{"Conv", {rnd(g.x, "gx"), rnd(g.w, "gw")}, g.a}).at(0).shape();
  r.weight = g.a;
  r.weight.set("kernel_shape", Ints(g.w.begin() + 2, g.w.end()));
  r.input = r.weight;
  r.input.set("input_spatial", Ints(g.x.begin() + 2, g.x.end()));
  return r;
}

void convCases() {
  std::vector<ConvGeo> geos = {
      {{1, 3, 9, 9}, {8, 3, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}}), "2d_pad1"},
      {{2, 16, 8, 8}, {16, 16, 1, 1}, {}, "2d_1x1"},
      {{1, 8, 10, 7}, {12, 8, 3, 3}, attrs({{"strides", Ints{2, 2}}}), "2d_stride2"},
      {{1, 8, 9, 9}, {8, 8, 3, 3}, attrs({{"dilations", Ints{2, 2}}, {"pads", Ints{2, 2, 2, 2}}}), "2d_dilated"},
      {{1, 8, 9, 9}, {8, 4, 3, 3}, attrs({{"group", int64_t{2}}, {"pads", Ints{0, 1, 2, 1}}}), "2d_group2_asym"},
      {{1, 16, 8, 8}, {16, 1, 3, 3}, attrs({{"group", int64_t{16}}, {"pads", Ints{1, 1, 1, 1}}}), "2d_depthwise"},
      {{1, 24, 7, 7},
       {24, 1, 3, 3},
       attrs({{"group", int64_t{24}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}),
       "2d_depthwise24_s2"},
      {{1, 5, 7, 6},
       {7, 5, 2, 3},
       attrs({{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2, 1}}}),
       "2d_same_upper"},
      {{1, 5, 7, 6}, {7, 5, 2, 2}, attrs({{"auto_pad", std::string("SAME_LOWER")}}), "2d_same_lower"},
      {{1, 5, 7, 6}, {7, 5, 3, 2}, attrs({{"auto_pad", std::string("VALID")}, {"strides", Ints{2, 2}}}), "2d_valid"},
      {{2, 6, 11}, {4, 6, 3}, attrs({{"pads", Ints{1, 2}}, {"strides", Ints{2}}}), "1d"},
      {{1, 4, 5, 5, 5}, {8, 4, 3, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1, 1, 1}}}), "3d"},
      {{1, 4, 6, 5, 4}, {4, 2, 2, 2, 2}, attrs({{"group", int64_t{2}}, {"strides", Ints{2, 1, 2}}}), "3d_group"},
      {{1, 17, 6, 6}, {9, 17, 3, 3}, attrs({{"kernel_shape", Ints{3, 3}}}), "2d_odd_channels"},
      // Winograd's shape (3x3, stride 1; 16-channel multiples; 10 = two 4-wide tiles and a part).
      {{2, 16, 10, 10}, {32, 16, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}}), "2d_winograd"},
  };
  for (const ConvGeo& g : geos) {
    for (int variant = 0; variant < 3; ++variant) {
      std::string n = "Conv_" + g.tag +
                      (variant == 0   ? "_bias_constw"
                       : variant == 1 ? "_nobias_runtimew"
                                      : "_bias_runtimew");
      std::vector<NDArray> in{rnd(g.x, n + "x"), rnd(g.w, n + "w")};
      if (variant != 1) in.push_back(rnd({g.w[0]}, n + "b"));
      add(n, OpCase{"Conv", in, g.a}, {false, variant == 0, variant == 0});
    }
  }
  // The backward pass (ai.graft ConvGradInput / ConvGradWeight) of the same geometries.
  for (const ConvGeo& g : geos) {
    ConvGradGeo b = convGradGeo(g);
    for (bool constw : {true, false}) {
      std::string n = "ConvGradInput_" + g.tag + (constw ? "_constw" : "_runtimew");
      OpCase c{"ConvGradInput", {rnd(b.ys, n + "dy"), rnd(g.w, n + "w")}, b.input, 1, "ai.graft"};
      add(n, c, {false, constw});
    }
    for (int outs : {1, 2}) {
      std::string n = "ConvGradWeight_" + g.tag + (outs == 2 ? "_bias" : "");
      add(n, OpCase{"ConvGradWeight", {rnd(g.x, n + "x"), rnd(b.ys, n + "dy")}, b.weight, outs, "ai.graft"});
    }
  }
  // A double convolution: the cpu backend runs the reference kernel.
  add("Conv_double",
      OpCase{"Conv", {randomArray(DataType::Double, {1, 2, 4, 4}, 1), randomArray(DataType::Double, {2, 2, 3, 3}, 2)}});

  // FusedConv: activations, residual sums, channel-blocked layouts.
  for (const std::string& act : kActivations) {
    std::string n = "FusedConv_" + (act.empty() ? std::string("none") : act);
    ir::Attributes a = activationAttrs(act);
    a.set("pads", Ints{1, 1, 1, 1});
    OpCase c{"FusedConv", {rnd({1, 8, 6, 6}, n + "x", -2, 2), rnd({8, 8, 3, 3}, n + "w"), rnd({8}, n + "b")}, a};
    c.domain = "ai.graft";
    add(n, c, {false, true, true});
    // NaN, ±inf and denormals in the input (issue 16: oneDNN's Relu and Clip post-ops drop NaN).
    c.inputs[0] = sprinkled(c.inputs[0]);
    add(n + "_special_values", c, {false, true, true});
  }
  for (int xb : {0, 8, 16})
    for (int yb : {0, 8, 16})
      for (bool sum : {false, true}) {
        for (int64_t C : {3, 16, 20}) {
          if (xb && C == 3 && yb == 0) continue;
          std::string n = "FusedConv_x" + std::to_string(xb) + "_y" + std::to_string(yb) + "_C" + std::to_string(C) +
                          (sum ? "_sum" : "");
          int64_t M = 12;
          NDArray x = rnd({2, C, 7, 7}, n + "x"), s = rnd({2, M, 7, 7}, n + "s");
          ir::Attributes a = activationAttrs("Relu");
          a.set("pads", Ints{1, 1, 1, 1});
          a.set("x_block", int64_t{xb});
          a.set("y_block", int64_t{yb});
          std::vector<NDArray> in{xb ? blockOf(x, xb) : x, rnd({M, C, 3, 3}, n + "w"), rnd({M}, n + "b")};
          if (sum) in.push_back(yb ? blockOf(s, yb) : s);
          OpCase c{"FusedConv", in, a};
          c.domain = "ai.graft";
          add(n, c, {false, true, false, false});
          if (C == 20) {
            in[0] = xb ? blockOf(sprinkled(x), xb) : sprinkled(x);
            add(n + "_special_values", OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false});
          }
        }
      }
  // Channels-last (a block of all channels: what the cpu-layout pass picks where oneDNN's AVX-512
  // brgemm convolutions choose NHWC).
  for (int64_t C : {3, 16, 20})
    for (bool sum : {false, true}) {
      std::string n = "FusedConv_nhwc_C" + std::to_string(C) + (sum ? "_sum" : "");
      int64_t M = 12;
      ir::Attributes a = activationAttrs("Relu");
      a.set("pads", Ints{1, 1, 1, 1});
      a.set("x_block", C);
      a.set("y_block", M);
      std::vector<NDArray> in{blockOf(rnd({2, C, 7, 7}, n + "x"), C), rnd({M, C, 3, 3}, n + "w"), rnd({M}, n + "b")};
      if (sum) in.push_back(blockOf(rnd({2, M, 7, 7}, n + "s"), M));
      add(n, OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false});
    }
  // Batch 1, channels last, constant weights: row bands under passive waits (onednn_conv.cpp,
  // makeBands; the backend matrix runs with OMP_WAIT_POLICY=passive): a band's top and bottom
  // padding and its input rows with their halo, for stride 2, dilation, asymmetric padding, a
  // depthwise convolution, a residual Sum, and an output of two rows (one row a band).
  struct Band {
    const char* tag;
    int64_t C, M, H, W, kh, kw, group;
    Ints pads, strides, dilations;
    bool sum;
  };
  for (const Band& b : {Band{"3x3", 8, 12, 9, 7, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
                        Band{"stride2", 5, 6, 11, 6, 3, 3, 1, {1, 1, 1, 1}, {2, 2}, {1, 1}, false},
                        Band{"dilated_asym", 4, 8, 12, 9, 5, 3, 1, {0, 1, 3, 1}, {1, 1}, {2, 1}, true},
                        Band{"depthwise", 16, 16, 10, 10, 3, 3, 16, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
                        Band{"1x1_two_rows", 6, 10, 2, 5, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false}}) {
    std::string n = std::string("FusedConv_nhwc_b1_bands_") + b.tag;
    ir::Attributes a = activationAttrs("Relu");
    a.set("pads", b.pads);
    a.set("strides", b.strides);
    a.set("dilations", b.dilations);
    a.set("group", b.group);
    a.set("x_block", b.C);
    a.set("y_block", b.M);
    const int64_t oh = (b.H + b.pads[0] + b.pads[2] - ((b.kh - 1) * b.dilations[0] + 1)) / b.strides[0] + 1;
    const int64_t ow = (b.W + b.pads[1] + b.pads[3] - ((b.kw - 1) * b.dilations[1] + 1)) / b.strides[1] + 1;
    std::vector<NDArray> in{blockOf(rnd({1, b.C, b.H, b.W}, n + "x"), b.C),
                            rnd({b.M, b.C / b.group, b.kh, b.kw}, n + "w"), rnd({b.M}, n + "b")};
    if (b.sum) in.push_back(blockOf(rnd({1, b.M, oh, ow}, n + "s"), b.M));
    add(n, OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false});
  }
  // bf16 activations (y_dtype BFLOAT16, as the cpu-bf16-activations pass of enableBf16 sessions
  // writes them): X float32 or bf16, Sum bf16, channels-last and 16-channel blocks; Relu (applied
  // after the primitive, in its bf16 form), LeakyRelu (a post-op) or none; NaN and infinities in
  // a bf16 X. Y is rounded to bf16, so results one bf16 step (2^-8 of the value) apart where the
  // float32 sums straddle a rounding boundary are equal here: tolerance 1e-2.
  for (bool blocked : {false, true})
    for (bool xBf16 : {false, true})
      for (bool sum : {false, true})
        for (std::string act : {"Relu", "LeakyRelu", ""}) {
          const int64_t C = 16, M = 32, xb = blocked ? 16 : C, yb = blocked ? 16 : M;
          std::string n = std::string("FusedConv_bf16y_") + (blocked ? "b16" : "nhwc") + (xBf16 ? "_xbf16" : "_xf32") +
                          (sum ? "_sum" : "") + "_" + (act.empty() ? "none" : act);
          ir::Attributes a = activationAttrs(act);
          a.set("pads", Ints{1, 1, 1, 1});
          a.set("x_block", xb);
          a.set("y_block", yb);
          a.set("y_dtype", static_cast<int64_t>(DataType::BFloat16));
          NDArray x = blockOf(rnd({2, C, 7, 7}, n + "x", -2, 2), xb);
          std::vector<NDArray> in{xBf16 ? toBf16(x) : x, rnd({M, C, 3, 3}, n + "w"), rnd({M}, n + "b")};
          if (sum) in.push_back(toBf16(blockOf(rnd({2, M, 7, 7}, n + "s", -4, 4), yb)));
          add(n, OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false}, 1e-2);
          if (xBf16 && act == "Relu") {
            in[0] = toBf16(blockOf(sprinkled(rnd({2, C, 7, 7}, n + "x", -2, 2)), xb));
            add(n + "_special_values", OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false}, 1e-2);
          }
        }
  // Winograd's shapes (3x3, stride 1, 16-channel multiples; the cpu_winograd variant of the
  // matrix runs them on oneDNN's Winograd kernels): plain, channels-last and 16-channel blocks,
  // with and without a residual sum; Relu; 9x9 and 14x14 outputs (whole and partial 4x4 tiles);
  // NaN and infinities in X.
  for (int layout : {0, -1, 16})
    for (bool sum : {false, true})
      for (int64_t H : {9, 14}) {
        const int64_t C = 32, M = 48;
        int64_t xb = layout < 0 ? C : layout, yb = layout < 0 ? M : layout;
        std::string n = std::string("FusedConv_winograd_") +
                        (layout == 0  ? "plain"
                         : layout < 0 ? "nhwc"
                                      : "b16") +
                        "_H" + std::to_string(H) + (sum ? "_sum" : "");
        ir::Attributes a = activationAttrs("Relu");
        a.set("pads", Ints{1, 1, 1, 1});
        if (layout) {
          a.set("x_block", xb);
          a.set("y_block", yb);
        }
        NDArray x = rnd({2, C, H, H}, n + "x", -2, 2), s = rnd({2, M, H, H}, n + "s");
        auto lay = [&](const NDArray& v, int64_t b) { return layout ? blockOf(v, b) : v; };
        std::vector<NDArray> in{lay(x, xb), rnd({M, C, 3, 3}, n + "w"), rnd({M}, n + "b")};
        if (sum) in.push_back(lay(s, yb));
        add(n, OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false});
        if (H == 9 && !sum) {
          in[0] = lay(sprinkled(x), xb);
          add(n + "_special_values", OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false});
        }
      }
  {
    OpCase c{"FusedConv",
             {rnd({1, 32, 5, 5}, "dwx"), rnd({32, 1, 3, 3}, "dww"), rnd({32}, "dwb")},
             attrs({{"group", int64_t{32}},
                    {"pads", Ints{1, 1, 1, 1}},
                    {"x_block", int64_t{8}},
                    {"y_block", int64_t{8}},
                    {"activation", std::string("Clip")},
                    {"activation_alpha", 0.f},
                    {"activation_beta", 6.f}})};
    c.inputs[0] = blockOf(c.inputs[0], 8);
    c.domain = "ai.graft";
    add("FusedConv_depthwise_blocked_relu6", c, {false, true, true});
  }

  // ConvTranspose.
  struct D {
    Shape x, w;
    ir::Attributes a;
    std::string tag;
  };
  std::vector<D> deconvs = {
      {{1, 4, 5, 5}, {4, 6, 3, 3}, {}, "2d"},
      {{1, 4, 5, 5}, {4, 6, 3, 3}, attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}), "2d_s2_p1"},
      {{1, 4, 5, 4}, {4, 3, 3, 2}, attrs({{"strides", Ints{2, 3}}, {"output_padding", Ints{1, 2}}}), "2d_outpad"},
      {{1, 4, 5, 5}, {4, 3, 3, 3}, attrs({{"strides", Ints{2, 2}}, {"output_shape", Ints{10, 11}}}), "2d_outshape"},
      {{1, 4, 5, 5},
       {4, 3, 3, 3},
       attrs({{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}}),
       "2d_same"},
      {{1, 6, 4, 4}, {6, 2, 3, 3}, attrs({{"group", int64_t{3}}, {"dilations", Ints{2, 2}}}), "2d_group_dilated"},
      {{2, 3, 7}, {3, 5, 4}, attrs({{"strides", Ints{3}}, {"pads", Ints{1, 2}}}), "1d"},
      {{1, 2, 3, 3, 3}, {2, 4, 2, 2, 2}, attrs({{"strides", Ints{2, 2, 2}}}), "3d"},
  };
  for (const D& d : deconvs)
    for (bool constw : {true, false}) {
      std::string n = "ConvTranspose_" + d.tag + (constw ? "_constw" : "_runtimew");
      int64_t M = d.w[1] * (d.a.has("group") ? std::get<int64_t>(*d.a.find("group")) : 1);
      add(n, OpCase{"ConvTranspose", {rnd(d.x, n + "x"), rnd(d.w, n + "w"), rnd({M}, n + "b")}, d.a},
          {false, constw, constw});
    }
}

void matmulCases() {
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{4, 5}, {5, 3}},
      {{2, 3, 4}, {4, 5}},
      {{2, 3, 4}, {2, 4, 5}},
      {{3, 1, 4, 6}, {2, 6, 3}},
      {{5}, {5, 3}},
      {{2, 3, 4}, {4}},
      {{7}, {7}},
      {{1, 2, 8, 16}, {3, 1, 16, 4}},
      {{64, 128}, {128, 96}},
      {{3, 32, 48}, {3, 48, 40}},
  };
  for (const auto& [a, b] : shapes)
    for (bool constb : {true, false}) {
      std::string n = "MatMul_" + shapeToString(a) + "x" + shapeToString(b) + (constb ? "_constb" : "");
      add(n, OpCase{"MatMul", {rnd(a, n + "a"), rnd(b, n + "b")}}, {false, constb});
    }
  struct Gm {
    Shape a, b, c;
    int64_t ta, tb;
    float alpha, beta;
  };
  std::vector<Gm> gemms = {
      {{4, 5}, {5, 3}, {}, 0, 0, 1, 1},          {{5, 4}, {5, 3}, {3}, 1, 0, 1, 1},
      {{4, 5}, {3, 5}, {4, 3}, 0, 1, 1, 1},      {{5, 4}, {3, 5}, {4, 1}, 1, 1, 0.5f, 2},
      {{4, 5}, {5, 3}, {}, 0, 0, 2, 0},          {{4, 5}, {5, 3}, {1}, 0, 0, 1, -1},
      {{4, 5}, {5, 3}, {1, 3}, 0, 0, 1.5f, 0.f}, {{32, 64}, {48, 64}, {48}, 0, 1, 1, 1},
  };
  for (size_t i = 0; i < gemms.size(); ++i) {
    const Gm& g = gemms[i];
    for (bool constb : {true, false}) {
      std::string n = "Gemm_" + std::to_string(i) + (constb ? "_constb" : "");
      std::vector<NDArray> in{rnd(g.a, n + "a"), rnd(g.b, n + "b")};
      if (!g.c.empty()) in.push_back(rnd(g.c, n + "c"));
      add(n, OpCase{"Gemm", in, attrs({{"transA", g.ta}, {"transB", g.tb}, {"alpha", g.alpha}, {"beta", g.beta}})},
          {false, constb, constb});
    }
  }
  // Sizes for the AVX2 sgemm (sgemm_avx2: N >= 1024, 6 <= M <= 512): M, N, K not multiples of its 6x16 register
  // block nor of its K block (256) and column chunk (512), K = 1, transposes, every C
  // broadcast, Relu.
  struct Sg {
    Shape a, b, c;
    int64_t ta, tb;
    float alpha, beta;
    bool relu;
  };
  std::vector<Sg> sgemms = {
      {{37, 29}, {29, 1045}, {1045}, 0, 0, 1, 1, false},
      {{29, 37}, {29, 1030}, {37, 1030}, 1, 0, 1, 1, true},
      {{37, 29}, {1045, 29}, {37, 1}, 0, 1, 1, 1, false},
      {{29, 37}, {1027, 29}, {1}, 1, 1, 0.5f, 2, true},
      {{130, 1}, {1, 1040}, {1, 1040}, 0, 0, 1, 1, false},
      {{7, 300}, {300, 1030}, {1030}, 0, 0, 1, 1, true},
      {{13, 600}, {1025, 600}, {}, 0, 1, 2, 1, false},
      {{6, 171}, {171, 1024}, {1024}, 0, 0, 1, 1, true},
      {{200, 70}, {1100, 70}, {1100}, 0, 1, 1, 1, true},
      {{100, 40}, {40, 1050}, {100, 1050}, 0, 0, -1.5f, 0.25f, false},
      {{64, 520}, {520, 1030}, {}, 0, 0, 1, 1, true},
  };
  // Each with a constant B and one fed at run time; Relu cases again with NaN and infinities in A.
  auto addGemms = [&](const std::string& prefix, const std::vector<Sg>& list, support::CpuIsa isa) {
    for (size_t i = 0; i < list.size(); ++i) {
      const Sg& g = list[i];
      for (bool constb : {true, false}) {
        std::string n = prefix + std::to_string(i) + (constb ? "_constb" : "");
        std::vector<NDArray> in{rnd(g.a, n + "a"), rnd(g.b, n + "b")};
        if (!g.c.empty()) in.push_back(rnd(g.c, n + "c"));
        OpCase c{"Gemm", in, attrs({{"transA", g.ta}, {"transB", g.tb}, {"alpha", g.alpha}, {"beta", g.beta}})};
        if (g.relu) {
          c.type = "FusedGemm";
          c.domain = "ai.graft";
          c.attrs.set("activation", std::string("Relu"));
        }
        add(n, c, {false, constb, constb});
        cases().back().isa = isa;
        if (g.relu) {
          c.inputs[0] = sprinkled(c.inputs[0]);
          add(n + "_special_values", c, {false, constb, constb});
          cases().back().isa = isa;
        }
      }
    }
  };
  addGemms("Sgemm_", sgemms, support::CpuIsa::Avx2);
  // The same sgemm for MatMul / FusedMatMul of A [..., M, K] by a 2-D B, rows of A merged.
  struct Sm {
    Shape a, b, bias;
    bool relu;
  };
  std::vector<Sm> smm = {
      {{2, 37, 29}, {29, 1045}, {1045}, true}, {{2, 37, 29}, {29, 1030}, {2, 37, 1030}, false},
      {{3, 5, 300}, {300, 1030}, {1}, true},   {{2, 2, 9, 40}, {40, 1300}, {1, 1, 1300}, false},
      {{50, 70}, {70, 1033}, {}, false},
  };
  auto addMatMuls = [&](const std::string& prefix, const std::vector<Sm>& list, support::CpuIsa isa) {
    for (size_t i = 0; i < list.size(); ++i) {
      const Sm& g = list[i];
      for (bool constb : {true, false}) {
        std::string n = prefix + std::to_string(i) + (constb ? "_constb" : "");
        OpCase c{"MatMul", {rnd(g.a, n + "a"), rnd(g.b, n + "b")}};
        if (!g.bias.empty() || g.relu) {
          c.type = "FusedMatMul";
          c.domain = "ai.graft";
          if (!g.bias.empty()) c.inputs.push_back(rnd(g.bias, n + "c"));
          if (g.relu) c.attrs.set("activation", std::string("Relu"));
        }
        add(n, c, {false, constb, constb});
        cases().back().isa = isa;
      }
    }
  };
  addMatMuls("SgemmMatMul_", smm, support::CpuIsa::Avx2);
  // graft's matrix-vector products (vec_gemv: at most 4 rows of A'): every row count
  // of its register groups (1-4, rows of MatMul's A merged), N below, at and above its 32-column
  // panel and not a multiple of it, K = 1 and odd (the tail of its k unrolling), transposes,
  // every C broadcast, alpha and beta, Relu (with NaN and infinities), and products large enough
  // to split into tasks (> 128 KiB of B); K = 1 outer products of any size. Runs for every ISA
  // variant (cpu_avx2_vec_gemv_*).
  std::vector<Sg> gemvs = {
      {{1, 37}, {37, 45}, {45}, 0, 0, 1, 1, false},
      {{37, 3}, {70, 37}, {3, 1}, 1, 1, 0.5f, 2, false},
      {{2, 300}, {300, 1100}, {2, 1100}, 0, 0, 1, 1, true},
      {{4, 1001}, {97, 1001}, {1}, 0, 1, -1.5f, 0.25f, true},
      {{1, 1}, {1, 64}, {1, 64}, 0, 0, 1, 1, false},
      {{3, 513}, {513, 600}, {}, 0, 0, 2, 1, true},
      {{1, 2048}, {2048, 32}, {32}, 0, 0, 1, 1, true},
      {{4, 64}, {31, 64}, {4, 31}, 0, 1, 1, -1, false},
      {{130, 1}, {130, 700}, {700}, 1, 0, 1, 1, false},
      // K = 1 with more rows (vec_gemv's outer products): every C broadcast, transposes, Relu.
      {{70, 1}, {1, 300}, {300}, 0, 0, 1, 1, true},
      {{1, 70}, {300, 1}, {70, 1}, 1, 1, 0.5f, 2, false},
      {{40, 1}, {1, 33}, {40, 33}, 0, 0, 1, -1, true},
      {{300, 1}, {1, 600}, {1}, 0, 0, -2, 1, false},
      {{9, 1}, {1, 5}, {}, 0, 0, 2, 1, false},
  };
  // A constant B is packed panels; one fed at run time is read in place ([K, N] rows, or [N, K]
  // columns under transB).
  addGemms("Gemv_", gemvs, support::CpuIsa::Native);
  std::vector<Sm> gemvMatMuls = {
      {{2, 1, 65}, {65, 130}, {130}, true},
      {{1, 1, 1, 513}, {513, 600}, {1, 1, 600}, false},
      {{3, 33}, {33, 64}, {}, false},
      {{2, 2, 200}, {200, 1000}, {1}, true},
  };
  addMatMuls("GemvMatMul_", gemvMatMuls, support::CpuIsa::Native);
  for (const std::string& act : kActivations) {
    std::string n = "FusedMatMul_" + (act.empty() ? std::string("none") : act);
    OpCase c{"FusedMatMul",
             {rnd({2, 6, 16}, n + "a", -2, 2), rnd({16, 8}, n + "b"), rnd({8}, n + "c")},
             activationAttrs(act)};
    c.domain = "ai.graft";
    add(n, c, {false, true, true});
    std::string ng = "FusedGemm_" + (act.empty() ? std::string("none") : act);
    ir::Attributes ga = activationAttrs(act);
    ga.set("transB", int64_t{1});
    OpCase cg{"FusedGemm", {rnd({6, 16}, ng + "a", -2, 2), rnd({8, 16}, ng + "b"), rnd({8}, ng + "c")}, ga};
    cg.domain = "ai.graft";
    add(ng, cg, {false, true, true});
    // NaN, ±inf and denormals in A, and (run-time) in B.
    c.inputs[0] = sprinkled(c.inputs[0]);
    add(n + "_special_values", c, {false, true, true});
    cg.inputs[0] = sprinkled(cg.inputs[0]);
    cg.inputs[1] = sprinkled(cg.inputs[1]);
    add(ng + "_special_values", cg, {false, false, true});
  }
  for (const Shape& bias : std::vector<Shape>{{1}, {3, 1}, {2, 3, 5}, {1, 3, 5}}) {
    std::string n = "FusedMatMul_bias" + shapeToString(bias);
    OpCase c{"FusedMatMul", {rnd({2, 3, 4}, n + "a"), rnd({4, 5}, n + "b"), rnd(bias, n + "c")}};
    c.domain = "ai.graft";
    add(n, c);
  }
  {
    OpCase c{"FusedMatMul", {rnd({4}, "fmv_a"), rnd({4, 5}, "fmv_b"), rnd({5}, "fmv_c")}, activationAttrs("Relu")};
    c.domain = "ai.graft";
    add("FusedMatMul_vector", c);
  }
  // Folded Transposes (fold-transpose): operands read and results written through strides.
  struct Pm {
    Shape a, b, bias;
    Ints pa, pb, py;
    std::string act;
  };
  std::vector<Pm> perms = {
      {{2, 16, 6}, {8, 16}, {}, {0, 2, 1}, {1, 0}, {}, ""},                            // dA = dY Bᵀ style
      {{2, 5, 3, 4}, {2, 5, 3, 4}, {}, {0, 2, 1, 3}, {0, 2, 3, 1}, {}, ""},            // attention Q Kᵀ
      {{2, 3, 5, 5}, {2, 5, 3, 4}, {}, {}, {0, 2, 1, 3}, {0, 2, 1, 3}, ""},            // P V, heads merged
      {{2, 3, 5, 5}, {2, 5, 3, 4}, {}, {0, 1, 3, 2}, {0, 2, 1, 3}, {0, 2, 1, 3}, ""},  // dV
      {{2, 5, 3, 4}, {2, 3, 5, 5}, {}, {0, 2, 3, 1}, {}, {0, 3, 1, 2}, ""},            // dK
      {{3, 4}, {5, 3}, {5}, {1, 0}, {1, 0}, {1, 0}, "Relu"},                           // bias, activation, perm_y
      {{7, 2, 9}, {9, 5}, {}, {1, 0, 2}, {}, {}, ""},                                  // batch axes permuted
      {{4}, {5, 4}, {}, {}, {1, 0}, {}, ""},                                           // vector A
  };
  for (size_t i = 0; i < perms.size(); ++i) {
    const Pm& p = perms[i];
    for (bool constb : {true, false}) {
      std::string n = "FusedMatMul_perm" + std::to_string(i) + (constb ? "_constb" : "");
      ir::Attributes a = activationAttrs(p.act);
      if (!p.pa.empty()) a.set("perm_a", p.pa);
      if (!p.pb.empty()) a.set("perm_b", p.pb);
      if (!p.py.empty()) a.set("perm_y", p.py);
      std::vector<NDArray> in{rnd(p.a, n + "a"), rnd(p.b, n + "b")};
      if (!p.bias.empty()) in.push_back(rnd(p.bias, n + "c"));
      OpCase c{"FusedMatMul", in, a};
      c.domain = "ai.graft";
      add(n, c, {false, constb, constb});
    }
  }
}

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

// The recurrent cells the forward and gradient cases run: each op with its gate blocks, extra
// attributes and a tag for the case names (a bidirectional-only cell names its direction).
struct RecurrentCell {
  std::string op;
  int64_t gates;
  ir::Attributes a;
  std::string tag;
};

const std::vector<RecurrentCell>& recurrentCells() {
  static const std::vector<RecurrentCell> cells = {
      {"RNN", 1, {}, "tanh"},
      {"RNN", 1, attrs({{"activations", std::vector<std::string>{"Relu"}}}), "relu"},
      {"RNN", 1,
       attrs({{"activations", std::vector<std::string>{"Sigmoid", "Sigmoid"}},
              {"direction", std::string("bidirectional")}}),
       "sigmoid_bidi"},
      {"GRU", 3, {}, "default"},
      {"GRU", 3, attrs({{"linear_before_reset", int64_t{1}}}), "lbr"},
      {"LSTM", 4, {}, "default"},
      {"LSTM", 4, attrs({{"clip", 0.5f}}), "clip_reference"},
  };
  return cells;
}

void rnnCases() {
  const int64_t T = 5, N = 3, I = 4, H = 6;
  const std::vector<RecurrentCell>& cells = recurrentCells();
  for (const RecurrentCell& r : cells)
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int variant = 0; variant < 3; ++variant) {
        if (r.a.has("direction") && std::string(dir) != "bidirectional") continue;
        int64_t D = std::string(dir) == "bidirectional" ? 2 : 1;
        std::string n = r.op + "_" + r.tag + "_" + dir + "_v" + std::to_string(variant);
        ir::Attributes a = r.a;
        a.set("direction", std::string(dir));
        a.set("hidden_size", H);
        std::vector<NDArray> in{rnd({T, N, I}, n + "x"), rnd({D, r.gates * H, I}, n + "w"),
                                rnd({D, r.gates * H, H}, n + "r")};
        // variant 0: everything; 1: no optional inputs; 2: sequence_lens, full and partial.
        if (variant != 1) {
          in.push_back(rnd({D, 2 * r.gates * H}, n + "b"));
          NDArray lens(DataType::Int32, {N});
          for (int64_t b = 0; b < N; ++b) lens.data<int32_t>()[b] = static_cast<int32_t>(variant == 2 ? T - b : T);
          in.push_back(lens);
          in.push_back(rnd({D, N, H}, n + "h"));
          if (r.op == "LSTM") {
            in.push_back(rnd({D, N, H}, n + "c"));
            in.push_back(rnd({D, 3 * H}, n + "p"));
          }
        }
        OpCase c{r.op, in, a, r.op == "LSTM" ? 3 : 2};
        add(n, c, {false, variant == 0, variant == 0, variant == 0});
        if (variant == 0 && std::string(dir) != "reverse") {
          c.inputs[0] = sprinkled(c.inputs[0]);
          add(n + "_special_values", c, {false, true, true, true});
        }
      }
}

// LSTM at small batch, no peepholes and no sequence_lens: graft's own kernel (vec_lstm.cpp),
// with constant weights and with weights given at run time. Hidden sizes that are and are not multiples of its 16-unit
// blocks, more blocks than threads, every direction, with and without bias and initial states.
void smallBatchLstmCases() {
  struct S {
    int64_t T, N, I, H;
  };
  // Batch 1-4: vec_lstm_small_batch; 5 and more: vec_lstm_batched (constant weights; hidden sizes
  // with one block of 16 units, a ragged last block, and blocks split unevenly over the threads).
  for (const S& sh : {S{5, 1, 4, 20}, S{4, 3, 7, 33}, S{3, 4, 16, 16}, S{6, 2, 5, 64}, S{5, 5, 4, 20}, S{4, 8, 7, 33},
                      S{3, 6, 16, 48}, S{6, 9, 5, 16}})
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (bool optional : {false, true}) {
        int64_t D = std::string(dir) == "bidirectional" ? 2 : 1;
        std::string n = std::string(sh.N <= 4 ? "LSTM_small_batch_" : "LSTM_batched_") + std::to_string(sh.N) + "x" +
                        std::to_string(sh.H) + "_" + dir + (optional ? "_bias_states" : "");
        ir::Attributes a = attrs({{"direction", std::string(dir)}, {"hidden_size", sh.H}});
        std::vector<NDArray> in{rnd({sh.T, sh.N, sh.I}, n + "x"), rnd({D, 4 * sh.H, sh.I}, n + "w"),
                                rnd({D, 4 * sh.H, sh.H}, n + "r")};
        if (optional) {
          in.push_back(rnd({D, 8 * sh.H}, n + "b"));
          in.push_back(NDArray());  // no sequence_lens
          in.push_back(rnd({D, sh.N, sh.H}, n + "h"));
          in.push_back(rnd({D, sh.N, sh.H}, n + "c"));
        }
        add(n, OpCase{"LSTM", in, a, 3}, {false, true, true, true, false, false, false});
        // Weights that are graph inputs (a training graph's forward): packed at each run (small
        // batch), oneDNN's LSTM (batched).
        add(n + "_runtime_weights", OpCase{"LSTM", in, a, 3});
      }
}

// RNNGrad, GRUGrad and LSTMGrad (ai.graft): dY, dY_h (, dY_c) then the forward inputs.
void rnnGradCases() {
  const std::vector<RecurrentCell>& cells = recurrentCells();
  struct Geo {
    int64_t T, N, I, H;
  };
  for (const RecurrentCell& r : cells)
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int variant = 0; variant < 5; ++variant) {
        if (r.a.has("direction") && std::string(dir) != "bidirectional") continue;
        // variant 0: every optional input and output gradient; 1: no optional inputs, dY only;
        // 2: sequence_lens partial (the reference at run time); 3: bias and initial_h, no dY;
        // 4: a larger shape with everything.
        Geo geo = variant == 4 ? Geo{7, 2, 9, 16} : Geo{5, 3, 4, 6};
        const int64_t T = geo.T, N = geo.N, I = geo.I, H = geo.H;
        int64_t D = std::string(dir) == "bidirectional" ? 2 : 1;
        bool lstm = r.op == "LSTM";
        std::string n = r.op + "Grad_" + r.tag + "_" + dir + "_v" + std::to_string(variant);
        ir::Attributes a = r.a;
        a.set("direction", std::string(dir));
        a.set("hidden_size", H);
        std::vector<NDArray> in;
        in.push_back(variant == 3 ? NDArray() : rnd({T, D, N, H}, n + "dy"));
        in.push_back(variant == 1 ? NDArray() : rnd({D, N, H}, n + "dyh"));
        if (lstm) in.push_back(variant == 1 ? NDArray() : rnd({D, N, H}, n + "dyc"));
        size_t w = in.size() + 1;
        in.push_back(rnd({T, N, I}, n + "x"));
        in.push_back(rnd({D, r.gates * H, I}, n + "w"));
        in.push_back(rnd({D, r.gates * H, H}, n + "r"));
        if (variant != 1) {
          in.push_back(rnd({D, 2 * r.gates * H}, n + "b"));
          NDArray lens(DataType::Int32, {N});
          for (int64_t b = 0; b < N; ++b) lens.data<int32_t>()[b] = static_cast<int32_t>(variant == 2 ? T - b : T);
          in.push_back(variant == 3 ? NDArray() : lens);
          in.push_back(rnd({D, N, H}, n + "h"));
          if (lstm && variant != 3) {
            in.push_back(rnd({D, N, H}, n + "c"));
            in.push_back(rnd({D, 3 * H}, n + "p"));
          }
        }
        OpCase c{r.op + "Grad", in, a, lstm ? 7 : 5};
        c.domain = "ai.graft";
        std::vector<bool> constant(in.size(), false);
        // Constant weights in one variant: the kernel re-packs them either way.
        if (variant == 0) constant[w] = constant[w + 1] = true;
        add(n, c, constant, 1e-3);
      }
}

// LSTMGrad with the forward's Y as its last input, as the VJP builds it (vec_lstm_grad reads the
// states from it), and with LSTMTrain's Saved after it, as lstm-save-gates gives it (the gates
// are then read, not recomputed): Y and Saved are the reference forward's outputs for the same
// inputs. And LSTMTrain itself, whose Saved the reference fills from its cells.
void lstmTrainingCases() {
  struct S {
    int64_t T, N, I, H;
  };
  // The last shape's step products (2 N 4H H FLOPs) are large enough for the kernels to run each
  // sequence on every thread, split by hidden units (500: a last block of 4 units), so only its
  // bidirectional cases with and without the optional inputs.
  for (const S& sh : {S{5, 3, 4, 6}, S{7, 1, 9, 16}, S{6, 5, 8, 33}, S{4, 8, 16, 64}, S{3, 8, 8, 500}})
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int variant = 0; variant < 3; ++variant) {
        // variant 0: bias, initial states, every output gradient; 1: nothing optional, dY only;
        // 2: bias and initial_h, dY_h and dY_c only.
        const int64_t T = sh.T, N = sh.N, I = sh.I, H = sh.H;
        if (H == 500 && (std::string(dir) != "bidirectional" || variant == 2)) continue;
        int64_t D = std::string(dir) == "bidirectional" ? 2 : 1;
        std::string shape = std::to_string(N) + "x" + std::to_string(H) + "_" + dir + "_v" + std::to_string(variant);
        std::string n = "LSTMGrad_from_Y_" + shape;
        ir::Attributes a = attrs({{"direction", std::string(dir)}, {"hidden_size", H}});
        std::vector<NDArray> fwd{rnd({T, N, I}, n + "x"),
                                 rnd({D, 4 * H, I}, n + "w"),
                                 rnd({D, 4 * H, H}, n + "r", -4.0 / H, 4.0 / H),  // gates not all saturated
                                 variant == 1 ? NDArray() : rnd({D, 8 * H}, n + "b"),
                                 NDArray(),
                                 variant == 1 ? NDArray() : rnd({D, N, H}, n + "h"),
                                 variant == 0 ? rnd({D, N, H}, n + "c") : NDArray(),
                                 NDArray()};
        // The forward's Y and Saved from a gradient op's inputs.
        auto forward = [a](const std::vector<NDArray>& grad) {
          std::vector<NDArray> f(grad.begin() + 3, grad.begin() + 11);
          OpCase train{"LSTMTrain", f, a, 4};
          train.domain = "ai.graft";
          return runReference(train);
        };
        std::vector<NDArray> in{variant == 2 ? NDArray() : rnd({T, D, N, H}, n + "dy"),
                                variant == 1 ? NDArray() : rnd({D, N, H}, n + "dyh"),
                                variant == 1 ? NDArray() : rnd({D, N, H}, n + "dyc")};
        in.insert(in.end(), fwd.begin(), fwd.end());
        in.push_back(forward(in).at(0));
        OpCase c{"LSTMGrad", in, a, 7};
        c.domain = "ai.graft";
        add(n, c, {}, 1e-5);
        cases().back().derive = [forward](std::vector<NDArray>& v) { v.back() = forward(v).at(0); };
        c.inputs.push_back(forward(in).at(3));
        add("LSTMGrad_from_saved_" + shape, c, {}, 1e-5);
        cases().back().derive = [forward](std::vector<NDArray>& v) {
          std::vector<NDArray> f = forward(v);
          v[v.size() - 2] = f.at(0);
          v.back() = f.at(3);
        };
        OpCase train{"LSTMTrain", fwd, a, 4};
        train.domain = "ai.graft";
        add("LSTMTrain_" + shape, train, {}, 1e-5);
      }
}

// Channels-last training kernels (ai.graft::ChannelBlocked from the cpu-layout-training pass,
// blocks of all channels: [N, 1, spatial..., C]): BatchNormalization in training mode and its
// gradient, the convolution gradients, the pooling gradients.
void channelsLastTrainingCases() {
  auto wrapped = [](const std::string& op, std::vector<NDArray> in, ir::Attributes a, int64_t block, int64_t channels,
                    Ints blockedInputs, Ints inputChannels, bool blockedOutput, int outs) {
    a.set("op", op);
    if (op != "BatchNormalization") a.set("op_domain", std::string("ai.graft"));
    a.set("block", block);
    a.set("channels", channels);
    a.set("blocked_inputs", blockedInputs);
    a.set("input_channels", inputChannels);
    if (!blockedOutput) a.set("blocked_output", int64_t{0});
    OpCase c{"ChannelBlocked", std::move(in), a, outs, "ai.graft"};
    return c;
  };
  for (const Shape& s : std::vector<Shape>{{2, 16, 5, 5}, {3, 13, 4, 6}, {2, 7, 9}, {1, 32, 40, 40}}) {
    int64_t C = s[1];
    std::string n = "NhwcBatchNorm_" + shapeToString(s);
    NDArray x = rnd(s, n + "x", -2, 3);
    for (float momentum : {0.f, 0.9f})
      add(n + "_train_m" + std::to_string(static_cast<int>(momentum * 10)),
          wrapped("BatchNormalization",
                  {blockOf(x, C), rnd({C}, n + "s", 0.5, 1.5), rnd({C}, n + "b"), rnd({C}, n + "m"),
                   rnd({C}, n + "v", 0.5, 2)},
                  attrs({{"epsilon", 1e-3f}, {"training_mode", int64_t{1}}, {"momentum", momentum}}), C, C, {0}, {C},
                  true, 3));
    NDArray dy = rnd(s, n + "dy");
    for (bool given : {false, true}) {
      std::vector<NDArray> in{blockOf(dy, C), blockOf(x, C), rnd({C}, n + "s", 0.5, 1.5)};
      if (given) {
        in.push_back(rnd({C}, n + "mean"));
        in.push_back(rnd({C}, n + "var", 0.5, 2));
      }
      add(n + (given ? "_grad_given_stats" : "_grad"),
          wrapped("BatchNormalizationGrad", in, attrs({{"epsilon", 1e-3f}}), C, C, {0, 1}, {C, C}, true, 3));
    }
  }
  std::vector<ConvGeo> geos = {
      {{2, 16, 8, 8}, {32, 16, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}}), "3x3"},
      {{2, 32, 9, 9}, {16, 32, 1, 1}, attrs({{"strides", Ints{2, 2}}}), "1x1_s2"},
      {{1, 32, 8, 8}, {32, 1, 3, 3}, attrs({{"group", int64_t{32}}, {"pads", Ints{1, 1, 1, 1}}}), "depthwise"},
      {{1, 3, 12, 12}, {16, 3, 3, 3}, attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}), "stem"},
  };
  for (const ConvGeo& g : geos) {
    ConvGradGeo b = convGradGeo(g);
    int64_t C = g.x[1], M = g.w[0];
    std::string n = "NhwcConvGradInput_" + g.tag;
    add(n,
        wrapped("ConvGradInput", {blockOf(rnd(b.ys, n + "dy"), M), rnd(g.w, n + "w")}, b.input, C, C, {0}, {M}, true,
                1),
        {false, true});
    for (int outs : {1, 2}) {
      std::string nw = "NhwcConvGradWeight_" + g.tag + (outs == 2 ? "_bias" : "");
      add(nw, wrapped("ConvGradWeight", {blockOf(rnd(g.x, nw + "x"), C), blockOf(rnd(b.ys, nw + "dy"), M)}, b.weight, C,
                      C, {0, 1}, {C, M}, false, outs));
    }
  }
  for (const char* op : {"MaxPool", "AveragePool"}) {
    Shape xs{2, 16, 9, 9};
    ir::Attributes a = attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
    std::string n = std::string("Nhwc") + op + "Grad";
    NDArray x = rnd(xs, n + "x");
    Shape ys = runReference(OpCase{op, {x}, a}).at(0).shape();
    add(n, wrapped(std::string(op) + "Grad", {blockOf(rnd(ys, n + "dy"), 16), blockOf(x, 16)}, a, 16, 16, {0, 1},
                   {16, 16}, true, 1));
  }
}

}  // namespace

const std::vector<BackendCase>& allCases() {
  static bool built = [] {
    convCases();
    matmulCases();
    poolCases();
    normCases();
    reorderCases();
    rnnCases();
    smallBatchLstmCases();
    rnnGradCases();
    lstmTrainingCases();
    channelsLastTrainingCases();
    return true;
  }();
  (void)built;
  return cases();
}

}  // namespace graft::testing
