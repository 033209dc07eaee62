// Reference linear op (kernels/linear.h): plain loops over the weight decoded element by element
// (weight_at), so every kind is specified by one decoding formula and one product. f32 weights go
// through the reference matmul (matmul.cpp, backward_matmul.cpp); 16-bit kinds round dout to their
// type in the backward, bf16 products (WeightView::bf16_products) dout and the decoded W to bf16;
// Int8's forward is the LLM.int8 product written out scalar. The LoRA part is f32 (LoraView::bf16:
// all six products on bf16-rounded operands, linear.h) with the dropout mask regenerated from its
// key; DoRA follows kernels/linear.h's formulas term by term. Nothing allocates: the LLM.int8
// outlier flags use the tile scratch, the LoRA backward its lora_g scratch, DoRA its dora scratch.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/ggml_blocks.h"
#include "kernels/q8_0_act.h"
#include "kernels/ref/ref.h"

namespace lt::ref {

float weight_at(const WeightView& w, int64_t r, int64_t c) {
  const int64_t f = r * w.cols + c;
  switch (w.kind) {
    case WeightKind::F32: return static_cast<const float*>(w.data)[f];
    case WeightKind::BF16: return bf16_to_f32(static_cast<const uint16_t*>(w.data)[f]);
    case WeightKind::F16: return f16_to_f32(static_cast<const uint16_t*>(w.data)[f]);
    case WeightKind::Int8: return (float(static_cast<const int8_t*>(w.data)[f]) * w.row_absmax[r]) * kInt8Inv127;
    case WeightKind::Q8_0:
    case WeightKind::Q4_0: {
      const uint8_t* blk = ggml_block(w, f / 32);
      return float(ggml_block_code(w.kind, blk, int(f % 32))) * ggml_block_scale(blk);
    }
    case WeightKind::NF4:
    case WeightKind::FP4:
    case WeightKind::Int4: break;
  }
  const uint8_t byte = static_cast<const uint8_t*>(w.data)[f >> 1];
  const int code = (f & 1) ? (byte & 15) : (byte >> 4);
  const int64_t b = f / w.blocksize;
  float scale;
  if (w.qabsmax) {
    const float a = w.absmax_code_values[w.qabsmax[b]] * w.absmax2[b / 256];  // rounded before the add
    scale = a + w.offset;
  } else {
    scale = w.absmax[b];
  }
  const float v = w.code_values[code] * scale;
  return w.block_offset ? v + w.block_offset[b] : v;
}

namespace {

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// dout as the weight's products see it: rounded to a 16-bit kind's type (or to bf16 with bf16
// products), else as given
float grad_as(const WeightView& w, float v) {
  if (w.kind == WeightKind::BF16 || w.bf16_products) return round_bf16(v);
  if (w.kind == WeightKind::F16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// W's element as the products with the decoded W see it: rounded to bf16 with bf16 products
float product_weight(const WeightView& w, int64_t r, int64_t c) {
  const float v = weight_at(w, r, c);
  return w.bf16_products ? round_bf16(v) : v;
}

// A LoRA operand as LoraView::bf16's products see it: rounded to bf16 with bf16, else as given
float lora_op(const LoraView& l, float v) { return l.bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; }

// The dropout mask element i (1 without dropout), and the LoRA input element i: x[i] times it
float mask_at(size_t i, const LoraView& l) {
  return l.dropout > 0 ? lora_dropout_scale(l.dropout_key, i, l.dropout) : 1.0f;
}
float xd_at(const float* x, size_t i, const LoraView& l) { return l.dropout > 0 ? x[i] * mask_at(i, l) : x[i]; }

// out (T, OC) = x·Wᵀ + bias with W decoded element by element
void decoded_forward(float* out, const float* x, const WeightView& w, const float* bias, int T) {
  const int IC = w.cols, OC = w.rows;
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < OC; ++o) {
      float s = bias ? bias[o] : 0.0f;
      for (int i = 0; i < IC; ++i) s += x[size_t(t) * IC + i] * product_weight(w, o, i);
      out[size_t(t) * OC + o] = s;
    }
}

// out (T, OC) = the q8_0 / q4_0 product (kernels/linear.h) of x with the Q8_0 / Q4_0 weight w, + bias:
// blocks in order
void ggml_block_forward(float* out, const float* x, const WeightView& w, const float* bias, int T) {
  const int IC = w.cols, OC = w.rows, nb = IC / 32;
  int8_t qx[32];
  for (int t = 0; t < T; ++t) {
    float* y = out + size_t(t) * OC;
    for (int o = 0; o < OC; ++o) y[o] = 0.0f;
    for (int b = 0; b < nb; ++b) {
      float dx;
      quantize_act_q8_0(x + size_t(t) * IC + b * 32, 32, qx, &dx);
      for (int o = 0; o < OC; ++o) {
        const uint8_t* blk = ggml_block(w, int64_t(o) * nb + b);
        int32_t sum = 0;
        for (int j = 0; j < 32; ++j) sum += int32_t(qx[j]) * ggml_block_code(w.kind, blk, j);
        y[o] += (dx * ggml_block_scale(blk)) * float(sum);
      }
    }
    if (bias)
      for (int o = 0; o < OC; ++o) y[o] += bias[o];
  }
}

// out (T, OC) = the LLM.int8 product of x with the Int8 weight w, + bias. is_out (IC) scratch.
void int8_forward(float* out, const float* x, const WeightView& w, const float* bias, int T, uint8_t* is_out) {
  const int IC = w.cols, OC = w.rows;
  const auto* q = static_cast<const int8_t*>(w.data);
  for (int c = 0; c < IC; ++c) {
    is_out[c] = 0;
    for (int t = 0; t < T && w.int8_threshold > 0; ++t) is_out[c] |= std::fabs(x[size_t(t) * IC + c]) >= w.int8_threshold;
  }
  for (int t = 0; t < T; ++t) {
    const float* xt = x + size_t(t) * IC;
    float am = 0.0f;
    for (int c = 0; c < IC; ++c)
      if (!is_out[c]) am = std::max(am, std::fabs(xt[c]));
    const float sx = am > 0.0f ? (1.0f / am) * 127.0f : 0.0f;
    for (int o = 0; o < OC; ++o) {
      int32_t acc = 0;
      float outl = 0.0f;
      for (int c = 0; c < IC; ++c) {
        if (is_out[c]) {
          outl += xt[c] * weight_at(w, o, c);
          continue;
        }
        const int xq = int(std::clamp(std::nearbyint(xt[c] * sx), -127.0f, 127.0f));
        acc += xq * int32_t(q[size_t(o) * IC + c]);
      }
      const float y = float(acc) * ((am * w.row_absmax[o]) * kInt8Inv127Sq) + outl;
      out[size_t(t) * OC + o] = bias ? y + bias[o] : y;
    }
  }
}

// xa (T, R) = xd·Aᵀ; out (T, OC) += s·xa·Bᵀ (bf16: bf16(xa)·bf16(s·B)ᵀ)
// out may be null: xa alone (linear_forward's replay case)
void lora_forward(float* out, float* xa, const float* x, const LoraView& l, int T, int IC, int OC) {
  const int R = l.rank;
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      float a = 0.0f;
      for (int i = 0; i < IC; ++i) a += xd_at(x, size_t(t) * IC + i, l) * lora_op(l, l.A[size_t(r) * IC + i]);
      xa[size_t(t) * R + r] = a;
    }
    if (!out) continue;
    for (int o = 0; o < OC; ++o) {
      float a = 0.0f;
      if (l.bf16) {  // [x16 | bf16(xa)]·[W | bf16(s·B)]ᵀ (linear.h)
        for (int r = 0; r < R; ++r) a += lora_op(l, xa[size_t(t) * R + r]) * lora_op(l, l.scale * l.B[size_t(o) * R + r]);
        out[size_t(t) * OC + o] += a;
        continue;
      }
      for (int r = 0; r < R; ++r) a += xa[size_t(t) * R + r] * l.B[size_t(o) * R + r];
      out[size_t(t) * OC + o] += l.scale * a;
    }
  }
}

// g (T, R) = dout·B into the lora_g scratch
float* lora_g(const float* dout, const LoraView& l, int T, int OC, const LinearScratch& s) {
  LT_CHECK(s.lora_g, "linear backward: LoRA needs the lora_g scratch");
  const int R = l.rank;
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) {
      float a = 0.0f;
      for (int o = 0; o < OC; ++o) a += lora_op(l, dout[size_t(t) * OC + o]) * lora_op(l, l.B[size_t(o) * R + r]);
      s.lora_g[size_t(t) * R + r] = a;
    }
  return s.lora_g;
}


// out (T, OC) = the weight's product with x as the forward computes it (kind by kind), + bias
void base_forward(float* out, const float* x, const WeightView& W, const float* bias, int T, const LinearScratch& s) {
  const int IC = W.cols, OC = W.rows;
  if (W.kind == WeightKind::F32) {
    matmul_forward(out, x, static_cast<const float*>(W.data), bias, T, IC, OC);
  } else if (ggml_block_kind(W.kind)) {
    ggml_block_forward(out, x, W, bias, T);
  } else if (W.kind == WeightKind::Int8) {
    LT_CHECK(s.tile && s.tile_bytes >= size_t(IC), "linear_forward: the int8 reference needs {} bytes of tile "
             "scratch (got {})", IC, s.tile_bytes);
    int8_forward(out, x, W, bias, T, static_cast<uint8_t*>(s.tile));
  } else {
    decoded_forward(out, x, W, bias, T);
  }
}

// dx (T, IC) += dout·W, dout rounded as the kind's products see it
void base_backward_input(float* dx, const float* dout, int T, const WeightView& W) {
  const int IC = W.cols, OC = W.rows;
  if (W.kind == WeightKind::F32) {
    matmul_backward(dx, nullptr, nullptr, dout, nullptr, static_cast<const float*>(W.data), T, IC, OC);
    return;
  }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < IC; ++i) {
      float a = 0.0f;
      for (int o = 0; o < OC; ++o) a += grad_as(W, dout[size_t(t) * OC + o]) * product_weight(W, o, i);
      dx[size_t(t) * IC + i] += a;
    }
}

// DoRA's k = m / n of row o
float dora_k(const LoraView& l, int o) { return l.magnitude[o] / l.weight_norm[o]; }

// yd (T, OC) = xd·Wᵀ without bias: with dropout the decoded W against the dropped input, else the
// forward's own product of x
void dora_yd(float* yd, const float* x, const WeightView& W, const LoraView& l, int T, const LinearScratch& s) {
  if (l.dropout <= 0) return base_forward(yd, x, W, nullptr, T, s);
  const int IC = W.cols, OC = W.rows;
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < OC; ++o) {
      float a = 0.0f;
      for (int i = 0; i < IC; ++i) a += xd_at(x, size_t(t) * IC + i, l) * weight_at(W, o, i);
      yd[size_t(t) * OC + o] = a;
    }
}

float* dora_scratch(const LinearScratch& s) {
  LT_CHECK(s.dora, "linear: DoRA needs the dora scratch (T, OC)");
  return s.dora;
}

// kd (T, OC) = k∘dout into the dora scratch
const float* dora_scaled_dout(const float* dout, const LoraView& l, int T, int OC, const LinearScratch& s) {
  float* kd = dora_scratch(s);
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < OC; ++o) kd[size_t(t) * OC + o] = dora_k(l, o) * dout[size_t(t) * OC + o];
  return kd;
}

// The DoRA forward: y = y0 + (k − 1)∘yd + k∘(s·xa·Bᵀ) + bias (no dropout: k∘y0 + k∘(s·xa·Bᵀ) + bias)
void dora_forward(float* out, float* xa, const LinearInput& in, const LinearWeights& w, const LinearScratch& s) {
  const WeightView& W = w.w;
  const LoraView& l = w.lora;
  const int T = in.T, IC = W.cols, OC = W.rows, R = l.rank;
  base_forward(out, in.x, W, nullptr, T, s);
  float* yd = dora_scratch(s);
  if (l.dropout > 0) dora_yd(yd, in.x, W, l, T, s);
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      float a = 0.0f;
      for (int i = 0; i < IC; ++i) a += xd_at(in.x, size_t(t) * IC + i, l) * l.A[size_t(r) * IC + i];
      xa[size_t(t) * R + r] = a;
    }
    for (int o = 0; o < OC; ++o) {
      float lr = 0.0f;
      for (int r = 0; r < R; ++r) lr += xa[size_t(t) * R + r] * l.B[size_t(o) * R + r];
      const float k = dora_k(l, o), y0 = out[size_t(t) * OC + o];
      float y = l.dropout > 0 ? y0 + (k - 1.0f) * yd[size_t(t) * OC + o] + k * (l.scale * lr) : k * y0 + k * (l.scale * lr);
      out[size_t(t) * OC + o] = w.bias ? y + w.bias[o] : y;
    }
  }
}

}  // namespace

void linear_forward(float* out, float* xa, const LinearInput& in, const LinearWeights& w, const LinearScratch& s) {
  check_linear(w, in.T);
  const WeightView& W = w.w;
  const int T = in.T, IC = W.cols, OC = W.rows;
  LT_CHECK(xa || w.lora.rank == 0, "linear_forward: LoRA needs the xa output (T, R)");
  if (!out) {  // only xa (ops.h)
    LT_CHECK(xa && w.lora.rank > 0 && !w.lora.dora(), "linear_forward: no output asked for needs a plain LoRA's xa");
    return lora_forward(nullptr, xa, in.x, w.lora, T, IC, OC);
  }
  if (w.lora.dora()) return dora_forward(out, xa, in, w, s);
  LT_CHECK(!W.bf16_products || !W.four_bit() || in.x16, "linear_forward: bf16 products with a {} weight need the "
           "input's bf16 bits (LinearInput::x16)", weight_kind_name(W.kind));
  base_forward(out, in.x, W, w.bias, T, s);
  if (w.lora.rank == 0) return;
  lora_forward(out, xa, in.x, w.lora, T, IC, OC);
}

void linear_backward_input(float* dx, const float* dout, int T, const LinearWeights& w, const LinearScratch& s) {
  check_linear(w, T);
  const WeightView& W = w.w;
  const int IC = W.cols, OC = W.rows;
  const LoraView& l = w.lora;
  const float* kd = l.dora() ? dora_scaled_dout(dout, l, T, OC, s) : nullptr;  // k∘dout
  if (!kd || l.dropout > 0) base_backward_input(dx, dout, T, W);
  if (kd && l.dropout <= 0) base_backward_input(dx, kd, T, W);
  if (kd && l.dropout > 0)  // dx += (((k − 1)∘dout)·W)∘mask
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < IC; ++i) {
        float a = 0.0f;
        for (int o = 0; o < OC; ++o)
          a += grad_as(W, (dora_k(l, o) - 1.0f) * dout[size_t(t) * OC + o]) * weight_at(W, o, i);
        dx[size_t(t) * IC + i] += a * mask_at(size_t(t) * IC + i, l);
      }
  if (l.rank == 0) return;
  if (kd) dout = kd;  // the LoRA part sees k∘dout
  const float* g = lora_g(dout, l, T, OC, s);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < IC; ++i) {
      float a = 0.0f;
      const size_t e = size_t(t) * IC + i;
      if (l.bf16) {  // [bf16(dout) | bf16(g)]·[W; bf16(s·A)] (linear.h)
        for (int r = 0; r < l.rank; ++r)
          a += lora_op(l, g[size_t(t) * l.rank + r]) * lora_op(l, l.scale * l.A[size_t(r) * IC + i]);
        dx[e] += a;
        continue;
      }
      for (int r = 0; r < l.rank; ++r) a += g[size_t(t) * l.rank + r] * l.A[size_t(r) * IC + i];
      dx[e] += (l.scale * a) * mask_at(e, l);
    }
}

void linear_backward_weight(const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                            const LinearWeights& w, const LinearScratch& s) {
  check_linear(w, in.T);
  const WeightView& W = w.w;
  const int T = in.T, IC = W.cols, OC = W.rows;
  LT_CHECK(!g.dw || !W.quantized(), "linear_backward_weight: a {} weight is frozen; dW cannot be asked of it",
           weight_kind_name(W.kind));
  if (g.dw && W.kind != WeightKind::F32) {
    for (int o = 0; o < OC; ++o)
      for (int i = 0; i < IC; ++i) {
        float a = 0.0f;
        for (int t = 0; t < T; ++t) a += grad_as(W, dout[size_t(t) * OC + o]) * in.x[size_t(t) * IC + i];
        g.dw[size_t(o) * IC + i] += a;
      }
  }
  float* dw_f32 = W.kind == WeightKind::F32 ? g.dw : nullptr;
  matmul_backward(nullptr, dw_f32, g.db, dout, in.x, nullptr, T, IC, OC);
  const LoraView& l = w.lora;
  LT_CHECK(!l.dora() || !g.dw, "linear_backward_weight: DoRA's base weight is frozen; dW cannot be asked of it");
  const int R = l.rank;
  if (l.dora() && g.dmag) {  // dm = Σ_t dout∘(yd + s·xa·Bᵀ) / n
    LT_CHECK(xa, "linear_backward_weight: DoRA's dm needs the forward's xa (T, R)");
    float* yd = dora_scratch(s);
    dora_yd(yd, in.x, W, l, T, s);
    for (int o = 0; o < OC; ++o) {
      float a = 0.0f;
      for (int t = 0; t < T; ++t) {
        float lr = 0.0f;
        for (int r = 0; r < R; ++r) lr += xa[size_t(t) * R + r] * l.B[size_t(o) * R + r];
        a += dout[size_t(t) * OC + o] * (yd[size_t(t) * OC + o] + l.scale * lr);
      }
      g.dmag[o] += a / l.weight_norm[o];
    }
  }
  if (l.rank == 0 || (!g.dA && !g.dB)) return;
  if (l.dora()) dout = dora_scaled_dout(dout, l, T, OC, s);  // the LoRA part sees k∘dout
  if (g.dB) {
    LT_CHECK(xa, "linear_backward_weight: dB needs the forward's xa (T, R)");
    for (int o = 0; o < OC; ++o)
      for (int r = 0; r < R; ++r) {
        float a = 0.0f;
        for (int t = 0; t < T; ++t) a += lora_op(l, dout[size_t(t) * OC + o]) * lora_op(l, xa[size_t(t) * R + r]);
        g.dB[size_t(o) * R + r] += l.scale * a;
      }
  }
  if (!g.dA) return;
  const float* gr = lora_g(dout, l, T, OC, s);
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < IC; ++i) {
      float a = 0.0f;
      for (int t = 0; t < T; ++t) a += lora_op(l, gr[size_t(t) * R + r]) * xd_at(in.x, size_t(t) * IC + i, l);
      g.dA[size_t(r) * IC + i] += l.scale * a;
    }
}

}  // namespace lt::ref
