// The fast linear op (kernels/linear.h) behind ops_cpu().linear_forward and
// train_ops_cpu().linear_backward_*: the weight's product by kind (f32: the ISA's matmul_forward
// and matmul_backward's GEMMs; a few tokens against 16-bit / 4-bit weights: decode_gemv.h; else
// 16-bit: half_linear.cpp; quantized: quant_linear.cpp), the bias, then the LoRA
// products as f32 GEMMs. The order of every accumulation is fixed (base product, then LoRA), so a
// step's results do not depend on which direction is asked first.
#include "core/error.h"
#include "kernels/cpu/decode_gemv.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::cpu {
namespace {

// out (T, OC) += bias, token by token (the same f32 adds as the matmul's own bias)
void add_bias(float* out, const float* bias, int T, int OC) {
  if (!bias) return;
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < OC; ++o) out[size_t(t) * OC + o] += bias[o];
}

// g (T, R) = dout · B
float* lora_g(const float* dout, int T, const LinearWeights& w, const LinearScratch& s) {
  LT_CHECK(s.lora_g, "linear backward: LoRA needs the lora_g scratch");
  const int R = w.lora.rank, OC = w.w.rows;
  gemm_f32(false, false, T, R, OC, 1.0f, dout, OC, w.lora.B, R, 0.0f, s.lora_g, R);
  return s.lora_g;
}

const float* dropped(const float* x, int T, int IC, const LoraView& l, const LinearScratch& s) {
  return lora_dropped_input(x, T, IC, l, s);
}

}  // namespace

// xd = x ∘ mask into s.lora_xd, or x itself without dropout
const float* lora_dropped_input(const float* x, int T, int IC, const LoraView& l, const LinearScratch& s) {
  if (l.dropout <= 0) return x;
  LT_CHECK(s.lora_xd, "linear: LoRA dropout needs the lora_xd scratch");
  const size_t n = size_t(T) * IC;
  for (size_t i = 0; i < n; ++i) s.lora_xd[i] = x[i] * lora_dropout_scale(l.dropout_key, i, l.dropout);
  return s.lora_xd;
}

void linear_forward(Isa isa, MatmulFn f32_matmul, float* out, float* xa, const LinearInput& in,
                    const LinearWeights& w, const LinearScratch& s) {
  check_linear(w, in.T);
  const WeightView& W = w.w;
  const int T = in.T, IC = W.cols, OC = W.rows;
  LT_CHECK(xa || w.lora.rank == 0, "linear_forward: LoRA needs the xa output (T, R)");
  if (w.lora.dora()) return dora_forward(isa, f32_matmul, out, xa, in, w, s);
  if (W.kind == WeightKind::F32) {
    f32_matmul(out, in.x, static_cast<const float*>(W.data), w.bias, T, IC, OC);
  } else {
    if (decode_gemv_applies(W, T)) decode_gemv(isa, out, in, W, s.tile, s.tile_bytes);  // decode: W streamed once
    else if (W.half()) half_forward(out, in.x, in.x16, W, T, static_cast<float*>(s.tile));
    else quant_forward(isa, out, in.x, W, T, s.tile, s.tile_bytes);
    add_bias(out, w.bias, T, OC);
  }
  const LoraView& l = w.lora;
  if (l.rank == 0) return;
  LT_CHECK(xa, "linear_forward: LoRA needs the xa output (T, R)");
  const int R = l.rank;
  const float* xin = dropped(in.x, T, IC, l, s);
  gemm_f32(false, true, T, R, IC, 1.0f, xin, IC, l.A, IC, 0.0f, xa, R);
  gemm_f32(false, true, T, OC, R, l.scale, xa, R, l.B, R, 1.0f, out, OC);
}

void linear_backward_input(Isa isa, float* dx, const float* dout, int T, const LinearWeights& w,
                           const LinearScratch& s) {
  check_linear(w, T);
  if (w.lora.dora()) return dora_backward_input(isa, dx, dout, T, w, s);
  const WeightView& W = w.w;
  const int IC = W.cols, OC = W.rows;
  if (W.kind == WeightKind::F32)
    matmul_backward(dx, nullptr, nullptr, dout, nullptr, static_cast<const float*>(W.data), T, IC, OC);
  else if (W.half())
    half_backward(dx, nullptr, dout, nullptr, nullptr, W, T, s.dy, static_cast<float*>(s.tile));
  else
    quant_backward_input(isa, dx, dout, W, T, s.tile, s.tile_bytes);
  const LoraView& l = w.lora;
  if (l.rank == 0) return;
  const int R = l.rank;
  const float* g = lora_g(dout, T, w, s);
  if (l.dropout <= 0) {
    gemm_f32(false, false, T, IC, R, l.scale, g, R, l.A, IC, 1.0f, dx, IC);  // dx += s·g·A
    return;
  }
  LT_CHECK(s.lora_tmp, "linear_backward_input: LoRA dropout needs the lora_tmp scratch");
  gemm_f32(false, false, T, IC, R, l.scale, g, R, l.A, IC, 0.0f, s.lora_tmp, IC);
  const size_t n = size_t(T) * IC;
  for (size_t i = 0; i < n; ++i) dx[i] += s.lora_tmp[i] * lora_dropout_scale(l.dropout_key, i, l.dropout);
}

void linear_backward_weight(Isa isa, const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                            const LinearWeights& w, const LinearScratch& s) {
  check_linear(w, in.T);
  if (w.lora.dora()) return dora_backward_weight(isa, g, dout, in, xa, w, s);
  const WeightView& W = w.w;
  const int T = in.T, IC = W.cols, OC = W.rows;
  LT_CHECK(!g.dw || !W.quantized(), "linear_backward_weight: a {} weight is frozen; dW cannot be asked of it",
           weight_kind_name(W.kind));
  if (g.dw && W.kind == WeightKind::F32) matmul_backward(nullptr, g.dw, nullptr, dout, in.x, nullptr, T, IC, OC);
  if (g.dw && W.half()) half_backward(nullptr, g.dw, dout, in.x, in.x16, W, T, s.dy, nullptr);
  if (g.db)  // token by token into db (matmul_backward sums the tokens first: other bits)
    for (int t = 0; t < T; ++t)
      for (int o = 0; o < OC; ++o) g.db[o] += dout[size_t(t) * OC + o];
  const LoraView& l = w.lora;
  if (l.rank == 0 || (!g.dA && !g.dB)) return;
  const int R = l.rank;
  if (g.dB) {
    LT_CHECK(xa, "linear_backward_weight: dB needs the forward's xa (T, R)");
    gemm_f32(true, false, OC, R, T, l.scale, dout, OC, xa, R, 1.0f, g.dB, R);  // dB += s·doutᵀ·xa
  }
  if (!g.dA) return;
  const float* gr = lora_g(dout, T, w, s);
  const float* xin = dropped(in.x, T, IC, l, s);
  gemm_f32(true, false, R, IC, T, l.scale, gr, R, xin, IC, 1.0f, g.dA, IC);  // dA += s·gᵀ·xd
}

}  // namespace lt::cpu
