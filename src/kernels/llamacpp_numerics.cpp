// kernels/llamacpp_numerics.h: llama.cpp's arithmetic, op for op. Compiled with -ffp-contract=off
// (CMakeLists.txt) so that the only fused multiply-adds are the std::fma calls, where ggml has one.
#include "kernels/llamacpp_numerics.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/ggml_blocks.h"
#include "kernels/q8_0_act.h"

namespace lt::llamacpp {

// hsum_float_8 (ggml-cpu arch/x86/quants.c): the 256-bit accumulator's lanes added as its SSE steps do
static float hsum8(const float v[8]) {
  const float t0 = v[0] + v[4], t1 = v[1] + v[5], t2 = v[2] + v[6], t3 = v[3] + v[7];
  return (t0 + t2) + (t1 + t3);
}

// _mm512_reduce_add_ps as GCC emits it: the halves, the quarters, then the pairs
static float reduce16(const float a[16]) {
  float u[4];
  for (int i = 0; i < 4; ++i) u[i] = (a[i] + a[i + 8]) + (a[i + 4] + a[i + 12]);
  return (u[0] + u[2]) + (u[1] + u[3]);
}

// ggml_v_expf, AVX-512 (ggml-cpu vec.h): exp(x) as 2^n · j(b), a polynomial on the reduced argument;
// |n| > 192 gives 0 or inf
static float v_expf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j =
      std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
               std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::isnan(n)) return n;  // scalef's NaN (a NaN input)
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, int(n));  // _mm512_scalef_ps(j, n): n is integral
}

void rmsnorm(float* out, const float* x, const float* w, int T, int C, float eps) {
  for (int t = 0; t < T; ++t) {
    const float* xr = x + size_t(t) * C;
    float* yr = out + size_t(t) * C;
    double sum = 0.0;
    for (int i = 0; i < C; ++i) sum += double(xr[i] * xr[i]);
    const float mean = float(sum / double(C));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int i = 0; i < C; ++i) yr[i] = (xr[i] * scale) * w[i];
  }
}

void rope(float* x, const int* pos, int T, int NH, int HS, float base) {
  const int half = HS / 2;
  const float ts = std::pow(base, -2.0f / float(HS));
  for (int t = 0; t < T; ++t) {
    float theta = float(pos[t]);
    for (int i = 0; i < half; ++i) {
      const float c = std::cos(theta), s = std::sin(theta);
      for (int h = 0; h < NH; ++h) {
        float* p = x + (size_t(t) * NH + h) * HS;
        const float x0 = p[i], x1 = p[i + half];
        p[i] = std::fma(x0, c, -(x1 * s));
        p[i + half] = std::fma(x0, s, x1 * c);
      }
      theta *= ts;
    }
  }
}

void swiglu(float* out, const float* g, const float* u, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = (g[i] / (1.0f + v_expf(0.0f - g[i]))) * u[i];
}

// one output: w's row (nb blocks) · x's quantized row
static float block_dot(const WeightView& w, int64_t row, const int8_t* xq, const float* xd, int nb) {
  float acc[8] = {};
  for (int b = 0; b < nb; ++b) {
    const uint8_t* blk = ggml_block(w, row * nb + b);
    const float d = ggml_block_scale(blk) * xd[b];
    const int8_t* xb = xq + size_t(b) * 32;
    for (int l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (int k = 4 * l; k < 4 * l + 4; ++k) s += ggml_block_code(w.kind, blk, k) * int32_t(xb[k]);
      acc[l] = std::fma(d, float(s), acc[l]);
    }
  }
  return hsum8(acc);
}

void block_linear(float* out, const float* x, const WeightView& w, const float* bias, int T, int8_t* xq, float* xd) {
  LT_CHECK(ggml_block_kind(w.kind) && w.cols % 32 == 0,
           "llama.cpp numerics: a {} weight ({} x {}) is not a q8_0 / q4_0 one", weight_kind_name(w.kind), w.rows,
           w.cols);
  const int IC = w.cols, OC = w.rows, nb = IC / 32;
  for (int t = 0; t < T; ++t) quantize_act_q8_0(x + size_t(t) * IC, IC, xq + size_t(t) * IC, xd + size_t(t) * nb);
#pragma omp parallel for schedule(static) if (int64_t(OC) * IC * T >= (1 << 16))
  for (int o = 0; o < OC; ++o)
    for (int t = 0; t < T; ++t) {
      const float y = block_dot(w, o, xq + size_t(t) * IC, xd + size_t(t) * nb, nb);
      out[size_t(t) * OC + o] = bias ? y + bias[o] : y;
    }
}

size_t attention_scratch_floats(int P, int HS) { return size_t((P + 63) / 64 * 64) + size_t(64) * HS; }

// ggml_vec_dot_f32 (AVX-512: 4 accumulators of 16 lanes over steps of 64, the tree, reduce16) of a
// head's key and query, elements taken in ggml's interleaved order
static float qk_dot(const float* kh, const float* qh, int HS) {
  const int half = HS / 2;
  float sum[4][16] = {};
  for (int g = 0; g < HS; ++g) {
    const int e = g / 2 + (g % 2) * half;  // ggml's element g is ours e
    float& a = sum[(g % 64) / 16][g % 16];
    a = std::fma(kh[e], qh[e], a);
  }
  float a[16];
  for (int l = 0; l < 16; ++l) a[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
  return reduce16(a);
}

// ggml_vec_soft_max_f32 over cells 0..n-1 of s (scaled scores), in place; the cells past n are
// masked (their exponentials are exact zeros, so their chunks add nothing)
static void soft_max(float* s, int n) {
  float mx = -INFINITY;
  for (int c = 0; c < n; ++c) mx = std::max(mx, s[c]);
  double sum = 0.0;
  for (int c0 = 0; c0 < n; c0 += 16) {
    float e[16] = {};
    for (int l = 0; l < 16 && c0 + l < n; ++l) e[l] = s[c0 + l] = v_expf(s[c0 + l] - mx);
    sum += double(reduce16(e));
  }
  const float inv = float(1.0 / sum);
  for (int c = 0; c < n; ++c) s[c] *= inv;
}

// out (HS) = Σ_c p[c] · v[c] over cells 0..n-1 in the order of llama.cpp's kqv product: tinyBLAS f32
// (lane c % 16, then reduce16) for a batch, ggml_vec_dot_f32 (lanes (c % 64) / 16 and c % 16 of
// 4 × 16, the tree, reduce16) for one token. acc: 64·HS floats.
static void weighted_values(float* out, const float* p, const float* v, size_t vstride, int n, int HS, bool batch,
                            float* acc) {
  const int lanes = batch ? 16 : 64;
  std::fill(acc, acc + size_t(lanes) * HS, 0.0f);
  for (int c = 0; c < n; ++c) {
    float* a = acc + size_t(c % lanes) * HS;
    const float* vc = v + size_t(c) * vstride;
    for (int d = 0; d < HS; ++d) a[d] = std::fma(vc[d], p[c], a[d]);
  }
  for (int d = 0; d < HS; ++d) {
    float r[16];
    for (int l = 0; l < 16; ++l) {
      auto at = [&](int j) { return acc[size_t(16 * j + l) * HS + d]; };
      r[l] = batch ? at(0) : (at(0) + at(2)) + (at(1) + at(3));
    }
    out[d] = reduce16(r);
  }
}

void attention(float* out, const float* q, const float* k, const float* v, int T, int pos0, int NH, int NKV, int HS,
               float* scratch, size_t scratch_floats) {
  LT_CHECK(HS % 64 == 0 && NKV > 0 && NH % NKV == 0,
           "llama.cpp numerics: head_dim {} (a multiple of 64 needed) with {} heads over {} key/value heads", HS, NH,
           NKV);
  const int P = pos0 + T, group = NH / NKV;
  const size_t KVD = size_t(NKV) * HS, per_thread = attention_scratch_floats(P, HS);
  const float scale = 1.0f / std::sqrt(float(HS));
  const int threads = int(std::min<size_t>(size_t(omp_get_max_threads()), scratch_floats / per_thread));
  LT_CHECK(threads >= 1, "llama.cpp numerics: attention over {} positions needs {} floats of scratch (got {})", P,
           per_thread, scratch_floats);
#pragma omp parallel for schedule(static) collapse(2) num_threads(threads) if (int64_t(T) * NH * P * HS >= (1 << 16))
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NH; ++h) {
      float* s = scratch + size_t(omp_get_thread_num()) * per_thread;
      float* acc = s + (per_thread - size_t(64) * HS);
      const float* qh = q + (size_t(t) * NH + h) * HS;
      const size_t kv_off = size_t(h / group) * HS;
      const int n = pos0 + t + 1;  // the cells query t sees
      for (int c = 0; c < n; ++c) s[c] = qk_dot(k + c * KVD + kv_off, qh, HS) * scale;
      soft_max(s, n);
      weighted_values(out + (size_t(t) * NH + h) * HS, s, v + kv_off, KVD, n, HS, T > 1, acc);
    }
}

}  // namespace lt::llamacpp
