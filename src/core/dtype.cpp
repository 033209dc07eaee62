// dtype sizes, names and the f16 conversions (bit-exact, round to nearest even).
#include "core/dtype.h"

#include "core/error.h"

namespace lt {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::I64: return 8;
    case DType::U8: case DType::I8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
  }
  return "?";
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));  // Inf / NaN
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    // subnormal: value = man * 2^-24
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static bool f16_value_is_bf16(uint16_t h) {
  const uint32_t exp = h & 0x7c00u, man = h & 0x3ffu;
  if (exp == 0x7c00u) return false;                // Inf and NaN (dtype.h)
  if (exp != 0) return (man & 7u) == 0;             // 11 significant bits: the low 3 must be zero
  return man == 0 || (32 - __builtin_clz(man)) - __builtin_ctz(man) <= 8;  // subnormal man·2^-24
}

bool f16_values_are_bf16(const uint16_t* h, size_t n) {
  constexpr size_t kChunk = 4096;
  for (size_t i0 = 0; i0 < n; i0 += kChunk) {
    const size_t end = i0 + kChunk < n ? i0 + kChunk : n;
    unsigned suspect = 0;  // a vectorizable pass: normal values with low bits clear are exact
    for (size_t i = i0; i < end; ++i) {
      const unsigned exp = h[i] & 0x7c00u;
      suspect |= (h[i] & 7u) | (exp == 0 || exp == 0x7c00u ? 8u : 0u);
    }
    if (!suspect) continue;
    for (size_t i = i0; i < end; ++i)
      if (!f16_value_is_bf16(h[i])) return false;
  }
  return true;
}

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00 | uint16_t((a >> 13) & 0x3ff);  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;  // rounds to >= 65520: Inf
  if (a < 0x38800000u) {  // below the smallest normal (2^-14): subnormal or zero
    if (a < 0x33000000u) return sign;  // < 2^-25 rounds to zero (2^-25 itself ties to even = 0)
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // 14 + (127 - e) - 1 ... bits to drop from the 24-bit mantissa
    // value = m * 2^(e-150); as f16 subnormal units of 2^-24: m * 2^(e-126)
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return sign | uint16_t(q);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round mantissa to 10 bits, ties to even
  return sign | uint16_t(((r >> 13) - (112u << 10)));
}

void convert_to_f32(float* dst, const void* src, DType t, size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    default:
      fail("cannot convert dtype {} to F32: only F32, F16 and BF16 tensors can be read as weights", dtype_name(t));
  }
}

}  // namespace lt
