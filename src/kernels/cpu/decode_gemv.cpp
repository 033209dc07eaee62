// The decode products' dispatch (decode_gemv.h): which kernels apply, the ISA's row loop, and the
// split of output rows over the threads.
#include "kernels/cpu/decode_gemv.h"

#include <omp.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/kernels.h"

namespace lt::cpu {

bool decode_gemv_applies(const WeightView& w, int T) {
  if (T < 1 || T > kDecodeMaxT) return false;
  if (w.half()) return true;
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

void decode_gemv(Isa isa, float* y, const LinearInput& in, const WeightView& w) {
  LT_CHECK(decode_gemv_applies(w, in.T), "decode_gemv: a {} weight ({} x {}, T={}) is not one the decode products "
           "take", weight_kind_name(w.kind), w.rows, w.cols, in.T);
  LT_CHECK(cpu_supports(isa), "decode_gemv: this CPU ({}) cannot run the {} kernels", cpu_features_string(),
           isa_name(isa));
  LT_CHECK(w.kind != WeightKind::BF16 || in.x16 || isa != Isa::Avx512 || !cpu_features().avx512_bf16,
           "linear_forward: a bf16 weight needs the input's bf16 bits (LinearInput::x16)");
  const gemv::RowsFn fn = rows_fn(isa, w);
  const int OC = w.rows, chunks = (OC + kGemvRows - 1) / kGemvRows;
  const bool par = int64_t(OC) * w.cols >= (1 << 15) && chunks > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int c = 0; c < chunks; ++c) fn(y, in, w, c * kGemvRows, std::min(OC, (c + 1) * kGemvRows));
}

}  // namespace lt::cpu
