// DoRA in the fast linear op (kernels/linear.h's formulas; the reference is kernels/ref/linear.cpp):
// the weight's product by kind as linear.cpp runs it, then per-row scalings and f32 GEMMs for the
// LoRA part. The dora scratch (T, OC) holds one product at a time: yd, s·xa·Bᵀ, or k∘dout.
#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::cpu {
namespace {

float* dora_scratch(const LinearScratch& s) {
  LT_CHECK(s.dora, "linear: DoRA needs the dora scratch (T, OC)");
  return s.dora;
}

// out (T, OC) = x·Wᵀ without bias, as the forward computes it for the weight's kind (f32_matmul
// null: the f32 GEMM). x16: x in 16 bits for a 16-bit kind.
void base_product(Isa isa, MatmulFn f32_matmul, float* out, const float* x, const uint16_t* x16, const WeightView& W,
                  int T, const LinearScratch& s) {
  const int IC = W.cols, OC = W.rows;
  if (W.kind == WeightKind::F32) {
    if (f32_matmul) f32_matmul(out, x, static_cast<const float*>(W.data), nullptr, T, IC, OC);
    else gemm_f32(false, true, T, OC, IC, 1.0f, x, IC, static_cast<const float*>(W.data), IC, 0.0f, out, OC);
  } else if (W.half()) {
    half_forward(out, x, x16, W, T, s.tile, s.tile_bytes);
  } else {
    quant_forward(isa, out, x, x16, W, T, s.tile, s.tile_bytes);
  }
}

// dx (T, IC) += dout·W for the weight's kind
void base_backward_input(Isa isa, float* dx, const float* dout, int T, const WeightView& W, const LinearScratch& s) {
  if (W.kind == WeightKind::F32)
    matmul_backward(dx, nullptr, nullptr, dout, nullptr, static_cast<const float*>(W.data), T, W.cols, W.rows);
  else if (W.half())
    half_backward(dx, nullptr, dout, nullptr, nullptr, W, T, s.dy, static_cast<float*>(s.tile));
  else
    quant_backward_input(isa, dx, dout, W, T, s.tile, s.tile_bytes, s.dy);
}

// kd (T, OC) = f(k)∘dout into the dora scratch, f(k) = k + shift
float* scaled_dout(const float* dout, const LoraView& l, float shift, int T, int OC, const LinearScratch& s) {
  float* kd = dora_scratch(s);
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < OC; ++o)
      kd[size_t(t) * OC + o] = (l.magnitude[o] / l.weight_norm[o] + shift) * dout[size_t(t) * OC + o];
  return kd;
}

}  // namespace

void dora_forward(Isa isa, MatmulFn f32_matmul, float* out, float* xa, const LinearInput& in, const LinearWeights& w,
                  const LinearScratch& s) {
  const WeightView& W = w.w;
  const LoraView& l = w.lora;
  const int T = in.T, IC = W.cols, OC = W.rows, R = l.rank;
  float* d = dora_scratch(s);
  base_product(isa, f32_matmul, out, in.x, in.x16, W, T, s);  // y0
  const float* xin = lora_dropped_input(in.x, T, IC, l, s);
  if (l.dropout > 0) base_product(isa, f32_matmul, d, xin, nullptr, W, T, s);  // yd
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < OC; ++o) {
      const float k = l.magnitude[o] / l.weight_norm[o];
      float& y = out[size_t(t) * OC + o];
      y = l.dropout > 0 ? y + (k - 1.0f) * d[size_t(t) * OC + o] : k * y;
    }
  gemm_f32(false, true, T, R, IC, 1.0f, xin, IC, l.A, IC, 0.0f, xa, R);
  gemm_f32(false, true, T, OC, R, l.scale, xa, R, l.B, R, 0.0f, d, OC);  // s·xa·Bᵀ
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < OC; ++o) {
      const float y = out[size_t(t) * OC + o] + (l.magnitude[o] / l.weight_norm[o]) * d[size_t(t) * OC + o];
      out[size_t(t) * OC + o] = w.bias ? y + w.bias[o] : y;
    }
}

void dora_backward_input(Isa isa, float* dx, const float* dout, int T, const LinearWeights& w, const LinearScratch& s) {
  const WeightView& W = w.w;
  const LoraView& l = w.lora;
  const int IC = W.cols, OC = W.rows, R = l.rank;
  const size_t n = size_t(T) * IC;
  if (l.dropout > 0) {
    LT_CHECK(s.lora_tmp, "linear_backward_input: DoRA with dropout needs the lora_tmp scratch");
    base_backward_input(isa, dx, dout, T, W, s);
    const float* km1 = scaled_dout(dout, l, -1.0f, T, OC, s);  // (k − 1)∘dout
    std::fill(s.lora_tmp, s.lora_tmp + n, 0.0f);
    base_backward_input(isa, s.lora_tmp, km1, T, W, s);
    for (size_t i = 0; i < n; ++i) dx[i] += s.lora_tmp[i] * lora_dropout_scale(l.dropout_key, i, l.dropout);
  }
  const float* kd = scaled_dout(dout, l, 0.0f, T, OC, s);
  if (l.dropout <= 0) base_backward_input(isa, dx, kd, T, W, s);
  LT_CHECK(s.lora_g, "linear backward: LoRA needs the lora_g scratch");
  gemm_f32(false, false, T, R, OC, 1.0f, kd, OC, l.B, R, 0.0f, s.lora_g, R);  // g = kd·B
  if (l.dropout <= 0) {
    gemm_f32(false, false, T, IC, R, l.scale, s.lora_g, R, l.A, IC, 1.0f, dx, IC);
    return;
  }
  gemm_f32(false, false, T, IC, R, l.scale, s.lora_g, R, l.A, IC, 0.0f, s.lora_tmp, IC);
  for (size_t i = 0; i < n; ++i) dx[i] += s.lora_tmp[i] * lora_dropout_scale(l.dropout_key, i, l.dropout);
}

void dora_backward_weight(Isa isa, const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                          const LinearWeights& w, const LinearScratch& s) {
  const WeightView& W = w.w;
  const LoraView& l = w.lora;
  const int T = in.T, IC = W.cols, OC = W.rows, R = l.rank;
  LT_CHECK(!g.dw, "linear_backward_weight: DoRA's base weight is frozen; dW cannot be asked of it");
  LT_CHECK(xa || (!g.dmag && !g.dB), "linear_backward_weight: DoRA's dm and dB need the forward's xa (T, R)");
  if (g.db)
    for (int t = 0; t < T; ++t)
      for (int o = 0; o < OC; ++o) g.db[o] += dout[size_t(t) * OC + o];
  const float* xin = lora_dropped_input(in.x, T, IC, l, s);
  if (g.dmag) {  // dm = Σ_t dout∘(yd + s·xa·Bᵀ) / n
    float* d = dora_scratch(s);
    if (l.dropout > 0) base_product(isa, nullptr, d, xin, nullptr, W, T, s);
    else base_product(isa, nullptr, d, in.x, in.x16, W, T, s);
    gemm_f32(false, true, T, OC, R, l.scale, xa, R, l.B, R, 1.0f, d, OC);
    for (int o = 0; o < OC; ++o) {
      float a = 0.0f;
      for (int t = 0; t < T; ++t) a += dout[size_t(t) * OC + o] * d[size_t(t) * OC + o];
      g.dmag[o] += a / l.weight_norm[o];
    }
  }
  if (!g.dA && !g.dB) return;
  const float* kd = scaled_dout(dout, l, 0.0f, T, OC, s);
  if (g.dB) gemm_f32(true, false, OC, R, T, l.scale, kd, OC, xa, R, 1.0f, g.dB, R);  // dB += s·kdᵀ·xa
  if (!g.dA) return;
  LT_CHECK(s.lora_g, "linear backward: LoRA needs the lora_g scratch");
  gemm_f32(false, false, T, R, OC, 1.0f, kd, OC, l.B, R, 0.0f, s.lora_g, R);
  gemm_f32(true, false, R, IC, T, l.scale, s.lora_g, R, xin, IC, 1.0f, g.dA, IC);  // dA += s·gᵀ·xd
}

}  // namespace lt::cpu
