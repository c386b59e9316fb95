// Backend matrix cases (backend_cases.hpp): MatMul, Gemm and their fused forms.
#include "backend_cases.hpp"

#include <cmath>

namespace graft::testing::cases {

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
  // Sizes for the AVX2 sgemm (sgemm_avx2: N >= 512, 6 <= M <= 512): M, N, K not multiples of its 6x16 register
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
      // 513 to 1023 columns (35 panels: column chunks of equal width over the threads), and
      // M = 7 to 9 past a multiple of 6 (register blocks of 4 + 3, 4 + 4 and 5 + 4 rows).
      {{19, 45}, {45, 557}, {557}, 0, 0, 1, 1, true},
      {{20, 33}, {700, 33}, {20, 1}, 0, 1, 1, 1, false},
      {{21, 130}, {130, 1000}, {1000}, 0, 0, 1, 1, false},
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
        last().isa = isa;
        if (g.relu) {
          c.inputs[0] = sprinkled(c.inputs[0]);
          add(n + "_special_values", c, {false, constb, constb});
          last().isa = isa;
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
        last().isa = isa;
      }
    }
  };
  addMatMuls("SgemmMatMul_", smm, support::CpuIsa::Avx2);
  // Activations other than Relu (applied after the product, as graft's own pass over Y; bert4's
  // GeluErf), with NaN and infinities in A: a constant B, 37 x 29 x 1045 rows of A merged.
  for (const std::string& act : kActivations) {
    if (act.empty() || act == "Relu") continue;
    std::string n = "SgemmMatMul_act_" + act;
    OpCase c{"FusedMatMul",
             {rnd({2, 37, 29}, n + "a", -2, 2), rnd({29, 1045}, n + "b"), rnd({1045}, n + "c")},
             activationAttrs(act),
             1,
             "ai.graft"};
    add(n, c, {false, true, true});
    last().isa = support::CpuIsa::Avx2;
    c.inputs[0] = sprinkled(c.inputs[0]);
    add(n + "_special_values", c, {false, true, true});
    last().isa = support::CpuIsa::Avx2;
  }
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

}  // namespace graft::testing::cases
