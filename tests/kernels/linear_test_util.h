// Helpers of the linear-op tests: one weight of each kind built from random parts (no quantizer:
// the op reads any view, so random codes, scales and code tables test it as well as real ones),
// inputs that fit the kind (16-bit values for 16-bit kinds, outlier columns for Int8), the scratch a
// call needs, and the float rounding bound both tolerances are derived from.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/linear.h"

namespace lt::test {

// Higham's γ_n = n·u / (1 - n·u), u = 2^-24: a sum of n f32 products, in any order and with or
// without FMA, is within γ_n · Σ|products| of the exact sum (each product is exact or rounded
// once, each of the n - 1 additions rounds once).
inline double gamma_n(double n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1 - n * u);
}

inline constexpr WeightKind kAllKinds[] = {WeightKind::F32, WeightKind::BF16, WeightKind::F16, WeightKind::Int8,
                                           WeightKind::NF4, WeightKind::FP4, WeightKind::Int4};

// A (rows, cols) weight of one kind and the parts its view points at. NF4 uses plain block scales,
// FP4 double-quantized ones, so both scale paths are covered; Int4 plain scales and block offsets
// (the asymmetric format).
struct KindWeight {
  WeightKind kind;
  int rows, cols;
  std::vector<float> f32, row_absmax, code_values, absmax, absmax2, absmax_code_values, block_offset;
  std::vector<uint16_t> h16;
  std::vector<int8_t> q8;
  std::vector<uint8_t> codes, qabsmax;
  float threshold = 1.5f;  // Int8 outlier threshold (inputs below are in [-1, 1] but for outlier columns)

  KindWeight(WeightKind k, int r, int c, unsigned seed) : kind(k), rows(r), cols(c) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.5f, 1.5f);
    const size_t n = size_t(r) * c, nblocks = (n + 63) / 64;
    for (size_t i = 0; i < n; ++i) f32.push_back(u(rng) * 0.5f);
    for (float v : f32) h16.push_back(k == WeightKind::F16 ? f32_to_f16(v) : f32_to_bf16(v));
    for (size_t i = 0; i < n; ++i) q8.push_back(int8_t(int(rng() % 255) - 127));
    for (int i = 0; i < r; ++i) row_absmax.push_back(pos(rng) * 0.02f);
    for (size_t i = 0; i < (n + 1) / 2; ++i) codes.push_back(uint8_t(rng()));
    for (int i = 0; i < 16; ++i) code_values.push_back(u(rng));
    for (size_t i = 0; i < nblocks; ++i) absmax.push_back(pos(rng) * 0.5f);
    for (size_t i = 0; i < nblocks; ++i) block_offset.push_back(u(rng) * 0.25f);
    for (size_t i = 0; i < nblocks; ++i) qabsmax.push_back(uint8_t(rng()));
    for (size_t i = 0; i < (nblocks + 255) / 256; ++i) absmax2.push_back(pos(rng) * 0.1f);
    for (int i = 0; i < 256; ++i) absmax_code_values.push_back(u(rng));
  }

  WeightView view() const {
    WeightView v;
    v.kind = kind;
    v.rows = rows;
    v.cols = cols;
    switch (kind) {
      case WeightKind::F32: v.data = f32.data(); break;
      case WeightKind::BF16:
      case WeightKind::F16: v.data = h16.data(); break;
      case WeightKind::Int8:
        v.data = q8.data();
        v.row_absmax = row_absmax.data();
        v.int8_threshold = threshold;
        break;
      case WeightKind::NF4:
      case WeightKind::FP4:
      case WeightKind::Int4:
        v.data = codes.data();
        v.blocksize = 64;
        v.code_values = code_values.data();
        if (kind == WeightKind::Int4) {
          v.absmax = absmax.data();
          v.block_offset = block_offset.data();
        } else if (kind == WeightKind::NF4) {
          v.absmax = absmax.data();
        } else {
          v.qabsmax = qabsmax.data();
          v.absmax2 = absmax2.data();
          v.absmax_code_values = absmax_code_values.data();
          v.offset = 0.25f;
        }
        break;
      case WeightKind::Q8_0:  // not in kAllKinds (rows of whole 32-blocks): test_decode_gemv, test_q8_0,
      case WeightKind::Q4_0:  // test_q4_0
        break;
    }
    return v;
  }
};

// x (T, IC) in [-1, 1] that fits the kind: 16-bit kinds' values rounded to the type (x16: the bits),
// Int8 with two outlier columns (one |x| above the threshold in each).
struct KindInput {
  std::vector<float> x;
  std::vector<uint16_t> x16;
  LinearInput in(int T) const { return {x.data(), x16.empty() ? nullptr : x16.data(), T}; }

  // bf16: bf16 values and their bits whatever the kind (a quantized weight's bf16 products)
  KindInput(const KindWeight& w, int T, unsigned seed, bool bf16 = false) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int IC = w.cols;
    for (size_t i = 0; i < size_t(T) * IC; ++i) x.push_back(u(rng));
    if (w.kind == WeightKind::Int8) {
      x[size_t(T - 1) * IC + 1] = 3.0f;
      x[IC - 2] = -2.5f;
    }
    if (w.kind != WeightKind::BF16 && w.kind != WeightKind::F16 && !bf16) return;
    for (float& v : x) {
      x16.push_back(w.kind == WeightKind::F16 ? f32_to_f16(v) : f32_to_bf16(v));
      v = w.kind == WeightKind::F16 ? f16_to_f32(x16.back()) : bf16_to_f32(x16.back());
    }
  }
};

// The scratch of one call of any backend, owned.
struct OwnedScratch {
  std::vector<float> tile, dy, g, xd, tmp, dora, wt;
  std::vector<uint16_t> w16, t16, wcat;
  LinearScratch s;
  OwnedScratch(const WeightView& w, int T, int R) {
    const size_t tb = std::max(linear_tile_bytes(w.kind, w.blocksize, w.qabsmax != nullptr, T, w.cols, w.rows,
                                                 w.bf16_products),
                               size_t(w.cols));
    tile.resize(tb / 4 + 16);
    dy.resize(linear_dy_bytes(w, T, lora_cat_cols(std::max(w.rows, w.cols), R)) / 4 + 1);  // bf16 LoRA
    g.resize(size_t(T) * std::max(R, 1));
    xd.resize(size_t(T) * w.cols);
    tmp.resize(size_t(T) * w.cols);
    dora.resize(size_t(T) * w.rows);
    w16.resize(size_t(std::max(R, 1)) * std::max(w.rows, w.cols));
    t16.resize(size_t(T) * std::max(R, 1));
    wt.resize(w16.size());
    wcat.resize(std::max(size_t(lora_cat_cols(w.rows, R)) * w.cols, size_t(w.rows) * lora_cat_cols(w.cols, R)));
    s = {tile.data(), tb, dy.data(), g.data(), xd.data(), tmp.data(), dora.data(), w16.data(), t16.data(),
         wt.data(), wcat.data()};
  }
};

// A LoRA of rank R on a (OC, IC) weight: none (R = 0), or random A, B, scale 1.5, dropout p.
struct OwnedLora {
  std::vector<float> A, B;
  LoraView v;
  OwnedLora(int R, int IC, int OC, float p, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t i = 0; i < size_t(R) * IC; ++i) A.push_back(u(rng) * 0.3f);
    for (size_t i = 0; i < size_t(OC) * R; ++i) B.push_back(u(rng) * 0.3f);
    v = {R, A.data(), B.data(), 1.5f, p, 0x1234u + seed};
  }
};

}  // namespace lt::test
