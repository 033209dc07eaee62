// The decode products (decode_gemv.h) in plain C++: the loops every ISA's version follows (same
// blocking: 4-bit block sums scaled once per block), for LEANTUNE_ISA=scalar and CPUs without AVX2.
#include "core/dtype.h"
#include "kernels/cpu/decode_gemv.h"
#include "kernels/ggml_blocks.h"

namespace lt::cpu::gemv::scalar {

void half_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  const int IC = w.cols, OC = w.rows;
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  const bool bf16 = w.kind == WeightKind::BF16;
  for (int o = o0; o < o1; ++o) {
    const uint16_t* wr = w16 + size_t(o) * IC;
    for (int t = 0; t < in.T; ++t) {
      const float* x = in.x + size_t(t) * IC;
      float acc = 0.0f;
      for (int c = 0; c < IC; ++c) acc += x[c] * (bf16 ? bf16_to_f32(wr[c]) : f16_to_f32(wr[c]));
      y[size_t(t) * OC + o] = acc;
    }
  }
}

void four_bit_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  const int IC = w.cols, OC = w.rows, bs = w.blocksize;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  for (int o = o0; o < o1; ++o) {
    const int64_t f0 = int64_t(o) * IC;  // even: rows are whole blocks of an even size
    const uint8_t* cr = codes + f0 / 2;
    for (int t = 0; t < in.T; ++t) {
      const float* x = in.x + size_t(t) * IC;
      float acc = 0.0f;
      for (int b0 = 0; b0 < IC; b0 += bs) {
        float sum = 0.0f;
        for (int c = b0; c < b0 + bs; c += 2) {
          const uint8_t byte = cr[c / 2];
          sum += x[c] * w.code_values[byte >> 4];
          sum += x[c + 1] * w.code_values[byte & 15];
        }
        acc += sum * w.absmax[(f0 + b0) / bs];
      }
      y[size_t(t) * OC + o] = acc;
    }
  }
}

void q8_0_rows(float* y, const int8_t* xq, const float* xd, int T, const WeightView& w, int o0, int o1) {
  const int IC = w.cols, OC = w.rows, nb = IC / 32;
  const auto* blocks = static_cast<const uint8_t*>(w.data);
  for (int o = o0; o < o1; ++o) {
    const uint8_t* row = blocks + size_t(o) * nb * 34;
    for (int t = 0; t < T; ++t) {
      float acc = 0.0f;
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = row + size_t(b) * 34;
        const int8_t* x = xq + size_t(t) * IC + b * 32;
        int32_t sum = 0;
        for (int j = 0; j < 32; ++j) sum += int32_t(x[j]) * int8_t(blk[2 + j]);
        acc += (xd[size_t(t) * nb + b] * f16_to_f32(uint16_t(blk[0] | (blk[1] << 8)))) * float(sum);
      }
      y[size_t(t) * OC + o] = acc;
    }
  }
}

void q4_0_rows(float* y, const int8_t* xq, const float* xd, int T, const WeightView& w, int o0, int o1) {
  const int IC = w.cols, OC = w.rows, nb = IC / 32;
  for (int o = o0; o < o1; ++o)
    for (int t = 0; t < T; ++t) {
      float acc = 0.0f;
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = ggml_block(w, int64_t(o) * nb + b);
        const int8_t* x = xq + size_t(t) * IC + b * 32;
        int32_t sum = 0;
        for (int j = 0; j < 16; ++j)
          sum += int32_t(x[j]) * ((blk[2 + j] & 15) - 8) + int32_t(x[j + 16]) * ((blk[2 + j] >> 4) - 8);
        acc += (xd[size_t(t) * nb + b] * ggml_block_scale(blk)) * float(sum);
      }
      y[size_t(t) * OC + o] = acc;
    }
}

}  // namespace lt::cpu::gemv::scalar
