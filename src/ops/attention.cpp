// Transformer ops of opsets 23-25: RotaryEmbedding and Attention. The reference kernels work in
// double, one (batch, head, query) row at a time; shapes follow the ONNX operator spec.
#include <cmath>
#include <limits>
#include <optional>

#include "ops/dtype_dispatch.hpp"
#include "ops/fallback_infer.hpp"
#include "ops/index_util.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"

namespace graft::ops {
namespace {

// ---- RotaryEmbedding -----------------------------------------------------------------------------

// X is [B, H, S, D] or [B, S, H * D] (num_heads given). The first rotary_embedding_dim (default D)
// elements of each head vector rotate in pairs, (2i, 2i + 1) when interleaved, (i, i + rd/2)
// otherwise, by the angle whose cos/sin the caches hold: cache[position_ids[b, s]] (caches
// [max_position, rd/2]) or, without position_ids, cache[b, s] (caches [B, S, rd/2]).
KernelFn rotaryKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
  bool interleaved = n.attrInt("interleaved", 0) != 0;
  int64_t numHeadsAttr = n.attrInt("num_heads", 0);
  int64_t rotaryAttr = n.attrInt("rotary_embedding_dim", 0);
  return [=](KernelContext& k) {
    const NDArray& x = k.input(0);
    GRAFT_CHECK(x.rank() == 3 || x.rank() == 4, "{}: input must be [B, H, S, D] or [B, S, hidden], got {}", what,
                shapeToString(x.shape()));
    int64_t B = x.dim(0), H, S, D;
    bool fourD = x.rank() == 4;
    if (fourD) {
      H = x.dim(1), S = x.dim(2), D = x.dim(3);
    } else {
      GRAFT_CHECK(numHeadsAttr > 0, "{}: a 3-D input needs the num_heads attribute", what);
      GRAFT_CHECK(x.dim(2) % numHeadsAttr == 0, "{}: hidden size {} is not a multiple of num_heads = {}", what,
                  x.dim(2), numHeadsAttr);
      H = numHeadsAttr, S = x.dim(1), D = x.dim(2) / numHeadsAttr;
    }
    int64_t rd = rotaryAttr == 0 ? D : rotaryAttr;
    GRAFT_CHECK(rd > 0 && rd <= D && rd % 2 == 0, "{}: rotary_embedding_dim must be even and in (0, {}], got {}", what,
                D, rd);
    int64_t half = rd / 2;
    const NDArray& cosC = k.input(1);
    const NDArray& sinC = k.input(2);
    GRAFT_CHECK(cosC.shape() == sinC.shape(), "{}: cos_cache {} and sin_cache {} must have the same shape", what,
                shapeToString(cosC.shape()), shapeToString(sinC.shape()));
    GRAFT_CHECK(cosC.rank() >= 1 && cosC.shape().back() == half,
                "{}: the caches' last dimension must be rotary_embedding_dim / 2 = {}, got shape {}", what, half,
                shapeToString(cosC.shape()));
    std::vector<int64_t> rows(static_cast<size_t>(B * S));
    if (k.hasInput(3)) {
      const NDArray& pos = k.input(3);
      GRAFT_CHECK(pos.shape() == Shape({B, S}), "{}: position_ids must have shape [{}, {}], got {}", what, B, S,
                  shapeToString(pos.shape()));
      GRAFT_CHECK(cosC.rank() == 2, "{}: with position_ids the caches must be [max_position, {}], got {}", what, half,
                  shapeToString(cosC.shape()));
      auto p = readIndexTensor(pos, what, "position_ids");
      for (size_t i = 0; i < p.size(); ++i) {
        GRAFT_CHECK(p[i] >= 0 && p[i] < cosC.dim(0), "{}: position id {} is out of range [0, {})", what, p[i],
                    cosC.dim(0));
        rows[i] = p[i];
      }
    } else {
      GRAFT_CHECK(cosC.shape() == Shape({B, S, half}),
                  "{}: without position_ids the caches must be [{}, {}, {}], got {}", what, B, S, half,
                  shapeToString(cosC.shape()));
      for (int64_t i = 0; i < B * S; ++i) rows[i] = i;
    }
    auto xs = readAsDoubles(x, what), cs = readAsDoubles(cosC, what), ss = readAsDoubles(sinC, what);
    std::vector<double> ys = xs;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s) {
          int64_t base = fourD ? ((b * H + h) * S + s) * D : ((b * S + s) * H + h) * D;
          const double* cr = cs.data() + rows[b * S + s] * half;
          const double* sr = ss.data() + rows[b * S + s] * half;
          for (int64_t i = 0; i < half; ++i) {
            int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
            double x1 = xs[base + i1], x2 = xs[base + i2];
            ys[base + i1] = cr[i] * x1 - sr[i] * x2;
            ys[base + i2] = sr[i] * x1 + cr[i] * x2;
          }
        }
    k.setOutput(0, arrayFromDoubles(ys, x.dtype(), x.shape(), what));
  };
}

// ---- Attention -----------------------------------------------------------------------------------

struct AttentionAttrs {
  bool causal = false;
  int64_t qHeads = 0, kvHeads = 0, mode = 0, left = -1, right = -1;
  double softcap = 0;
  bool hasScale = false;
  double scale = 0;
};

// A [B, H, S, D] view of a 3-D [B, S, H * D] or 4-D [B, H, S, D] tensor's values.
struct HeadView {
  std::vector<double> v;
  int64_t B = 0, H = 0, S = 0, D = 0;
  bool fourD = true;
  double at(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return fourD ? v[((b * H + h) * S + s) * D + d] : v[((b * S + s) * H + h) * D + d];
  }
};

HeadView headView(const NDArray& a, int64_t heads, const std::string& what, const char* name) {
  HeadView h;
  h.v = readAsDoubles(a, what);
  h.fourD = a.rank() == 4;
  if (h.fourD) {
    h.B = a.dim(0), h.H = a.dim(1), h.S = a.dim(2), h.D = a.dim(3);
  } else {
    GRAFT_CHECK(a.rank() == 3, "{}: {} must be 3-D or 4-D, got {}", what, name, shapeToString(a.shape()));
    GRAFT_CHECK(heads > 0 && a.dim(2) % heads == 0, "{}: {}'s hidden size {} must be a multiple of its head count ({})",
                what, name, a.dim(2), heads);
    h.B = a.dim(0), h.S = a.dim(1), h.H = heads, h.D = a.dim(2) / heads;
  }
  return h;
}

// Appends `cur` (a HeadView) to `past` ([B, H, P, D]) along the sequence: the present cache.
HeadView withPast(const HeadView& cur, const NDArray* past, const std::string& what, const char* name) {
  if (!past) {
    if (cur.fourD) return cur;
  }
  HeadView out;
  out.fourD = true;
  out.B = cur.B, out.H = cur.H, out.D = cur.D;
  int64_t P = 0;
  std::vector<double> pv;
  if (past) {
    GRAFT_CHECK(past->rank() == 4 && past->dim(0) == cur.B && past->dim(1) == cur.H && past->dim(3) == cur.D,
                "{}: {} must have shape [{}, {}, past_len, {}], got {}", what, name, cur.B, cur.H, cur.D,
                shapeToString(past->shape()));
    P = past->dim(2);
    pv = readAsDoubles(*past, what);
  }
  out.S = P + cur.S;
  out.v.resize(static_cast<size_t>(out.B * out.H * out.S * out.D));
  for (int64_t b = 0; b < out.B; ++b)
    for (int64_t h = 0; h < out.H; ++h)
      for (int64_t s = 0; s < out.S; ++s)
        for (int64_t d = 0; d < out.D; ++d)
          out.v[((b * out.H + h) * out.S + s) * out.D + d] =
              s < P ? pv[((b * out.H + h) * P + s) * out.D + d] : cur.at(b, h, s - P, d);
  return out;
}

AttentionAttrs attentionAttrs(const ir::Node& n, const std::string& what) {
  AttentionAttrs a;
  a.causal = n.attrInt("is_causal", 0) != 0;
  a.qHeads = n.attrInt("q_num_heads", 0);
  a.kvHeads = n.attrInt("kv_num_heads", 0);
  a.mode = n.attrInt("qk_matmul_output_mode", 0);
  a.left = n.attrInt("left_window_size", -1);
  a.right = n.attrInt("right_window_size", -1);
  a.softcap = n.attrFloat("softcap", 0.0f);
  a.hasScale = n.attrs().has("scale");
  if (a.hasScale) a.scale = n.attrFloat("scale");
  GRAFT_CHECK(a.mode >= 0 && a.mode <= 3, "{}: qk_matmul_output_mode must be 0..3, got {}", what, a.mode);
  GRAFT_CHECK(a.left >= -1 && a.right >= -1, "{}: window sizes must be -1 or >= 0, got left {} right {}", what, a.left,
              a.right);
  return a;
}

// One Attention application with its inputs read (shared by the forward and gradient kernels).
// `first` is the index of Q among the kernel's inputs; Q, K, V, attn_mask, past_key, past_value,
// nonpad_kv_seqlen follow in the ONNX order.
struct AttentionProblem {
  AttentionAttrs a;
  HeadView q, k, v;  // k and v include the past
  int64_t B = 0, Hq = 0, Sq = 0, Dq = 0, Hkv = 0, Skv = 0, Dv = 0, past = 0, Lm = 0;
  double scale = 1;
  bool hasMask = false;
  std::vector<double> mask;
  std::vector<int64_t> maskStrides, nonpad;

  AttentionProblem(const AttentionAttrs& attrs, KernelContext& kc, size_t first, const std::string& what) : a(attrs) {
    const NDArray& qa = kc.input(first);
    const NDArray& ka = kc.input(first + 1);
    const NDArray& va = kc.input(first + 2);
    GRAFT_CHECK(qa.rank() == ka.rank() && qa.rank() == va.rank(),
                "{}: Q, K and V must have the same rank, got {}, {}, {}", what, qa.rank(), ka.rank(), va.rank());
    bool hasPastK = kc.hasInput(first + 4), hasPastV = kc.hasInput(first + 5), hasNonpad = kc.hasInput(first + 6);
    GRAFT_CHECK(hasPastK == hasPastV, "{}: past_key and past_value must be given together", what);
    GRAFT_CHECK(!(hasNonpad && hasPastK), "{}: nonpad_kv_seqlen cannot be combined with past_key/past_value", what);
    q = headView(qa, a.qHeads, what, "Q");
    k = withPast(headView(ka, a.kvHeads, what, "K"), hasPastK ? &kc.input(first + 4) : nullptr, what, "past_key");
    v = withPast(headView(va, a.kvHeads, what, "V"), hasPastV ? &kc.input(first + 5) : nullptr, what, "past_value");
    B = q.B, Hq = q.H, Sq = q.S, Dq = q.D, Hkv = k.H, Skv = k.S, Dv = v.D;
    past = hasPastK ? kc.input(first + 4).dim(2) : 0;
    GRAFT_CHECK(k.B == B && v.B == B, "{}: Q, K and V must have the same batch size", what);
    GRAFT_CHECK(k.D == Dq, "{}: K's head size {} must equal Q's {}", what, k.D, Dq);
    GRAFT_CHECK(v.H == Hkv && v.S == Skv, "{}: V must have K's heads and sequence length", what);
    GRAFT_CHECK(Hkv > 0 && Hq % Hkv == 0, "{}: Q's {} heads must be a multiple of K's {} heads", what, Hq, Hkv);
    scale = a.hasScale ? a.scale : 1.0 / std::sqrt(static_cast<double>(Dq));
    // The additive bias from attn_mask: [.., Sq, Lm] broadcast over [B, Hq]; keys past Lm are masked.
    hasMask = kc.hasInput(first + 3);
    if (hasMask) {
      const NDArray& m = kc.input(first + 3);
      GRAFT_CHECK(m.rank() >= 1 && m.rank() <= 4, "{}: attn_mask must have rank 1 to 4, got {}", what,
                  shapeToString(m.shape()));
      Lm = m.shape().back();
      GRAFT_CHECK(Lm <= Skv, "{}: attn_mask's last dimension {} exceeds the total key length {}", what, Lm, Skv);
      Shape target{B, Hq, Sq, Lm};
      GRAFT_CHECK(broadcastShapes(m.shape(), target, what) == target,
                  "{}: attn_mask of shape {} does not broadcast to {}", what, shapeToString(m.shape()),
                  shapeToString(target));
      maskStrides = broadcastStrides(m.shape(), target);
      if (m.dtype() == DataType::Bool) {
        mask.resize(static_cast<size_t>(m.numel()));
        for (int64_t i = 0; i < m.numel(); ++i) mask[i] = m.data<bool>()[i] ? 0.0 : kNegInf();
      } else {
        mask = readAsDoubles(m, what);
      }
    }
    if (hasNonpad) {
      nonpad = readIndexTensor(kc.input(first + 6), what, "nonpad_kv_seqlen");
      GRAFT_CHECK(static_cast<int64_t>(nonpad.size()) == B, "{}: nonpad_kv_seqlen must have {} values, got {}", what, B,
                  nonpad.size());
    }
  }

  static double kNegInf() { return -std::numeric_limits<double>::infinity(); }

  // For query (b, h, i): pre[j] = scale q.k_j (before softcap), s[j] (after softcap), t[j] = s + bias,
  // p[j] = softmax(t) (all 0 for a row whose keys are all masked).
  void row(int64_t b, int64_t h, int64_t i, std::vector<double>& pre, std::vector<double>& s, std::vector<double>& t,
           std::vector<double>& p) const {
    int64_t hk = h / (Hq / Hkv);
    // The causal and window frontier: query i sits at absolute position i + offset.
    int64_t offset = nonpad.empty() ? past : nonpad[b] - Sq;
    double mx = kNegInf();
    for (int64_t j = 0; j < Skv; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < Dq; ++d) dot += q.at(b, h, i, d) * k.at(b, hk, j, d);
      pre[j] = dot * scale;
      s[j] = a.softcap > 0 ? a.softcap * std::tanh(pre[j] / a.softcap) : pre[j];
      double bj = 0;
      if (hasMask)
        bj = j < Lm ? mask[b * maskStrides[0] + h * maskStrides[1] + i * maskStrides[2] + j * maskStrides[3]]
                    : kNegInf();
      int64_t diff = i + offset - j;
      if (a.causal && diff < 0) bj = kNegInf();
      if (a.left >= 0 && diff > a.left) bj = kNegInf();
      if (a.right >= 0 && -diff > a.right) bj = kNegInf();
      if (!nonpad.empty() && j >= nonpad[b]) bj = kNegInf();
      t[j] = s[j] + bj;
      mx = std::max(mx, t[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < Skv; ++j) {
      p[j] = mx == kNegInf() ? 0.0 : std::exp(t[j] - mx);
      sum += p[j];
    }
    for (int64_t j = 0; j < Skv; ++j) p[j] = sum > 0 ? p[j] / sum : 0.0;
  }

  // Flat offset of (b, h, i, d) in Q's (and Y's) layout, 3-D or 4-D, for head size `D`.
  size_t qAt(int64_t b, int64_t h, int64_t i, int64_t d, int64_t D) const {
    return q.fourD ? static_cast<size_t>(((b * Hq + h) * Sq + i) * D + d)
                   : static_cast<size_t>(((b * Sq + i) * Hq + h) * D + d);
  }
};

KernelFn attentionKernel(CompileContext& c) {
  std::string what = c.node().describe();
  AttentionAttrs attrs = attentionAttrs(c.node(), what);
  return [=](KernelContext& kc) {
    AttentionProblem pr(attrs, kc, 0, what);
    int64_t B = pr.B, Hq = pr.Hq, Sq = pr.Sq, Hkv = pr.Hkv, Skv = pr.Skv, Dv = pr.Dv;
    std::vector<double> y(static_cast<size_t>(B * Hq * Sq * Dv)), qk(static_cast<size_t>(B * Hq * Sq * Skv));
    std::vector<double> pre(Skv), s(Skv), t(Skv), p(Skv);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < Sq; ++i) {
          pr.row(b, h, i, pre, s, t, p);
          int64_t hk = h / (Hq / Hkv);
          double* qkRow = qk.data() + ((b * Hq + h) * Sq + i) * Skv;
          for (int64_t j = 0; j < Skv; ++j) qkRow[j] = attrs.mode == 3 ? p[j] : attrs.mode == 2 ? t[j] : s[j];
          for (int64_t d = 0; d < Dv; ++d) {
            double acc = 0;
            for (int64_t j = 0; j < Skv; ++j) acc += p[j] * pr.v.at(b, hk, j, d);
            y[pr.qAt(b, h, i, d, Dv)] = acc;  // 3-D inputs give a 3-D output [B, Sq, Hq * Dv]
          }
        }
    const NDArray& qa = kc.input(0);
    Shape yShape = pr.q.fourD ? Shape{B, Hq, Sq, Dv} : Shape{B, Sq, Hq * Dv};
    kc.setOutput(0, arrayFromDoubles(y, qa.dtype(), yShape, what));
    if (kc.wantsOutput(1)) kc.setOutput(1, arrayFromDoubles(pr.k.v, kc.input(1).dtype(), {B, Hkv, Skv, pr.k.D}, what));
    if (kc.wantsOutput(2)) kc.setOutput(2, arrayFromDoubles(pr.v.v, kc.input(2).dtype(), {B, Hkv, Skv, Dv}, what));
    if (kc.wantsOutput(3)) kc.setOutput(3, arrayFromDoubles(qk, qa.dtype(), {B, Hq, Sq, Skv}, what));
  };
}

// ai.graft AttentionGrad: inputs dY, dPresentKey, dPresentValue, dQK (each optional but dY), then
// Attention's seven inputs; outputs dQ, dK, dV, dPastKey, dPastValue in the layouts of Q, K, V,
// past_key and past_value. Recomputes the attention weights row by row:
//   dp = dY.V (+ dQK, mode 3), dt = p (dp - sum(p dp)), ds = dt (+ dQK, modes 0-2),
//   dpre = ds (1 - tanh^2(pre / softcap)) with a softcap, dQ = scale dpre.K, dK = scale dpre^T Q,
//   dV = p^T dY.
KernelFn attentionGradKernel(CompileContext& c) {
  std::string what = c.node().describe();
  AttentionAttrs attrs = attentionAttrs(c.node(), what);
  return [=](KernelContext& kc) {
    AttentionProblem pr(attrs, kc, 4, what);
    int64_t B = pr.B, Hq = pr.Hq, Sq = pr.Sq, Dq = pr.Dq, Hkv = pr.Hkv, Skv = pr.Skv, Dv = pr.Dv, P = pr.past;
    auto dy = readAsDoubles(kc.input(0), what);
    GRAFT_CHECK(static_cast<int64_t>(dy.size()) == B * Hq * Sq * Dv, "{}: dY has {} elements, expected {}", what,
                dy.size(), B * Hq * Sq * Dv);
    std::vector<double> dqk;
    if (kc.hasInput(3)) dqk = readAsDoubles(kc.input(3), what);
    // dK, dV over the whole present cache [B, Hkv, Skv, D], seeded with the present outputs' gradients.
    std::vector<double> dk(static_cast<size_t>(B * Hkv * Skv * Dq), 0.0),
        dv(static_cast<size_t>(B * Hkv * Skv * Dv), 0.0);
    if (kc.hasInput(1)) dk = readAsDoubles(kc.input(1), what);
    if (kc.hasInput(2)) dv = readAsDoubles(kc.input(2), what);
    GRAFT_CHECK(
        static_cast<int64_t>(dk.size()) == B * Hkv * Skv * Dq && static_cast<int64_t>(dv.size()) == B * Hkv * Skv * Dv,
        "{}: the present caches' gradients have the wrong sizes", what);
    std::vector<double> dq(static_cast<size_t>(B * Hq * Sq * Dq), 0.0);
    std::vector<double> pre(Skv), s(Skv), t(Skv), p(Skv), dp(Skv), ds(Skv);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < Sq; ++i) {
          pr.row(b, h, i, pre, s, t, p);
          int64_t hk = h / (Hq / Hkv);
          const double* dqkRow = dqk.empty() ? nullptr : dqk.data() + ((b * Hq + h) * Sq + i) * Skv;
          double dot = 0;
          for (int64_t j = 0; j < Skv; ++j) {
            double acc = 0;
            for (int64_t d = 0; d < Dv; ++d) acc += dy[pr.qAt(b, h, i, d, Dv)] * pr.v.at(b, hk, j, d);
            if (dqkRow && attrs.mode == 3) acc += dqkRow[j];
            dp[j] = acc;
            dot += p[j] * acc;
          }
          for (int64_t j = 0; j < Skv; ++j) {
            double g = p[j] * (dp[j] - dot);
            if (dqkRow && attrs.mode != 3) g += dqkRow[j];
            if (attrs.softcap > 0) {
              double th = std::tanh(pre[j] / attrs.softcap);
              g *= 1 - th * th;
            }
            ds[j] = g * pr.scale;
          }
          for (int64_t j = 0; j < Skv; ++j) {
            for (int64_t d = 0; d < Dq; ++d) {
              dq[pr.qAt(b, h, i, d, Dq)] += ds[j] * pr.k.at(b, hk, j, d);
              dk[((b * Hkv + hk) * Skv + j) * Dq + d] += ds[j] * pr.q.at(b, h, i, d);
            }
            for (int64_t d = 0; d < Dv; ++d)
              dv[((b * Hkv + hk) * Skv + j) * Dv + d] += p[j] * dy[pr.qAt(b, h, i, d, Dv)];
          }
        }
    kc.setOutput(0, arrayFromDoubles(dq, kc.input(4).dtype(), kc.input(4).shape(), what));
    // Split the present-cache gradients into the past part and the current K/V (in their layout).
    auto split = [&](const std::vector<double>& full, int64_t D, size_t curIn, size_t out, size_t pastOut) {
      const NDArray& cur = kc.input(curIn);
      int64_t S = Skv - P;
      std::vector<double> cv(static_cast<size_t>(B * Hkv * S * D)), pv(static_cast<size_t>(B * Hkv * P * D));
      bool fourD = cur.rank() == 4;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hkv; ++h)
          for (int64_t j = 0; j < Skv; ++j)
            for (int64_t d = 0; d < D; ++d) {
              double g = full[((b * Hkv + h) * Skv + j) * D + d];
              if (j < P) {
                pv[((b * Hkv + h) * P + j) * D + d] = g;
              } else {
                int64_t jj = j - P;
                cv[fourD ? ((b * Hkv + h) * S + jj) * D + d : ((b * S + jj) * Hkv + h) * D + d] = g;
              }
            }
      kc.setOutput(out, arrayFromDoubles(cv, cur.dtype(), cur.shape(), what));
      if (kc.wantsOutput(pastOut) && P > 0)
        kc.setOutput(pastOut, arrayFromDoubles(pv, cur.dtype(), {B, Hkv, P, D}, what));
    };
    split(dk, Dq, 5, 1, 3);
    split(dv, Dv, 6, 2, 4);
  };
}

}  // namespace

GRAFT_REGISTER_OPS(attention) {
  r.add("RotaryEmbedding").setReference(rotaryKernel).noGradient({1, 2, 3});
  r.add("Attention").setReference(attentionKernel).noGradient({3, 6});
  // Its gradient op: outputs shaped like Q, K, V, past_key, past_value (inputs 4 to 9).
  r.add("AttentionGrad", kGraftDomain)
      .setReference(attentionGradKernel)
      .setInfer([](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        const size_t from[] = {4, 5, 6, 8, 9};  // Q, K, V, past_key, past_value
        std::vector<ir::ValueType> out;
        for (size_t i = 0; i < n.numOutputs() && i < 5; ++i)
          out.push_back(from[i] < in.size() ? in[from[i]] : ir::ValueType{});
        return out;
      });
  // Until the linked onnx has their schemas (opset > 17).
  setFallbackInfer("", "RotaryEmbedding", sameTypeAsInput(0));
  setFallbackInfer(
      "", "Attention", [](const ir::Node& n, const std::vector<ir::ValueType>& in, const std::vector<const NDArray*>&) {
        std::vector<ir::ValueType> out(n.numOutputs(), ir::ValueType::tensor(TensorInfo{}));
        auto shapeOf = [&](size_t i) -> std::optional<Shape> {
          if (i >= in.size() || !in[i].info.isStatic()) return std::nullopt;
          return in[i].info.shape();
        };
        auto q = shapeOf(0), k = shapeOf(1), v = shapeOf(2);
        if (!q || !k || !v || q->size() != k->size() || q->size() != v->size()) return out;
        DataType dt = in[0].info.dataType();
        bool four = q->size() == 4;
        int64_t qh = n.attrInt("q_num_heads", 0), kvh = n.attrInt("kv_num_heads", 0);
        if (!four && (qh <= 0 || kvh <= 0)) return out;
        int64_t B = (*q)[0], Hq = four ? (*q)[1] : qh, Sq = four ? (*q)[2] : (*q)[1];
        int64_t Hkv = four ? (*k)[1] : kvh, Dk = four ? (*k)[3] : (*k)[2] / kvh, Dv = four ? (*v)[3] : (*v)[2] / kvh;
        int64_t S = (four ? (*k)[2] : (*k)[1]) + (shapeOf(4) && shapeOf(4)->size() == 4 ? (*shapeOf(4))[2] : 0);
        out[0] = ir::ValueType::tensor(TensorInfo(dt, four ? Shape{B, Hq, Sq, Dv} : Shape{B, Sq, Hq * Dv}));
        if (out.size() > 1) out[1] = ir::ValueType::tensor(TensorInfo(in[1].info.dataType(), Shape{B, Hkv, S, Dk}));
        if (out.size() > 2) out[2] = ir::ValueType::tensor(TensorInfo(in[2].info.dataType(), Shape{B, Hkv, S, Dv}));
        if (out.size() > 3) out[3] = ir::ValueType::tensor(TensorInfo(dt, Shape{B, Hq, Sq, S}));
        return out;
      });
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"

namespace graft::ops {

GRAFT_REGISTER_OPS(attention_vjp) {
  // Q, K, V and the past caches; the mask and nonpad_kv_seqlen carry none.
  r.add("Attention").setVjp([](GradBuilder& g) {
    const ir::Node& n = g.node();
    std::vector<ir::Tensor*> ins{g.dy(0), g.hasDy(1) ? g.dy(1) : nullptr, g.hasDy(2) ? g.dy(2) : nullptr,
                                 g.hasDy(3) ? g.dy(3) : nullptr};
    for (size_t i = 0; i < 7; ++i) ins.push_back(i < n.numInputs() ? g.in(i) : nullptr);
    size_t outs = n.numInputs() > 5 && g.in(4) ? 5 : 3;
    auto d = g.opN("AttentionGrad", ins, outs, n.attrs(), kGraftDomain);
    for (size_t i = 0; i < outs; ++i) {
      size_t input = i < 3 ? i : i + 1;  // dPastKey, dPastValue are inputs 4 and 5
      if (g.wants(input)) g.setDx(input, d[i]);
    }
  });
  // Each rotated pair is multiplied by an orthogonal 2x2 matrix; its transpose is the rotation by
  // the opposite angle: dX = RotaryEmbedding(dY, cos, -sin). The caches are treated as constants.
  r.add("RotaryEmbedding").setVjp([](GradBuilder& g) {
    std::vector<ir::Tensor*> ins{g.dy(), g.in(1), g.neg(g.in(2))};
    if (g.node().numInputs() > 3 && g.in(3)) ins.push_back(g.in(3));
    g.setDx(0, g.op("RotaryEmbedding", ins, g.node().attrs()));
  });
}

}  // namespace graft::ops
