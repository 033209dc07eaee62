// The fast linear op (kernels/linear.h) behind ops_cpu().linear_forward and
// train_ops_cpu().linear_backward_*: the weight's product by kind (f32: the ISA's matmul_forward
// and matmul_backward's GEMMs; a few tokens against 16-bit / 4-bit weights: decode_gemv.h; else
// 16-bit: half_linear.cpp; quantized: quant_linear.cpp), the bias, then the LoRA products as f32
// GEMMs (LoraView::bf16: four of them as bf16 GEMMs and dx's term inside the base's, linear.h). The
// order of every accumulation is fixed (base product, then LoRA), so a step's results do not depend
// on which direction is asked first.
#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/convert.h"
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

// rows x cols 16-bit values from src (row stride sld) into dst (row stride dld), rows over the team
void copy_rows(uint16_t* dst, size_t dld, const uint16_t* src, size_t sld, size_t rows, size_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= (size_t(1) << 16))
  for (ptrdiff_t r = 0; r < ptrdiff_t(rows); ++r)
    std::memcpy(dst + size_t(r) * dld, src + size_t(r) * sld, cols * sizeof(uint16_t));
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

// columns from .. ld of rows rows (row stride ld) set to zero: a concatenation's padding
void zero_cols(uint16_t* x, int ld, int from, int rows) {
  if (from < ld)
    for (int t = 0; t < rows; ++t) std::fill(x + size_t(t) * ld + from, x + size_t(t + 1) * ld, uint16_t(0));
}

// bf16 LoRA (LoraView::bf16): n values of src rounded into the scratch part dst
const uint16_t* rounded(uint16_t* dst, const float* src, size_t n, const char* part) {
  LT_CHECK(dst, "linear: bf16 LoRA needs the {} scratch", part);
  f32_to_half(DType::BF16, dst, nullptr, src, n);
  return dst;
}

// g (T, R) = bf16(dout)·bf16(B) into s.lora_g
float* lora_g_bf16(const uint16_t* dout16, int T, const LinearWeights& w, const LinearScratch& s) {
  LT_CHECK(s.lora_g, "linear backward: LoRA needs the lora_g scratch");
  const int R = w.lora.rank, OC = w.w.rows;
  const uint16_t* B16 = rounded(s.lora_w16, w.lora.B, size_t(OC) * R, "lora_w16");
  gemm_bf16(false, false, T, R, OC, 1.0f, dout16, OC, B16, R, 0.0f, s.lora_g, R);
  return s.lora_g;
}

// bf16 LoRA (LoraView::bf16, linear.h): dx += [bf16(dout) | bf16(g) | 0]·[W; bf16(s·A); 0], one bf16
// GEMM over the inner dimension lora_cat_cols(OC, R), so the rank-R term adds no pass over dx (on
// AMX the same sums without the weight's concatenated copy: gemm_bf16_appended); the concatenated
// dout stays in s.dy for linear_backward_weight (LinearGrads::dout16), g (f32) in s.lora_g.
void lora_backward_input_bf16(Isa isa, float* dx, const float* dout, int T, const LinearWeights& w,
                              const LinearScratch& s) {
  const WeightView& W = w.w;
  const LoraView& l = w.lora;
  const int IC = W.cols, OC = W.rows, R = l.rank, ld = lora_cat_cols(OC, R);
  LT_CHECK(s.dy && s.lora_g && s.lora_wt, "linear_backward_input: bf16 LoRA needs the dy, lora_g and lora_wt scratch");
  auto* d16 = static_cast<uint16_t*>(s.dy);
  f32_to_half_rows(DType::BF16, d16, size_t(ld), dout, size_t(OC), size_t(T), size_t(OC));
  const auto* w16 = static_cast<const uint16_t*>(W.data);
  if (!W.quantized() && gemm_bf16_appends(T, OC, R)) {  // AMX: g inside the dx product's pass over bf16(dout)
    for (size_t i = 0; i < size_t(R) * IC; ++i) s.lora_wt[i] = l.scale * l.A[i];
    const uint16_t* sA16 = rounded(s.lora_w16, s.lora_wt, size_t(R) * IC, "lora_w16");
    // bf16(B) in lora_wt, free again (its floats hold OC·R of them)
    const uint16_t* B16 = rounded(reinterpret_cast<uint16_t*>(s.lora_wt), l.B, size_t(OC) * R, "lora_wt");
    zero_cols(d16, ld, OC + R, T);
    const LoraRankTerm rt{R, B16, false, R, s.lora_g, d16 + OC, ld, sA16, IC};
    if (gemm_bf16_lora(false, T, IC, OC, d16, ld, w16, IC, rt, 1.0f, dx, IC)) return;
  }
  const uint16_t* B16 = rounded(s.lora_w16, l.B, size_t(OC) * R, "lora_w16");
  gemm_bf16(false, false, T, R, OC, 1.0f, d16, ld, B16, R, 0.0f, s.lora_g, R);  // g = bf16(dout)·bf16(B)
  f32_to_half_rows(DType::BF16, d16 + OC, size_t(ld), s.lora_g, size_t(R), size_t(T), size_t(R));
  zero_cols(d16, ld, OC + R, T);
  for (size_t i = 0; i < size_t(R) * IC; ++i) s.lora_wt[i] = l.scale * l.A[i];
  const uint16_t* sA16 = rounded(s.lora_w16, s.lora_wt, size_t(R) * IC, "lora_w16");  // B16 is done with
  if (W.quantized()) {  // bf16 products: the decoded tiles' product, then the rank-R term
    quant_backward_input_bf16(isa, dx, d16, ld, W, T, s.tile, s.tile_bytes);
    return gemm_bf16(false, false, T, IC, R, 1.0f, d16 + OC, ld, sA16, IC, 1.0f, dx, IC);
  }
  if (gemm_bf16_appended(false, T, IC, OC, d16, ld, w16, IC, R, d16 + OC, ld, sA16, IC, 1.0f, dx, IC))
    return;  // AMX: the concatenation's sums without building it
  LT_CHECK(s.lora_wcat, "linear_backward_input: bf16 LoRA needs the lora_wcat scratch (lora_wcat_bytes)");
  const size_t wn = size_t(OC) * IC;
  copy_rows(s.lora_wcat, size_t(IC), w16, size_t(IC), size_t(OC), size_t(IC));
  std::copy_n(sA16, size_t(R) * IC, s.lora_wcat + wn);
  std::fill_n(s.lora_wcat + wn + size_t(R) * IC, size_t(ld - OC - R) * IC, uint16_t(0));
  gemm_bf16(false, false, T, IC, ld, 1.0f, d16, ld, s.lora_wcat, IC, 1.0f, dx, IC);
}

// bf16 LoRA's forward (LoraView::bf16, linear.h): xa = x16·bf16(A)ᵀ, then out = [x16 | bf16(xa) | 0]·
// [W | bf16(s·B) | 0]ᵀ. Where copying x16 costs less than another pass over out (IC < 2·OC: a bf16 row
// of x read and written against an f32 row of out read and written), one GEMM over the inner
// dimension lora_cat_cols(IC, R); else the base's GEMM and then out += bf16(xa)·bf16(s·B)ᵀ, the same products.
// On AMX (gemm_bf16_appended) always the concatenation's sums, without the copies of x16 and W.
void lora_forward_bf16(Isa isa, float* out, float* xa, const LinearInput& in, const LinearWeights& w,
                       const LinearScratch& s) {
  const WeightView& W = w.w;
  const LoraView& l = w.lora;
  const int T = in.T, IC = W.cols, OC = W.rows, R = l.rank, ld = lora_cat_cols(IC, R);
  LT_CHECK(in.x16, "linear_forward: bf16 LoRA needs x16");
  LT_CHECK(s.dy && s.lora_wt && s.lora_t16, "linear_forward: bf16 LoRA needs the dy, lora_wt and lora_t16 scratch");
  const auto* w16 = static_cast<const uint16_t*>(W.data);
  if (!W.quantized() && gemm_bf16_appends(T, IC, R)) {  // AMX: xa inside the base's pass over x16
    // A16 in dy (free in the forward on this path; T >= 64 rows of IC hold R of them)
    const uint16_t* A16 = rounded(static_cast<uint16_t*>(s.dy), l.A, size_t(R) * IC, "dy");
    for (size_t i = 0; i < size_t(OC) * R; ++i) s.lora_wt[i] = l.scale * l.B[i];
    const uint16_t* sB16 = rounded(s.lora_w16, s.lora_wt, size_t(OC) * R, "lora_w16");
    const LoraRankTerm rt{R, A16, true, IC, xa, s.lora_t16, R, sB16, R};
    if (gemm_bf16_lora(true, T, OC, IC, in.x16, IC, w16, IC, rt, 0.0f, out, OC)) return add_bias(out, w.bias, T, OC);
  }
  const uint16_t* A16 = rounded(s.lora_w16, l.A, size_t(R) * IC, "lora_w16");
  gemm_bf16(false, true, T, R, IC, 1.0f, in.x16, IC, A16, IC, 0.0f, xa, R);
  for (size_t i = 0; i < size_t(OC) * R; ++i) s.lora_wt[i] = l.scale * l.B[i];
  const uint16_t* xa16 = rounded(s.lora_t16, xa, size_t(T) * R, "lora_t16");
  const uint16_t* sB16 = rounded(s.lora_w16, s.lora_wt, size_t(OC) * R, "lora_w16");  // A16 is done with
  if (W.quantized()) {  // bf16 products: the decoded tiles' product, then the rank-R term
    quant_forward(isa, out, in.x, in.x16, W, T, s.tile, s.tile_bytes);
    gemm_bf16(false, true, T, OC, R, 1.0f, xa16, R, sB16, R, 1.0f, out, OC);
    return add_bias(out, w.bias, T, OC);
  }
  if (gemm_bf16_appended(true, T, OC, IC, in.x16, IC, w16, IC, R, xa16, R, sB16, R, 0.0f, out, OC)) {
    add_bias(out, w.bias, T, OC);  // AMX: the concatenation's sums without building it
    return;
  }
  if (IC >= 2 * OC) {
    gemm_bf16(false, true, T, OC, IC, 1.0f, in.x16, IC, w16, IC, 0.0f, out, OC);
    gemm_bf16(false, true, T, OC, R, 1.0f, xa16, R, sB16, R, 1.0f, out, OC);
  } else {
    LT_CHECK(s.lora_wcat, "linear_forward: bf16 LoRA needs the lora_wcat scratch (lora_wcat_bytes)");
    auto* x16 = static_cast<uint16_t*>(s.dy);
    uint16_t* wcat = s.lora_wcat;
    copy_rows(x16, size_t(ld), in.x16, size_t(IC), size_t(T), size_t(IC));
    copy_rows(x16 + IC, size_t(ld), xa16, size_t(R), size_t(T), size_t(R));
    zero_cols(x16, ld, IC + R, T);
    copy_rows(wcat, size_t(ld), w16, size_t(IC), size_t(OC), size_t(IC));
    copy_rows(wcat + IC, size_t(ld), sB16, size_t(R), size_t(OC), size_t(R));
    zero_cols(wcat, ld, IC + R, OC);
    gemm_bf16(false, true, T, OC, ld, 1.0f, x16, ld, wcat, ld, 0.0f, out, OC);
  }
  add_bias(out, w.bias, T, OC);
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

// out == nullptr (a checkpoint replay whose output is saved already): only xa, by the same product
// the whole forward runs for it, so the same bits
static void lora_xa_only(float* xa, const LinearInput& in, const LinearWeights& w, const LinearScratch& s) {
  const LoraView& l = w.lora;
  const int T = in.T, IC = w.w.cols, R = l.rank;
  LT_CHECK(xa && R > 0 && !l.dora(), "linear_forward: no output asked for needs a plain LoRA's xa output");
  if (l.bf16) {
    LT_CHECK(in.x16, "linear_forward: bf16 LoRA needs x16");
    const uint16_t* A16 = rounded(s.lora_w16, l.A, size_t(R) * IC, "lora_w16");
    return gemm_bf16(false, true, T, R, IC, 1.0f, in.x16, IC, A16, IC, 0.0f, xa, R);
  }
  gemm_f32(false, true, T, R, IC, 1.0f, dropped(in.x, T, IC, l, s), IC, l.A, IC, 0.0f, xa, R);
}

// Ops::gate_up_swiglu: L = [bf16(Ag); bf16(Au)], B2 (2F × R) in gemm_bf16_glu's interleaved order
// (gate rows [bf16(sg·Bg) | 0], up rows [0 | bf16(su·Bu)], as lora_forward_bf16 rounds them) and xa16
// side by side in dy, then the one product with the SwiGLU as its epilogue.
bool gate_up_swiglu(const GluOutputs& o, float* xa_g, float* xa_u, const LinearInput& in, const LinearWeights& g,
                    const LinearWeights& u, const LinearScratch& s) {
  const WeightView &Wg = g.w, &Wu = u.w;
  const int T = in.T, IC = Wg.cols, F = Wg.rows, Rg = g.lora.rank, Ru = u.lora.rank, R = Rg + Ru;
  if (Wg.kind != WeightKind::BF16 || Wu.kind != WeightKind::BF16 || g.bias || u.bias || !in.x16 || !o.h16 ||
      Wu.rows != F || Wu.cols != IC || o.F != F || (Rg > 0) != (Ru > 0) || R > 32)
    return false;
  const auto* wg = static_cast<const uint16_t*>(Wg.data);
  const auto* wu = static_cast<const uint16_t*>(Wu.data);
  if (R == 0) return gemm_bf16_glu(T, F, IC, in.x16, IC, wg, wu, IC, nullptr, o, avx512::swiglu_glu_block);
  if (!g.lora.bf16 || !u.lora.bf16 || !s.dy || !xa_g || !xa_u) return false;
  const size_t need = size_t(R) * IC + size_t(2 * F) * R + size_t(T) * R;
  if (need > size_t(T) * lora_cat_cols(F, Rg) || !amx::glu_fuses(T, F, IC, in.x16, IC)) return false;
  auto* L = static_cast<uint16_t*>(s.dy);
  uint16_t* B2 = L + size_t(R) * IC;
  uint16_t* xa16 = B2 + size_t(2 * F) * R;
  f32_to_half(DType::BF16, L, nullptr, g.lora.A, size_t(Rg) * IC);
  f32_to_half(DType::BF16, L + size_t(Rg) * IC, nullptr, u.lora.A, size_t(Ru) * IC);
  for (int n = 0; n < 2 * F; ++n) {
    const bool up = n / 16 % 2;
    const int f = n / 32 * 16 + n % 16, R0 = up ? Rg : 0, Rn = up ? Ru : Rg;
    const LoraView& l = up ? u.lora : g.lora;
    uint16_t* b = B2 + size_t(n) * R;
    std::fill(b, b + R, uint16_t(0));
    for (int r = 0; r < Rn; ++r) b[R0 + r] = f32_to_bf16(l.scale * l.B[size_t(f) * Rn + r]);
  }
  const LoraRankTerm rt{R, L, true, IC, xa_g, xa16, R, B2, R, Rg, xa_u};
  return gemm_bf16_glu(T, F, IC, in.x16, IC, wg, wu, IC, &rt, o, avx512::swiglu_glu_block);
}

void linear_forward(Isa isa, MatmulFn f32_matmul, float* out, float* xa, const LinearInput& in,
                    const LinearWeights& w, const LinearScratch& s) {
  check_linear(w, in.T);
  if (!out) return lora_xa_only(xa, in, w, s);
  const WeightView& W = w.w;
  const int T = in.T, IC = W.cols, OC = W.rows;
  LT_CHECK(xa || w.lora.rank == 0, "linear_forward: LoRA needs the xa output (T, R)");
  if (w.lora.dora()) return dora_forward(isa, f32_matmul, out, xa, in, w, s);
  if (w.lora.rank > 0 && w.lora.bf16) return lora_forward_bf16(isa, out, xa, in, w, s);
  if (W.kind == WeightKind::F32) {
    f32_matmul(out, in.x, static_cast<const float*>(W.data), w.bias, T, IC, OC);
  } else {
    const bool gemv = decode_gemv_applies(W, T) && !W.bf16_products;  // decode: W streamed once
    if (gemv) decode_gemv(isa, out, in, W, s.tile, s.tile_bytes);
    else if (W.half()) half_forward(out, in.x, in.x16, W, T, s.tile, s.tile_bytes);
    else quant_forward(isa, out, in.x, in.x16, W, T, s.tile, s.tile_bytes);
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
  if (w.lora.rank > 0 && w.lora.bf16) return lora_backward_input_bf16(isa, dx, dout, T, w, s);
  if (W.kind == WeightKind::F32)
    matmul_backward(dx, nullptr, nullptr, dout, nullptr, static_cast<const float*>(W.data), T, IC, OC);
  else if (W.half())
    half_backward(dx, nullptr, dout, nullptr, nullptr, W, T, s.dy, static_cast<float*>(s.tile));
  else
    quant_backward_input(isa, dx, dout, W, T, s.tile, s.tile_bytes, s.dy);
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

namespace {
// dB and dA of linear_backward_weight with LoraView::bf16 (linear.h)
void lora_backward_weight_bf16(const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                               const LinearWeights& w, const LinearScratch& s) {
  const LoraView& l = w.lora;
  const int T = in.T, IC = w.w.cols, OC = w.w.rows, R = l.rank;
  LT_CHECK(in.x16, "linear_backward_weight: bf16 LoRA needs x16");
  // bf16(dout) with row stride ld: linear_backward_input's [bf16(dout) | bf16(g)], or rounded here
  const int ld = g.dout16 ? lora_cat_cols(OC, R) : OC;
  const uint16_t* d16 = g.dout16 ? g.dout16 : rounded(static_cast<uint16_t*>(s.dy), dout, size_t(T) * OC, "dy");
  if (g.dB) {
    LT_CHECK(xa, "linear_backward_weight: dB needs the forward's xa (T, R)");
    LT_CHECK(s.lora_wt, "linear_backward_weight: bf16 LoRA needs the lora_wt scratch");
    const uint16_t* xa16 = rounded(s.lora_t16, xa, size_t(T) * R, "lora_t16");
    // dB += (s·xaᵀ·dout)ᵀ: the (R, OC) product is about twice as fast as the (OC, R) one in oneDNN
    gemm_bf16(true, false, R, OC, T, l.scale, xa16, R, d16, ld, 0.0f, s.lora_wt, OC);
    for (int o = 0; o < OC; ++o)
      for (int r = 0; r < R; ++r) g.dB[size_t(o) * R + r] += s.lora_wt[size_t(r) * OC + o];
  }
  if (!g.dA) return;
  if (g.dout16) {  // bf16(g) sits in the concatenation's last R columns
    gemm_bf16(true, false, R, IC, T, l.scale, d16 + OC, ld, in.x16, IC, 1.0f, g.dA, IC);  // dA += s·gᵀ·x
    return;
  }
  const float* gr = g.lora_g ? g.lora_g : lora_g_bf16(d16, T, w, s);
  const uint16_t* g16 = rounded(s.lora_t16, gr, size_t(T) * R, "lora_t16");
  gemm_bf16(true, false, R, IC, T, l.scale, g16, R, in.x16, IC, 1.0f, g.dA, IC);  // dA += s·gᵀ·x
}
}  // namespace

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
  if (l.bf16) return lora_backward_weight_bf16(g, dout, in, xa, w, s);
  if (g.dB) {
    LT_CHECK(xa, "linear_backward_weight: dB needs the forward's xa (T, R)");
    gemm_f32(true, false, OC, R, T, l.scale, dout, OC, xa, R, 1.0f, g.dB, R);  // dB += s·doutᵀ·xa
  }
  if (!g.dA) return;
  const float* gr = g.lora_g ? g.lora_g : lora_g(dout, T, w, s);
  const float* xin = dropped(in.x, T, IC, l, s);
  gemm_f32(true, false, R, IC, T, l.scale, gr, R, xin, IC, 1.0f, g.dA, IC);  // dA += s·gᵀ·xd
}

}  // namespace lt::cpu

namespace lt {

size_t lora_wcat_bytes(int T, int IC, int OC, int R) {
  size_t b = 0;
  if (!cpu::gemm_bf16_appends(T, IC, R) && IC < 2 * OC) b = size_t(OC) * lora_cat_cols(IC, R) * 2;  // forward
  if (!cpu::gemm_bf16_appends(T, OC, R)) b = std::max(b, size_t(lora_cat_cols(OC, R)) * IC * 2);  // backward
  return b;
}

}  // namespace lt
