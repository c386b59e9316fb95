// Backend matrix cases (backend_cases.hpp): convolutions (Conv, FusedConv, ConvTranspose, their
// gradients) and the channels-last training kernels.
#include "backend_cases.hpp"

#include <cmath>

#include "ops/conv_chain.hpp"

namespace graft::testing::cases {

namespace {

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

}  // namespace

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
  // 16-channel blocks on one side of a tensor of exactly 16 channels (which layoutDesc calls channels
  // last, the same bytes): 1x1 and 3x3, batch 1 (row bands) and 4 (image bands), into and out of 16
  // channels, as in squeezenet's fire modules around Winograd convolutions (activationDescs).
  for (int64_t N : {int64_t{1}, int64_t{4}})
    for (int64_t k : {int64_t{1}, int64_t{3}})
      for (auto [C, M] : {std::pair<int64_t, int64_t>{16, 48}, {40, 16}}) {
        std::string n = "FusedConv_b16_N" + std::to_string(N) + "_k" + std::to_string(k) + "_C" + std::to_string(C) +
                        "_M" + std::to_string(M);
        ir::Attributes a = activationAttrs("Relu");
        a.set("pads", Ints(4, k / 2));
        a.set("x_block", int64_t{16});
        a.set("y_block", int64_t{16});
        std::vector<NDArray> in{blockOf(rnd({N, C, 9, 8}, n + "x"), 16), rnd({M, C, k, k}, n + "w"), rnd({M}, n + "b")};
        add(n, OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false});
      }
  // Channels last, constant weights: row bands at batch 1, image bands at batch 4, under passive
  // waits (onednn_conv.cpp,
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
                        Band{"1x1_two_rows", 6, 10, 2, 5, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false},
                        // 7 rows do not split evenly: at batch 1 the bands are runs of pixels (17
                        // and 18 of the 35), with the residual read at the same offsets.
                        Band{"1x1_pixels", 6, 10, 7, 5, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, true}}) {
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
    // Larger batches: bands of whole images where the batch splits evenly over the threads (4),
    // oneDNN's own threads where it does not (3).
    for (int64_t N : {int64_t{3}, int64_t{4}}) {
      std::string nb = std::string("FusedConv_nhwc_b") + std::to_string(N) + "_bands_" + b.tag;
      std::vector<NDArray> inb{blockOf(rnd({N, b.C, b.H, b.W}, nb + "x"), b.C), in[1], in[2]};
      if (b.sum) inb.push_back(blockOf(rnd({N, b.M, oh, ow}, nb + "s"), b.M));
      add(nb, OpCase{"FusedConv", inb, a, 1, "ai.graft"}, {false, true, false, false});
    }
    // NaN through the bands: oneDNN's Relu and Clip post-ops would drop it, so the activation runs
    // after each band's primitive, on the band's rows (batch 1) or images (4). Clip (mobilenet_v2's
    // Relu6) for the depthwise band, Relu for the others. NaN and denormals only: these windows are
    // small, and a window with an infinity but no NaN comes out NaN from the Winograd and bf16
    // variants that run every onednn_conv case (the C = 20 cases above have a NaN in every window).
    // An even number of input channels: oneDNN's bf16 kernels (the bf16 variant) pair them, and an
    // odd count's last pair reads the next pixel's first channel (times a zero weight: NaN from a
    // NaN there; docs/reliability.md, "NaN and inf").
    const int64_t Ce = b.C + b.C % 2;
    ir::Attributes as = activationAttrs(b.group > 1 ? "Clip" : "Relu");
    for (const char* key : {"pads", "strides", "dilations", "group", "y_block"}) as.set(key, *a.find(key));
    as.set("x_block", Ce);
    for (int64_t N : {int64_t{1}, int64_t{4}}) {
      std::string ns = std::string("FusedConv_nhwc_b") + std::to_string(N) + "_bands_" + b.tag + "_special_values";
      NDArray xs = rnd({N, Ce, b.H, b.W}, ns + "x", -2, 2);
      float* xp = xs.data<float>();
      for (int64_t i = 0; i < xs.numel(); ++i)
        if (i % 23 == 5)
          xp[i] = std::numeric_limits<float>::quiet_NaN();
        else if (i % 37 == 13)
          xp[i] = 1e-40f;
      std::vector<NDArray> ins{blockOf(xs, Ce), Ce == b.C ? in[1] : rnd({b.M, Ce / b.group, b.kh, b.kw}, ns + "w"),
                               in[2]};
      if (b.sum) ins.push_back(blockOf(rnd({N, b.M, oh, ow}, ns + "s"), b.M));
      add(ns, OpCase{"FusedConv", ins, as, 1, "ai.graft"}, {false, true, false, false});
    }
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
  // graft's own Winograd kernel for AVX2 hosts (winograd_avx2: 8-channel blocks, under the AVX2
  // limit, forced by the node's winograd mark): channel counts that fill their blocks and ones that
  // leave the last block partial (in and out), whole and partial 4x4 tiles, non-square images,
  // no / symmetric / asymmetric padding, with and without bias, residual sum and Relu; NaN and
  // infinities in X.
  struct Wa {
    int64_t N, C, M, H, W;
    Ints pads;
    bool bias, sum;
    std::string act;
  };
  std::vector<Wa> winoAvx2 = {
      {2, 8, 8, 8, 8, {1, 1, 1, 1}, true, false, "Relu"},    {1, 16, 24, 9, 9, {1, 1, 1, 1}, true, true, "Relu"},
      {2, 20, 13, 14, 11, {1, 1, 1, 1}, true, false, ""},    {1, 32, 16, 7, 10, {0, 0, 0, 0}, true, true, ""},
      {1, 12, 40, 6, 13, {2, 1, 0, 2}, true, true, "Relu"},  {3, 5, 3, 4, 4, {1, 1, 1, 1}, false, false, "Relu"},
      {1, 300, 20, 5, 5, {1, 1, 1, 1}, true, false, "Relu"},
  };
  for (const Wa& s : winoAvx2) {
    std::string n = "FusedConv_winograd_avx2_N" + std::to_string(s.N) + "_C" + std::to_string(s.C) + "_M" +
                    std::to_string(s.M) + "_" + std::to_string(s.H) + "x" + std::to_string(s.W) + "_p" +
                    std::to_string(s.pads[0]) + std::to_string(s.pads[1]) + std::to_string(s.pads[2]) +
                    std::to_string(s.pads[3]) + (s.bias ? "_bias" : "") + (s.sum ? "_sum" : "") +
                    (s.act.empty() ? "" : "_" + s.act);
    ir::Attributes a = activationAttrs(s.act);
    a.set("pads", s.pads);
    a.set("x_block", int64_t{8});
    a.set("y_block", int64_t{8});
    a.set("winograd", int64_t{1});
    const int64_t OH = s.H + s.pads[0] + s.pads[2] - 2, OW = s.W + s.pads[1] + s.pads[3] - 2;
    NDArray x = rnd({s.N, s.C, s.H, s.W}, n + "x", -2, 2);
    std::vector<NDArray> in{blockOf(x, 8), rnd({s.M, s.C, 3, 3}, n + "w")};
    std::vector<bool> constant{false, true};
    if (s.bias) {  // (every case with a residual sum has a bias)
      in.push_back(rnd({s.M}, n + "b"));
      constant.push_back(false);
    }
    if (s.sum) {
      in.push_back(blockOf(rnd({s.N, s.M, OH, OW}, n + "s"), 8));
      constant.push_back(false);
    }
    // F(4x4, 3x3)'s transforms (coefficients up to 8 and 1/24) lose more bits than the direct
    // sums: over 300 channels (2700 terms of ~1, outputs of ~30) an output near 1 is off by ~7e-4
    // (as with oneDNN's Winograd kernels, 2e-5 of the outputs' scale).
    add(n, OpCase{"FusedConv", in, a, 1, "ai.graft"}, constant, s.C > 64 ? 2e-3 : 1e-4);
    last().isa = support::CpuIsa::Avx2;
    if (s.act == "Relu" && !s.sum) {
      in[0] = blockOf(sprinkled(x), 8);
      add(n + "_special_values", OpCase{"FusedConv", in, a, 1, "ai.graft"}, constant);
      last().isa = support::CpuIsa::Avx2;
    }
  }
  // graft's bf16 Winograd kernel (winograd_bf16: bf16 sessions only; the matrix groups these, and
  // every other 3x3 stride-1 FusedConv case, under a bf16 backend with GRAFT_CONV_WINOGRAD=on):
  // channels last and 16-channel blocks, X and Y float32 or bf16 (the residual typed like Y),
  // channel counts that fill whole vectors and ones that leave a part (in and out), several 64-wide
  // panels and 128-channel slices, whole and partial 2x2 tiles, no / symmetric / asymmetric
  // padding, a batch small enough for one block shared by the threads and ones that run in blocks
  // (a thread each); NaN and infinities in X.
  struct Wb {
    int64_t N, C, M, H, W;
    Ints pads;
    bool blocked, xBf16, yBf16, sum;
    std::string act;
  };
  std::vector<Wb> winoBf16 = {
      {2, 32, 48, 9, 9, {1, 1, 1, 1}, false, true, true, true, "Relu"},
      {2, 32, 48, 9, 9, {1, 1, 1, 1}, false, false, false, false, ""},
      {2, 32, 48, 9, 9, {1, 1, 1, 1}, false, true, false, true, ""},
      {2, 32, 48, 9, 9, {1, 1, 1, 1}, false, false, true, false, "Relu"},
      {2, 32, 48, 8, 10, {1, 1, 1, 1}, true, true, true, true, "Relu"},
      {1, 32, 32, 7, 7, {1, 1, 1, 1}, true, false, false, false, ""},
      {1, 40, 40, 6, 11, {0, 0, 0, 0}, false, true, true, true, "Relu"},
      {1, 144, 80, 5, 5, {2, 1, 0, 2}, false, true, true, false, "Relu"},
      {2, 48, 64, 28, 28, {1, 1, 1, 1}, false, true, true, true, "Relu"},
      {2, 64, 144, 13, 27, {1, 1, 1, 1}, true, true, true, false, "Relu"},
  };
  for (const Wb& s : winoBf16) {
    std::string n = "FusedConv_winograd_bf16_N" + std::to_string(s.N) + "_C" + std::to_string(s.C) + "_M" +
                    std::to_string(s.M) + "_" + std::to_string(s.H) + "x" + std::to_string(s.W) + "_p" +
                    std::to_string(s.pads[0]) + std::to_string(s.pads[1]) + std::to_string(s.pads[2]) +
                    std::to_string(s.pads[3]) + (s.blocked ? "_b16" : "_nhwc") + (s.xBf16 ? "_xbf16" : "_xf32") +
                    (s.yBf16 ? "_ybf16" : "_yf32") + (s.sum ? "_sum" : "") + (s.act.empty() ? "" : "_" + s.act);
    const int64_t xb = s.blocked ? 16 : s.C, yb = s.blocked ? 16 : s.M;
    ir::Attributes a = activationAttrs(s.act);
    a.set("pads", s.pads);
    a.set("x_block", xb);
    a.set("y_block", yb);
    if (s.yBf16) a.set("y_dtype", static_cast<int64_t>(DataType::BFloat16));
    const int64_t OH = s.H + s.pads[0] + s.pads[2] - 2, OW = s.W + s.pads[1] + s.pads[3] - 2;
    NDArray x = blockOf(rnd({s.N, s.C, s.H, s.W}, n + "x", -2, 2), xb);
    std::vector<NDArray> in{s.xBf16 ? toBf16(x) : x, rnd({s.M, s.C, 3, 3}, n + "w"), rnd({s.M}, n + "b")};
    if (s.sum) {
      NDArray r = blockOf(rnd({s.N, s.M, OH, OW}, n + "s", -4, 4), yb);
      in.push_back(s.yBf16 ? toBf16(r) : r);
    }
    // bf16 activations: 1e-2, as the other bf16-activation cases (Y rounded to bf16).
    const double tol = s.yBf16 || s.xBf16 ? 1e-2 : 1e-4;
    add(n, OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false}, tol);
    if (s.act == "Relu" && s.N == 2 && s.H == 9) {
      NDArray xs = blockOf(sprinkled(rnd({s.N, s.C, s.H, s.W}, n + "x", -2, 2)), xb);
      in[0] = s.xBf16 ? toBf16(xs) : xs;
      add(n + "_special_values", OpCase{"FusedConv", in, a, 1, "ai.graft"}, {false, true, false, false}, tol);
    }
  }
  // graft's 1x1 convolution for AVX2 hosts (conv1x1_avx2: 8-channel blocks, under the AVX2 limit):
  // full and partial channel blocks in and out (a last panel of one block: 40 outputs), more
  // than one K block (600 inputs), images of 1 to 144 pixels (two pixel chunks), several images,
  // with and without bias, residual sum and Relu; NaN and infinities in X.
  struct P1 {
    int64_t N, C, M, H, W;
    bool bias, sum;
    std::string act;
  };
  std::vector<P1> pointwise = {
      {1, 8, 8, 4, 4, true, false, "Relu"},    {2, 20, 13, 5, 7, true, true, "Relu"},
      {1, 64, 40, 12, 12, true, false, ""},    {3, 600, 24, 3, 3, true, true, ""},
      {1, 16, 32, 1, 1, false, false, "Relu"},
  };
  for (const P1& s : pointwise) {
    std::string n = "FusedConv_1x1_avx2_N" + std::to_string(s.N) + "_C" + std::to_string(s.C) + "_M" +
                    std::to_string(s.M) + "_" + std::to_string(s.H) + "x" + std::to_string(s.W) +
                    (s.bias ? "_bias" : "") + (s.sum ? "_sum" : "") + (s.act.empty() ? "" : "_" + s.act);
    ir::Attributes a = activationAttrs(s.act);
    a.set("x_block", int64_t{8});
    a.set("y_block", int64_t{8});
    NDArray x = rnd({s.N, s.C, s.H, s.W}, n + "x", -2, 2);
    std::vector<NDArray> in{blockOf(x, 8), rnd({s.M, s.C, 1, 1}, n + "w")};
    std::vector<bool> constant{false, true};
    if (s.bias) {  // (every case with a residual sum has a bias)
      in.push_back(rnd({s.M}, n + "b"));
      constant.push_back(false);
    }
    if (s.sum) {
      in.push_back(blockOf(rnd({s.N, s.M, s.H, s.W}, n + "s"), 8));
      constant.push_back(false);
    }
    add(n, OpCase{"FusedConv", in, a, 1, "ai.graft"}, constant, s.C > 256 ? 3e-4 : 1e-4);
    last().isa = support::CpuIsa::Avx2;
    if (s.act == "Relu" && !s.sum) {
      in[0] = blockOf(sprinkled(x), 8);
      add(n + "_special_values", OpCase{"FusedConv", in, a, 1, "ai.graft"}, constant);
      last().isa = support::CpuIsa::Avx2;
    }
  }
  // graft's 1x1 convolution for AVX-512 hosts (conv1x1_avx512: channels last or 16-channel blocks,
  // at the host's ISA; it takes these under GRAFT_CONV_1X1=auto: at most 64 inputs, at least 48
  // outputs): a last panel of 1 to 4 vectors of outputs (M 80, 96, 112, 48 and 64, 256), images of
  // 1 to 225 pixels (a tail of every register block height; two pixel chunks), several images,
  // channels last with a channel count that is no multiple of 16 (20), with and without bias,
  // residual sum and Relu; NaN and infinities in X.
  struct P5 {
    int64_t N, C, M, H, W, block;  // block 0: channels last
    bool bias, sum;
    std::string act;
  };
  std::vector<P5> pointwise512 = {
      {1, 16, 48, 1, 1, 0, true, false, "Relu"},    {2, 20, 80, 5, 7, 0, true, true, "Relu"},
      {1, 64, 96, 15, 15, 16, true, false, "Relu"}, {3, 48, 112, 4, 6, 16, false, false, ""},
      {1, 32, 256, 12, 12, 0, true, true, ""},      {2, 64, 64, 7, 7, 16, true, true, "Relu"},
  };
  for (const P5& s : pointwise512) {
    std::string n = "FusedConv_1x1_avx512_N" + std::to_string(s.N) + "_C" + std::to_string(s.C) + "_M" +
                    std::to_string(s.M) + "_" + std::to_string(s.H) + "x" + std::to_string(s.W) +
                    (s.block ? "_blocked" : "_nhwc") + (s.bias ? "_bias" : "") + (s.sum ? "_sum" : "") +
                    (s.act.empty() ? "" : "_" + s.act);
    const int64_t xb = s.block ? s.block : s.C, yb = s.block ? s.block : s.M;
    ir::Attributes a = activationAttrs(s.act);
    a.set("x_block", xb);
    a.set("y_block", yb);
    NDArray x = rnd({s.N, s.C, s.H, s.W}, n + "x", -2, 2);
    std::vector<NDArray> in{blockOf(x, xb), rnd({s.M, s.C, 1, 1}, n + "w")};
    std::vector<bool> constant{false, true};
    if (s.bias) {  // (every case with a residual sum has a bias)
      in.push_back(rnd({s.M}, n + "b"));
      constant.push_back(false);
    }
    if (s.sum) {
      in.push_back(blockOf(rnd({s.N, s.M, s.H, s.W}, n + "s"), yb));
      constant.push_back(false);
    }
    add(n, OpCase{"FusedConv", in, a, 1, "ai.graft"}, constant);
    if (s.act == "Relu" && !s.sum) {
      in[0] = blockOf(sprinkled(x), xb);
      add(n + "_special_values", OpCase{"FusedConv", in, a, 1, "ai.graft"}, constant);
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

// ai.graft::FusedConvChain (onednn_conv_chain.cpp): the stages run tile by tile of output rows
// (tiles of kChainTileBytes a stage buffer: the 96-channel rows of 160 pixels below make tiles of
// a few rows, so every case has a top, middle and bottom tile), per image, on the pool's threads.
namespace {

struct ChainStage {
  int64_t M, k, stride, group;
  Ints pads;
  std::string act;
};

// A chain on X [N, C, H, W] (channels last), with a residual Sum on the last stage when `sum`.
void addChain(const std::string& n, const Shape& x, const std::vector<ChainStage>& stages, bool sum,
              bool special = false) {
  ir::Attributes a;
  a.set("stages", static_cast<int64_t>(stages.size()));
  int64_t C = x[1], H = x[2], W = x[3];
  NDArray xs = rnd(x, n + "x", -2, 2);
  std::vector<NDArray> in{blockOf(special ? sprinkled(xs) : xs, C), NDArray{}};
  for (size_t i = 0; i < stages.size(); ++i) {
    const ChainStage& s = stages[i];
    auto set = [&](const std::string& name, ir::AttrValue v) {
      a.set(ops::convChainAttrName(static_cast<int64_t>(i), name), std::move(v));
    };
    const ir::Attributes act = activationAttrs(s.act);
    for (const auto& [name, value] : act.all()) set(name, value);
    set("pads", s.pads);
    set("strides", Ints{s.stride, s.stride});
    set("group", s.group);
    set("kernel_shape", Ints{s.k, s.k});
    set("x_block", C);
    set("y_block", s.M);
    in.push_back(rnd({s.M, C / s.group, s.k, s.k}, n + "w" + std::to_string(i), -0.5, 0.5));
    in.push_back(rnd({s.M}, n + "b" + std::to_string(i)));
    H = (H + s.pads[0] + s.pads[2] - s.k) / s.stride + 1;
    W = (W + s.pads[1] + s.pads[3] - s.k) / s.stride + 1;
    C = s.M;
  }
  if (sum) in[1] = blockOf(rnd({x[0], C, H, W}, n + "s"), C);
  std::vector<bool> constant(in.size(), true);
  constant[0] = constant[1] = false;
  add(n, OpCase{"FusedConvChain", in, a, 1, "ai.graft"}, constant);
}

}  // namespace

void convChainCases() {
  const Ints p1{1, 1, 1, 1}, p0{0, 0, 0, 0};
  // mobilenet_v2's inverted residual: expansion, depthwise 3x3, projection with the block's input.
  for (int64_t N : {int64_t{1}, int64_t{2}, int64_t{3}})
    addChain("FusedConvChain_inverted_residual_b" + std::to_string(N), {N, 8, 18, 160},
             {{96, 1, 1, 1, p0, "Clip"}, {96, 3, 1, 96, p1, "Clip"}, {8, 1, 1, 1, p0, ""}}, true);
  // Stride 2 on odd rows, asymmetric padding; a post-op activation (LeakyRelu), one graft applies
  // after the primitive (Relu) and none.
  addChain("FusedConvChain_stride2_asym", {2, 8, 17, 160},
           {{96, 1, 1, 1, p0, "LeakyRelu"}, {96, 3, 2, 96, Ints{0, 1, 1, 1}, "Relu"}, {24, 1, 1, 1, p0, ""}}, false);
  // A dense spatial stage first (a stem), then a projection; a spatial stage last.
  addChain("FusedConvChain_stem", {1, 3, 77, 320}, {{32, 3, 2, 1, p1, "HardSwish"}, {16, 1, 1, 1, p0, "Relu"}}, false);
  addChain("FusedConvChain_spatial_last", {2, 16, 20, 160}, {{96, 1, 1, 1, p0, "Relu"}, {48, 3, 1, 1, p1, "Clip"}},
           true);
  // Two spatial stages (mobilenet_v2's stem and the depthwise convolution after it): the first
  // recomputes its halo rows for each tile; stride 2 in both, odd rows, asymmetric padding.
  addChain("FusedConvChain_two_spatial", {2, 3, 41, 640},
           {{32, 3, 2, 1, p1, "Clip"}, {32, 3, 1, 32, p1, "Relu"}, {16, 1, 1, 1, p0, ""}}, false);
  addChain("FusedConvChain_two_spatial_strided", {1, 8, 77, 256},
           {{48, 3, 2, 1, Ints{0, 1, 1, 1}, "Relu"}, {48, 3, 2, 48, Ints{1, 0, 1, 1}, "Clip"}, {8, 1, 1, 1, p0, ""}},
           false);
  // Pointwise only: every stage's rows are the tile's.
  addChain("FusedConvChain_pointwise", {2, 16, 12, 200}, {{128, 1, 1, 1, p0, "Clip"}, {8, 1, 1, 1, p0, "Relu"}}, true);
  // NaN and infinities in X: the activations applied after the primitive keep them as the
  // reference does.
  addChain("FusedConvChain_special_values", {2, 8, 18, 160},
           {{96, 1, 1, 1, p0, "Clip"}, {96, 3, 1, 96, p1, "Relu"}, {8, 1, 1, 1, p0, "Clip"}}, true, true);
  // A node whose inputs do not match its stages is refused by name.
  {
    ir::Attributes a;
    a.set("stages", int64_t{2});
    add("FusedConvChain_wrong_inputs",
        OpCase{"FusedConvChain",
               {blockOf(rnd({1, 4, 3, 3}, "cwx"), 4), NDArray{}, rnd({4, 4, 1, 1}, "cww"), rnd({4}, "cwb")},
               a,
               1,
               "ai.graft"},
        {false, false, true, true});
    last().expectError = "2 stages need 6 inputs";
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

}  // namespace graft::testing::cases
