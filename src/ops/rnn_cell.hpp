#pragma once
// The recurrent cells of RNN, GRU and LSTM, shared by their forward kernels (rnn.cpp) and their
// gradient ops (rnn_grad.cpp): attributes, reading and checking the inputs, one step forward
// (keeping what the backward pass needs) and one step backward. Everything is in double.
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "ops/kernel.hpp"

namespace graft::ops::rnn {

enum class Cell { Rnn, Gru, Lstm };

/// An activation function of the recurrent cells, with its alpha/beta parameters resolved.
struct Activation {
  enum class Kind { Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus };
  Kind kind = Kind::Tanh;
  double alpha = 0, beta = 0;

  double operator()(double x) const;
  /// The derivative at x (at a kink: the one-sided derivative of the branch operator() takes).
  double derivative(double x) const;
};

/// The attributes of an RNN, GRU or LSTM node, parsed and checked.
struct RnnParams {
  Cell cell = Cell::Rnn;
  int64_t gates = 1;        ///< gate blocks in W and R: 1 (RNN), 3 (GRU, zrh), 4 (LSTM, iofc)
  int64_t actsPerDir = 1;   ///< activation functions per direction: f; f, g; f, g, h
  int64_t hiddenSize = -1;  ///< -1: taken from R
  bool forward = true, reverse = false;
  int64_t numDirections = 1;
  std::vector<Activation> acts;  ///< actsPerDir per direction, direction 0 first
  std::optional<double> clip;
  bool batchFirst = false;  ///< layout == 1
  bool linearBeforeReset = false;
  bool inputForget = false;
  /// f = sigmoid, g = h = tanh in every direction: the defaults of GRU and LSTM.
  bool defaultActivations() const;
};

/// Parses the attributes of `n` (an RNN, GRU or LSTM node, or one of their gradient ops, which
/// carry the same attributes); throws graft::Error naming the node on bad values.
RnnParams parseParams(const ir::Node& n, Cell cell);

/// The parameters of an LSTM node (or of its LSTMGrad) that is ONNX's plain cell, the one graft's
/// own LSTM kernels compute: layout 0, no clip, no input_forget, the default activations.
/// nullopt for any other, and for invalid attributes (the reference kernel reports those).
std::optional<RnnParams> plainLstmParams(const ir::Node& n);

/// The inputs of a recurrent node (X, W, R, B, sequence_lens, initial_h, initial_c, P), read
/// from a kernel's inputs starting at `offset`, checked, and converted to double. Absent
/// optional inputs are empty vectors.
struct RnnInputs {
  int64_t S = 0, N = 0, I = 0, H = 0, D = 1, G = 1;
  DataType dtype = DataType::Float;
  std::vector<double> x, W, R, B, h0, c0, P;
  std::vector<int64_t> lens;  ///< valid steps per batch element (S when sequence_lens is absent)
  bool batchFirst = false;

  static RnnInputs read(const RnnParams& p, const KernelContext& k, size_t offset, const std::string& what);

  /// Offsets in the layouts of X, Y and the states.
  int64_t xAt(int64_t t, int64_t b) const { return (batchFirst ? b * S + t : t * N + b) * I; }
  int64_t yAt(int64_t t, int64_t d, int64_t b) const {
    return (batchFirst ? ((b * S + t) * D + d) : ((t * D + d) * N + b)) * H;
  }
  int64_t stateAt(int64_t d, int64_t b) const { return (batchFirst ? b * D + d : d * N + b) * H; }
  Shape yShape() const { return batchFirst ? Shape{N, S, D, H} : Shape{S, D, N, H}; }
  Shape stateShape() const { return batchFirst ? Shape{N, D, H} : Shape{D, N, H}; }
};

/// The weights of one direction, as row-major double matrices.
struct DirWeights {
  const double* W;   ///< [gates*H, I]
  const double* R;   ///< [gates*H, H]
  const double* Wb;  ///< [gates*H] or nullptr
  const double* Rb;  ///< [gates*H] or nullptr
  const double* P;   ///< [3*H] (i, o, f) or nullptr
  const Activation* acts;

  static DirWeights of(const RnnParams& p, const RnnInputs& in, int64_t d);
};

/// What one step computes, kept for its backward pass. Gate blocks are in W's order.
struct StepCache {
  std::vector<double> wx;    ///< W x + Wb, [gates*H]
  std::vector<double> rh;    ///< R h + Rb, [gates*H] (GRU, default: its h block is unused)
  std::vector<double> pre;   ///< each gate's input before clipping, [gates*H]
  std::vector<double> gate;  ///< each gate's activation, [gates*H]
  std::vector<double> rHid;  ///< GRU with linear_before_reset 0: r (.) h, the input of R_h
};

/// One step from state (h, c) and input row xt to (hNew, cNew); fills `s`.
void cellForward(const RnnParams& p, const DirWeights& w, int64_t H, int64_t I, const double* xt,
                 const std::vector<double>& h, const std::vector<double>& c, std::vector<double>& hNew,
                 std::vector<double>& cNew, StepCache& s);

/// Gradient accumulators of one direction (same layouts as DirWeights; dWb/dRb/dP may be null).
struct DirGrads {
  double* dW;
  double* dR;
  double* dWb;
  double* dRb;
  double* dP;
};

/// The backward pass of one step run by cellForward from (h, c) with input xt and cache s: dh
/// and dc hold the gradients of hNew and cNew on entry and those of h and c on return; the
/// gradients of the weights are added to g and that of xt to dxt.
void cellBackward(const RnnParams& p, const DirWeights& w, int64_t H, int64_t I, const double* xt,
                  const std::vector<double>& h, const std::vector<double>& c, const std::vector<double>& cNew,
                  const StepCache& s, std::vector<double>& dh, std::vector<double>& dc, const DirGrads& g, double* dxt);

}  // namespace graft::ops::rnn
