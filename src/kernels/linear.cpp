// The linear op's operand helpers (kernels/linear.h): kind names, plain views, the dy scratch size
// and the operand checks every backend runs first. The tile size is the fast CPU path's
// (kernels/cpu/quant_linear.cpp), which every other backend's needs fit within.
#include "kernels/linear.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ref/ref.h"

namespace lt {

const char* weight_kind_name(WeightKind k) {
  switch (k) {
    case WeightKind::F32: return "f32";
    case WeightKind::BF16: return "bf16";
    case WeightKind::F16: return "f16";
    case WeightKind::Int8: return "int8";
    case WeightKind::NF4: return "nf4";
    case WeightKind::FP4: return "fp4";
    case WeightKind::Int4: return "int4";
    case WeightKind::Q8_0: return "q8_0";
    case WeightKind::Q4_0: return "q4_0";
  }
  return "?";
}

WeightView f32_weight(const float* w, int rows, int cols) {
  WeightView v;
  v.kind = WeightKind::F32;
  v.rows = rows;
  v.cols = cols;
  v.data = w;
  return v;
}

WeightView half_weight(WeightKind kind, const uint16_t* w, int rows, int cols) {
  LT_CHECK(kind == WeightKind::BF16 || kind == WeightKind::F16, "half_weight: {} is not a 16-bit kind",
           weight_kind_name(kind));
  WeightView v = f32_weight(nullptr, rows, cols);
  v.kind = kind;
  v.data = w;
  return v;
}

size_t linear_dy_bytes(WeightKind k, int T, int OC) {
  if (k == WeightKind::BF16) return size_t(T) * OC * sizeof(uint16_t);
  if (k == WeightKind::F16) return size_t(T) * OC * sizeof(float);
  return 0;
}

size_t linear_dy_bytes(const WeightView& w, int T, int OC) {
  return linear_dy_bytes(w.bf16_products && w.quantized() ? WeightKind::BF16 : w.kind, T, OC);
}

void check_linear(const LinearWeights& lw, int T) {
  const WeightView& w = lw.w;
  const char* k = weight_kind_name(w.kind);
  LT_CHECK(T >= 0 && w.rows > 0 && w.cols > 0 && w.data, "linear: a {} weight of shape ({}, {}) with {} data for "
           "T={}; expected positive shapes and the data pointer", k, w.rows, w.cols, w.data ? "its" : "no", T);
  if (w.kind == WeightKind::Int8)
    LT_CHECK(w.row_absmax && w.int8_threshold >= 0, "linear: an int8 weight needs row_absmax and a threshold >= 0 "
             "(got {})", w.int8_threshold);
  if (w.kind == WeightKind::Q8_0 || w.kind == WeightKind::Q4_0)
    LT_CHECK(w.cols % 32 == 0, "linear: a {} weight's rows must be whole blocks of 32 (got {} columns)", weight_kind_name(w.kind),
             w.cols);
  if (w.four_bit())
    LT_CHECK(w.code_values && w.blocksize > 0 && (w.absmax || (w.qabsmax && w.absmax2 && w.absmax_code_values)),
             "linear: a {} weight needs code_values, a block size and its scales (absmax, or qabsmax + absmax2 + "
             "absmax_code_values)", k);
  const LoraView& l = lw.lora;
  if (w.bf16_products)
    LT_CHECK(w.quantized() && !l.magnitude, "linear: bf16 products are for a quantized weight without DoRA (got a {} "
             "weight{})", k, l.magnitude ? " with DoRA" : "");
  if (l.rank > 0)
    LT_CHECK(l.A && l.B && l.dropout >= 0 && l.dropout < 1, "linear: a rank-{} LoRA needs A and B and a dropout in "
             "[0, 1) (got {})", l.rank, l.dropout);
  if (l.bf16)
    LT_CHECK(l.rank > 0 && (w.kind == WeightKind::BF16 || w.bf16_products) && l.dropout == 0 && !l.magnitude,
             "linear: bf16 LoRA products need a rank > 0, a bf16 weight (or a quantized one with bf16 products), no "
             "dropout and no DoRA (got rank {}, a {} weight{}, dropout {}{})", l.rank, k,
             w.bf16_products ? " with bf16 products" : "", l.dropout, l.magnitude ? ", DoRA" : "");
  if (l.magnitude) {
    LT_CHECK(l.rank > 0 && l.weight_norm, "linear: DoRA needs a LoRA (rank {}) and the weight norm", l.rank);
    LT_CHECK(l.dropout == 0 || !w.half(), "linear: DoRA with dropout on a {} weight is not supported (the base product "
             "of the dropped input would need it in 16 bits); use lora_dropout 0 or precision fp32", k);
  }
}

void dora_weight_norm(float* norm, const WeightView& w, const LoraView& l) {
  LT_CHECK(w.data && (l.rank == 0 || (l.A && l.B)), "dora_weight_norm: needs the weight (and A, B for rank {})",
           l.rank);
  const int OC = w.rows, IC = w.cols, R = l.rank;
  constexpr int kChunk = 256;
#pragma omp parallel for schedule(static)
  for (int o = 0; o < OC; ++o) {
    float v[kChunk];
    double ss = 0;
    for (int c0 = 0; c0 < IC; c0 += kChunk) {
      const int n = std::min(kChunk, IC - c0);
      for (int j = 0; j < n; ++j) v[j] = 0.0f;
      for (int r = 0; r < R; ++r) {
        const float b = l.B[size_t(o) * R + r];
        const float* a = l.A + size_t(r) * IC + c0;
        for (int j = 0; j < n; ++j) v[j] += b * a[j];
      }
      for (int j = 0; j < n; ++j) {
        const float e = w.kind == WeightKind::F32 ? static_cast<const float*>(w.data)[size_t(o) * IC + c0 + j]
                                                  : ref::weight_at(w, o, c0 + j);
        const float x = e + l.scale * v[j];
        ss += double(x) * x;
      }
    }
    norm[o] = float(std::sqrt(ss));
  }
}

}  // namespace lt
