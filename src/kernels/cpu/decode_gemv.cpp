// The decode products' dispatch (decode_gemv.h): which kernels apply, the ISA's row loop, and the
// split of output rows over the threads.
#include "kernels/cpu/decode_gemv.h"

#include <omp.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/carve.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ggml_blocks.h"
#include "kernels/q8_0_act.h"

namespace lt::cpu {

bool decode_gemv_applies(const WeightView& w, int T) {
  if (T < 1 || T > kDecodeMaxT) return false;
  if (w.half()) return true;
  if (ggml_block_kind(w.kind)) return w.cols % 32 == 0;
  if (!w.four_bit() || w.qabsmax || w.block_offset || !w.absmax) return false;
  return w.blocksize % 32 == 0 && w.cols % w.blocksize == 0;
}

static gemv::RowsFn rows_fn(Isa isa, const WeightView& w) {
  const bool half = w.half();
  switch (isa) {
    case Isa::Avx512:
      if (w.kind == WeightKind::BF16 && cpu_features().avx512_bf16) return gemv::avx512::bf16_dot_rows;
      return half ? gemv::avx512::half_rows : gemv::avx512::four_bit_rows;
    case Isa::Avx2: return half ? gemv::avx2::half_rows : gemv::avx2::four_bit_rows;
    case Isa::Scalar: break;
  }
  return half ? gemv::scalar::half_rows : gemv::scalar::four_bit_rows;
}

size_t decode_gemv_scratch_bytes(const WeightView& w, int T) {
  if (!ggml_block_kind(w.kind)) return 0;
  const size_t codes = kernels::align64(size_t(T) * w.cols);
  return 2 * codes + kernels::align64(size_t(T) * (w.cols / 32) * sizeof(float));  // codes, offsets, scales
}

namespace gemv {
void code_offsets(int32_t* off, const int8_t* q, int64_t n, int k) {
  for (int64_t i = 0; i < n / 4; ++i) off[i] = -k * (int32_t(q[4 * i]) + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
}

QuantizeFn act_quantizer(Isa isa) {
  return isa == Isa::Avx512 ? avx512::quantize_x : isa == Isa::Avx2 ? avx2::quantize_x : quantize_act_q8_0;
}
}  // namespace gemv

// The Q8_0 / Q4_0 products: x quantized once (kernels/q8_0_act.h), then the rows split as for every kind
static void decode_ggml_block(Isa isa, float* y, const LinearInput& in, const WeightView& w, void* scratch,
                        size_t scratch_bytes) {
  const size_t need = decode_gemv_scratch_bytes(w, in.T);
  LT_CHECK(scratch && scratch_bytes >= need, "decode_gemv: a {} weight needs {} bytes of scratch for the quantized "
           "input (got {})", weight_kind_name(w.kind), need, scratch_bytes);
  char* p = static_cast<char*>(scratch);
  int8_t* xq = kernels::carve<int8_t>(p, size_t(in.T) * w.cols);
  int32_t* xo = kernels::carve<int32_t>(p, size_t(in.T) * w.cols / 4);
  float* xd = kernels::carve<float>(p, size_t(in.T) * (w.cols / 32));
  const auto quantize = gemv::act_quantizer(isa);
  for (int t = 0; t < in.T; ++t)
    quantize(in.x + size_t(t) * w.cols, w.cols, xq + size_t(t) * w.cols, xd + size_t(t) * (w.cols / 32));
  const int OC = w.rows, chunks = (OC + kGemvRows - 1) / kGemvRows;
  const bool par = int64_t(OC) * w.cols >= (1 << 15) && chunks > 1;
  const bool q4 = w.kind == WeightKind::Q4_0;
  if (isa == Isa::Avx512 && cpu_features().avx512_vnni) {
    if (q4) gemv::avx512::q4_0_group_x(xq, xo, w.cols, in.T);
    else gemv::code_offsets(xo, xq, int64_t(in.T) * w.cols, 128);
    const gemv::QuantizedX x{xq, xd, xo, in.T};
    const auto fn = q4 ? gemv::avx512::q4_0_rows_vnni : gemv::avx512::q8_0_rows_vnni;
#pragma omp parallel for schedule(static) if (par)
    for (int c = 0; c < chunks; ++c) fn(y, x, w, c * kGemvRows, std::min(OC, (c + 1) * kGemvRows));
    return;
  }
  if (isa == Isa::Avx2 || isa == Isa::Avx512) {  // AVX-512 without VNNI: AVX2's
    if (q4) gemv::code_offsets(xo, xq, int64_t(in.T) * w.cols, 8);
    const gemv::QuantizedX x{xq, xd, xo, in.T};
    const auto fn = q4 ? gemv::avx2::q4_0_rows : gemv::avx2::q8_0_rows;
#pragma omp parallel for schedule(static) if (par)
    for (int c = 0; c < chunks; ++c) fn(y, x, w, c * kGemvRows, std::min(OC, (c + 1) * kGemvRows));
    return;
  }
  const gemv::Q8RowsFn fn = q4 ? gemv::scalar::q4_0_rows : gemv::scalar::q8_0_rows;
#pragma omp parallel for schedule(static) if (par)
  for (int c = 0; c < chunks; ++c) fn(y, xq, xd, in.T, w, c * kGemvRows, std::min(OC, (c + 1) * kGemvRows));
}

void decode_gemv(Isa isa, float* y, const LinearInput& in, const WeightView& w, void* scratch, size_t scratch_bytes) {
  LT_CHECK(decode_gemv_applies(w, in.T), "decode_gemv: a {} weight ({} x {}, T={}) is not one the decode products "
           "take", weight_kind_name(w.kind), w.rows, w.cols, in.T);
  LT_CHECK(cpu_supports(isa), "decode_gemv: this CPU ({}) cannot run the {} kernels", cpu_features_string(),
           isa_name(isa));
  LT_CHECK(w.kind != WeightKind::BF16 || in.x16 || isa != Isa::Avx512 || !cpu_features().avx512_bf16,
           "linear_forward: a bf16 weight needs the input's bf16 bits (LinearInput::x16)");
  if (ggml_block_kind(w.kind)) return decode_ggml_block(isa, y, in, w, scratch, scratch_bytes);
  const gemv::RowsFn fn = rows_fn(isa, w);
  const int OC = w.rows, chunks = (OC + kGemvRows - 1) / kGemvRows;
  const bool par = int64_t(OC) * w.cols >= (1 << 15) && chunks > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int c = 0; c < chunks; ++c) fn(y, in, w, c * kGemvRows, std::min(OC, (c + 1) * kGemvRows));
}

}  // namespace lt::cpu
