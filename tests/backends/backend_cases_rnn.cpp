// Backend matrix cases (backend_cases.hpp): recurrent cells (RNN, GRU, LSTM) forward, their
// gradients, LSTMTrain.
#include "backend_cases.hpp"

#include <cmath>

namespace graft::testing::cases {

namespace {

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

}  // namespace

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
  // bidirectional cases with and without the optional inputs. The two before it give LSTMGrad's
  // own step product at batch 1 and 3 whole column chunks (256 and 80 columns in the AVX-512
  // variant, 128 and 40 in the AVX2 one) and a ragged rest, on every thread.
  for (const S& sh : {S{5, 3, 4, 6}, S{7, 1, 9, 16}, S{6, 5, 8, 33}, S{4, 8, 16, 64}, S{3, 1, 5, 300}, S{3, 3, 4, 170},
                      S{3, 8, 8, 500}})
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int variant = 0; variant < 3; ++variant) {
        // variant 0: bias, initial states, every output gradient; 1: nothing optional, dY only;
        // 2: bias and initial_h, dY_h and dY_c only.
        const int64_t T = sh.T, N = sh.N, I = sh.I, H = sh.H;
        if (H >= 170 && (std::string(dir) != "bidirectional" || variant == 2)) continue;
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
        last().derive = [forward](std::vector<NDArray>& v) { v.back() = forward(v).at(0); };
        c.inputs.push_back(forward(in).at(3));
        add("LSTMGrad_from_saved_" + shape, c, {}, 1e-5);
        last().derive = [forward](std::vector<NDArray>& v) {
          std::vector<NDArray> f = forward(v);
          v[v.size() - 2] = f.at(0);
          v.back() = f.at(3);
        };
        OpCase train{"LSTMTrain", fwd, a, 4};
        train.domain = "ai.graft";
        add("LSTMTrain_" + shape, train, {}, 1e-5);
      }
}

}  // namespace graft::testing::cases
