// Transformer ops of opsets 23-25: RotaryEmbedding and Attention. The reference kernels work in
// double, one (batch, head, query) row at a time; shapes follow the ONNX operator spec.
#include <cmath>
#include <limits>

#include "ops/dtype_dispatch.hpp"
#include "ops/index_util.hpp"
#include "ops/fallback_infer.hpp"
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

KernelFn attentionKernel(CompileContext& c) {
  const ir::Node& n = c.node();
  std::string what = n.describe();
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
  return [=](KernelContext& k) {
    const NDArray& qa = k.input(0);
    const NDArray& ka = k.input(1);
    const NDArray& va = k.input(2);
    GRAFT_CHECK(qa.rank() == ka.rank() && qa.rank() == va.rank(),
                "{}: Q, K and V must have the same rank, got {}, {}, {}", what, qa.rank(), ka.rank(), va.rank());
    GRAFT_CHECK(k.hasInput(4) == k.hasInput(5), "{}: past_key and past_value must be given together", what);
    GRAFT_CHECK(!(k.hasInput(6) && k.hasInput(4)), "{}: nonpad_kv_seqlen cannot be combined with past_key/past_value",
                what);
    HeadView q = headView(qa, a.qHeads, what, "Q");
    HeadView kk = withPast(headView(ka, a.kvHeads, what, "K"), k.hasInput(4) ? &k.input(4) : nullptr, what, "past_key");
    HeadView vv =
        withPast(headView(va, a.kvHeads, what, "V"), k.hasInput(5) ? &k.input(5) : nullptr, what, "past_value");
    int64_t B = q.B, Hq = q.H, Sq = q.S, Dq = q.D, Hkv = kk.H, Skv = kk.S, Dv = vv.D;
    int64_t past = k.hasInput(4) ? k.input(4).dim(2) : 0;
    GRAFT_CHECK(kk.B == B && vv.B == B, "{}: Q, K and V must have the same batch size", what);
    GRAFT_CHECK(kk.D == Dq, "{}: K's head size {} must equal Q's {}", what, kk.D, Dq);
    GRAFT_CHECK(vv.H == Hkv && vv.S == Skv, "{}: V must have K's heads and sequence length", what);
    GRAFT_CHECK(Hkv > 0 && Hq % Hkv == 0, "{}: Q's {} heads must be a multiple of K's {} heads", what, Hq, Hkv);
    double scale = a.hasScale ? a.scale : 1.0 / std::sqrt(static_cast<double>(Dq));
    const double kNegInf = -std::numeric_limits<double>::infinity();

    // The additive bias from attn_mask: [.., Sq, Lm] broadcast over [B, Hq]; keys past Lm are masked.
    std::vector<double> mask;
    std::vector<int64_t> maskStrides;
    int64_t Lm = 0;
    bool hasMask = k.hasInput(3);
    if (hasMask) {
      const NDArray& m = k.input(3);
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
        for (int64_t i = 0; i < m.numel(); ++i) mask[i] = m.data<bool>()[i] ? 0.0 : kNegInf;
      } else {
        mask = readAsDoubles(m, what);
      }
    }
    std::vector<int64_t> nonpad;
    if (k.hasInput(6)) {
      nonpad = readIndexTensor(k.input(6), what, "nonpad_kv_seqlen");
      GRAFT_CHECK(static_cast<int64_t>(nonpad.size()) == B, "{}: nonpad_kv_seqlen must have {} values, got {}", what, B,
                  nonpad.size());
    }

    std::vector<double> y(static_cast<size_t>(B * Hq * Sq * Dv)), qk(static_cast<size_t>(B * Hq * Sq * Skv));
    std::vector<double> raw(Skv), bias(Skv), p(Skv);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h) {
        int64_t hk = h / (Hq / Hkv);
        for (int64_t i = 0; i < Sq; ++i) {
          // The causal and window frontier: query i sits at absolute position i + offset.
          int64_t offset = past;
          if (!nonpad.empty()) offset = nonpad[b] - Sq;
          for (int64_t j = 0; j < Skv; ++j) {
            double s = 0;
            for (int64_t d = 0; d < Dq; ++d) s += q.at(b, h, i, d) * kk.at(b, hk, j, d);
            s *= scale;
            if (a.softcap > 0) s = a.softcap * std::tanh(s / a.softcap);
            raw[j] = s;
            double bj = 0;
            if (hasMask)
              bj = j < Lm ? mask[b * maskStrides[0] + h * maskStrides[1] + i * maskStrides[2] + j * maskStrides[3]]
                          : kNegInf;
            int64_t diff = i + offset - j;
            if (a.causal && diff < 0) bj = kNegInf;
            if (a.left >= 0 && diff > a.left) bj = kNegInf;
            if (a.right >= 0 && -diff > a.right) bj = kNegInf;
            if (!nonpad.empty() && j >= nonpad[b]) bj = kNegInf;
            bias[j] = bj;
          }
          double mx = kNegInf;
          for (int64_t j = 0; j < Skv; ++j) mx = std::max(mx, raw[j] + bias[j]);
          // A row with every key masked attends to nothing: its weights (and output) are 0.
          double sum = 0;
          for (int64_t j = 0; j < Skv; ++j) {
            p[j] = mx == kNegInf ? 0.0 : std::exp(raw[j] + bias[j] - mx);
            sum += p[j];
          }
          for (int64_t j = 0; j < Skv; ++j) p[j] = sum > 0 ? p[j] / sum : 0.0;
          double* qkRow = qk.data() + ((b * Hq + h) * Sq + i) * Skv;
          for (int64_t j = 0; j < Skv; ++j) qkRow[j] = a.mode == 3 ? p[j] : a.mode == 2 ? raw[j] + bias[j] : raw[j];
          for (int64_t d = 0; d < Dv; ++d) {
            double acc = 0;
            for (int64_t j = 0; j < Skv; ++j) acc += p[j] * vv.at(b, hk, j, d);
            // 3-D inputs give a 3-D output [B, Sq, Hq * Dv].
            size_t at = q.fourD ? static_cast<size_t>(((b * Hq + h) * Sq + i) * Dv + d)
                                : static_cast<size_t>(((b * Sq + i) * Hq + h) * Dv + d);
            y[at] = acc;
          }
        }
      }
    Shape yShape = q.fourD ? Shape{B, Hq, Sq, Dv} : Shape{B, Sq, Hq * Dv};
    k.setOutput(0, arrayFromDoubles(y, qa.dtype(), yShape, what));
    if (k.wantsOutput(1)) k.setOutput(1, arrayFromDoubles(kk.v, ka.dtype(), {B, Hkv, Skv, kk.D}, what));
    if (k.wantsOutput(2)) k.setOutput(2, arrayFromDoubles(vv.v, va.dtype(), {B, Hkv, Skv, Dv}, what));
    if (k.wantsOutput(3)) k.setOutput(3, arrayFromDoubles(qk, qa.dtype(), {B, Hq, Sq, Skv}, what));
  };
}

}  // namespace

GRAFT_REGISTER_OPS(attention) {
  r.add("RotaryEmbedding").setReference(rotaryKernel).noGradient({1, 2, 3});
  r.add("Attention").setReference(attentionKernel).noGradient({3, 6});
  // Until the linked onnx has their schemas (opset > 17).
  setFallbackInfer("", "RotaryEmbedding", sameTypeAsInput(0));
}

}  // namespace graft::ops

// ---- gradients ----------------------------------------------------------------------------------
#include "ops/grad.hpp"

namespace graft::ops {

GRAFT_REGISTER_OPS(attention_vjp) {
  // Each rotated pair is multiplied by an orthogonal 2x2 matrix; its transpose is the rotation by
  // the opposite angle: dX = RotaryEmbedding(dY, cos, -sin). The caches are treated as constants.
  r.add("RotaryEmbedding").setVjp([](GradBuilder& g) {
    std::vector<ir::Tensor*> ins{g.dy(), g.in(1), g.neg(g.in(2))};
    if (g.node().numInputs() > 3 && g.in(3)) ins.push_back(g.in(3));
    g.setDx(0, g.op("RotaryEmbedding", ins, g.node().attrs()));
  });
}

}  // namespace graft::ops
