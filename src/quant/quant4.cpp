// NF4 / FP4 and 8-bit dynamic-map blockwise quantization, reproducing bitsandbytes 0.50.2 (CPU)
// bit for bit; see quant4.h for the rules. Tables are stored as f32 bit patterns copied from
// bitsandbytes.functional.get_4bit_type / create_dynamic_map (tests/python/test_quant_parity.py
// checks them against the installed bitsandbytes).
#include "quant/quant4.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/quant_layout.h"

namespace lt {
namespace {

constexpr uint32_t kNf4Bits[16] = {
    0xbf800000, 0xbf3239b1, 0xbf066b30, 0xbeca32a0, 0xbe91a24d, 0xbe3d353f, 0xbdba7871, 0x00000000,
    0x3da2faff, 0x3e24cae3, 0x3e7c04dd, 0x3ead033a, 0x3ee1a4b8, 0x3f1007ab, 0x3f3913b3, 0x3f800000,
};
// FP4 (1 sign, 2 exponent, 1 mantissa bits, bias 2) normalized by 12, in bit-pattern order. Code 8
// is -0.0 as in bitsandbytes' C++ dequantization table (fp4_lut); get_4bit_type has +0.0 there,
// which only its Python fallback dequantization uses.
constexpr uint32_t kFp4Bits[16] = {
    0x00000000, 0x3baaaaab, 0x3f2aaaab, 0x3f800000, 0x3eaaaaab, 0x3f000000, 0x3e2aaaab, 0x3e800000,
    0x80000000, 0xbbaaaaab, 0xbf2aaaab, 0xbf800000, 0xbeaaaaab, 0xbf000000, 0xbe2aaaab, 0xbe800000,
};
// torch.argsort of the FP4 table (stable): sorted position -> code. NF4 is already sorted.
constexpr uint8_t kFp4Order[16] = {11, 10, 13, 12, 15, 14, 9, 0, 8, 1, 6, 7, 4, 5, 2, 3};

constexpr uint32_t kDynamicMapBits[256] = {
    0xbf7e3333, 0xbf7a999a, 0xbf770000, 0xbf736666, 0xbf6fcccd, 0xbf6c3333, 0xbf68999a, 0xbf650000,
    0xbf616666, 0xbf5dcccd, 0xbf5a3333, 0xbf56999a, 0xbf530000, 0xbf4f6666, 0xbf4bcccd, 0xbf483333,
    0xbf44999a, 0xbf410000, 0xbf3d6666, 0xbf39cccd, 0xbf363334, 0xbf32999a, 0xbf2f0000, 0xbf2b6666,
    0xbf27cccd, 0xbf243334, 0xbf20999a, 0xbf1d0000, 0xbf196666, 0xbf15cccd, 0xbf123334, 0xbf0e999a,
    0xbf0b0000, 0xbf076666, 0xbf03cccc, 0xbf003333, 0xbef93332, 0xbef20000, 0xbeeacccc, 0xbee3999a,
    0xbedc6666, 0xbed53333, 0xbece0000, 0xbec6cccc, 0xbebf999a, 0xbeb86666, 0xbeb13333, 0xbeaa0000,
    0xbea2cccc, 0xbe9b999a, 0xbe946666, 0xbe8d3334, 0xbe860000, 0xbe7d9999, 0xbe6f3333, 0xbe60cccd,
    0xbe526666, 0xbe440000, 0xbe35999a, 0xbe273333, 0xbe18cccd, 0xbe0a6666, 0xbdf80000, 0xbddb3334,
    0xbdc9eb85, 0xbdc428f7, 0xbdbe6667, 0xbdb8a3d7, 0xbdb2e148, 0xbdad1eb8, 0xbda75c2a, 0xbda1999a,
    0xbd9bd70a, 0xbd96147b, 0xbd9051eb, 0xbd8a8f5d, 0xbd84cccd, 0xbd7e147b, 0xbd728f5d, 0xbd670a3d,
    0xbd5b851f, 0xbd500000, 0xbd447ae1, 0xbd38f5c3, 0xbd2d70a3, 0xbd21eb85, 0xbd166667, 0xbd0ae148,
    0xbcfeb852, 0xbce7ae15, 0xbcd0a3d7, 0xbcb9999a, 0xbca28f5d, 0xbc8b851f, 0xbc68f5c3, 0xbc3ae148,
    0xbc1f3b64, 0xbc160418, 0xbc0ccccd, 0xbc039581, 0xbbf4bc6a, 0xbbe24dd3, 0xbbcfdf3b, 0xbbbd70a4,
    0xbbab020d, 0xbb989374, 0xbb8624dd, 0xbb676c8a, 0xbb428f5c, 0xbb1db22d, 0xbaf1a9fc, 0xbaa7ef9d,
    0xba7765ff, 0xba59e83e, 0xba3c6a80, 0xba1eecc1, 0xba016f01, 0xb9c7e283, 0xb98ce705, 0xb923d70b,
    0xb8ba1f4b, 0xb88aefb3, 0xb8378034, 0xb7b24206, 0xb70205ff, 0xb65a1a94, 0xb513a3b7, 0x00000000,
    0x3513a3b7, 0x365a1a94, 0x370205ff, 0x37b24206, 0x38378034, 0x388aefb3, 0x38ba1f4b, 0x3923d70b,
    0x398ce705, 0x39c7e283, 0x3a016f01, 0x3a1eecc1, 0x3a3c6a80, 0x3a59e83e, 0x3a7765ff, 0x3aa7ef9d,
    0x3af1a9fc, 0x3b1db22d, 0x3b428f5c, 0x3b676c8a, 0x3b8624dd, 0x3b989374, 0x3bab020d, 0x3bbd70a4,
    0x3bcfdf3b, 0x3be24dd3, 0x3bf4bc6a, 0x3c039581, 0x3c0ccccd, 0x3c160418, 0x3c1f3b64, 0x3c3ae148,
    0x3c68f5c3, 0x3c8b851f, 0x3ca28f5d, 0x3cb9999a, 0x3cd0a3d7, 0x3ce7ae15, 0x3cfeb852, 0x3d0ae148,
    0x3d166667, 0x3d21eb85, 0x3d2d70a3, 0x3d38f5c3, 0x3d447ae1, 0x3d500000, 0x3d5b851f, 0x3d670a3d,
    0x3d728f5d, 0x3d7e147b, 0x3d84cccd, 0x3d8a8f5d, 0x3d9051eb, 0x3d96147b, 0x3d9bd70a, 0x3da1999a,
    0x3da75c2a, 0x3dad1eb8, 0x3db2e148, 0x3db8a3d7, 0x3dbe6667, 0x3dc428f7, 0x3dc9eb85, 0x3ddb3334,
    0x3df80000, 0x3e0a6666, 0x3e18cccd, 0x3e273333, 0x3e35999a, 0x3e440000, 0x3e526666, 0x3e60cccd,
    0x3e6f3333, 0x3e7d9999, 0x3e860000, 0x3e8d3334, 0x3e946666, 0x3e9b999a, 0x3ea2cccc, 0x3eaa0000,
    0x3eb13333, 0x3eb86666, 0x3ebf999a, 0x3ec6cccc, 0x3ece0000, 0x3ed53333, 0x3edc6666, 0x3ee3999a,
    0x3eeacccc, 0x3ef20000, 0x3ef93332, 0x3f003333, 0x3f03cccc, 0x3f076666, 0x3f0b0000, 0x3f0e999a,
    0x3f123334, 0x3f15cccd, 0x3f196666, 0x3f1d0000, 0x3f20999a, 0x3f243334, 0x3f27cccd, 0x3f2b6666,
    0x3f2f0000, 0x3f32999a, 0x3f363334, 0x3f39cccd, 0x3f3d6666, 0x3f410000, 0x3f44999a, 0x3f483333,
    0x3f4bcccd, 0x3f4f6666, 0x3f530000, 0x3f56999a, 0x3f5a3333, 0x3f5dcccd, 0x3f616666, 0x3f650000,
    0x3f68999a, 0x3f6c3333, 0x3f6fcccd, 0x3f736666, 0x3f770000, 0x3f7a999a, 0x3f7e3333, 0x3f800000,
};

template <size_t N>
std::array<float, N> floats_from_bits(const uint32_t (&bits)[N]) {
  std::array<float, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = std::bit_cast<float>(bits[i]);
  return out;
}

const std::array<float, 16> kNf4 = floats_from_bits(kNf4Bits);
const std::array<float, 16> kFp4 = floats_from_bits(kFp4Bits);
const std::array<float, 256> kDynamic = floats_from_bits(kDynamicMapBits);

// Midpoints between consecutive sorted code values (torch: (code[order[:-1]] + code[order[1:]]) / 2)
// and the sorted position -> code map.
struct Bounds4 {
  float mid[15];
  uint8_t code_of[16];
};

Bounds4 make_bounds(QuantType t) {
  Bounds4 b{};
  const float* table = code4_table(t);
  for (int i = 0; i < 16; ++i) b.code_of[i] = t == QuantType::FP4 ? kFp4Order[i] : uint8_t(i);
  for (int i = 0; i < 15; ++i) b.mid[i] = (table[b.code_of[i]] + table[b.code_of[i + 1]]) / 2.0f;
  return b;
}

const Bounds4& bounds4(QuantType t) {
  static const Bounds4 nf4 = make_bounds(QuantType::NF4), fp4 = make_bounds(QuantType::FP4);
  return t == QuantType::FP4 ? fp4 : nf4;
}

// torch.bucketize(s, mid) (right=False): the first i with s <= mid[i]; NaN goes past the end.
inline int bucketize15(float s, const float* mid) {
  int i = 0;
  while (i < 15 && !(s <= mid[i])) ++i;
  return i;
}

// torch.clamp(v, -1, 1): NaN stays NaN.
inline float clamp1(float v) { return std::isnan(v) ? v : std::min(std::max(v, -1.0f), 1.0f); }

// bitsandbytes' build_quantize_lut: 65536 bins over [-1, 1] -> nearest dynamic-map code.
struct Lut8 {
  uint8_t idx[65536];
  Lut8() {
    float mid[255];
    for (int i = 0; i < 255; ++i) mid[i] = (kDynamic[i] + kDynamic[i + 1]) * 0.5f;
    int c = 0;
    for (int i = 0; i < 65536; ++i) {
      float v = (2.0f * float(i)) / 65535.0f - 1.0f;
      while (c < 255 && mid[c] < v) ++c;
      idx[i] = uint8_t(c);
    }
  }
};

const Lut8& lut8() {
  static const Lut8 lut;
  return lut;
}

// torch's multi_row_sum / row_sum (aten/src/ATen/native/cpu/SumKernel.cpp) over values V
// (a float or an 8-lane vector), items fetched by load(i).
struct Vec8 {
  float v[8] = {};
  Vec8& operator+=(const Vec8& o) {
    for (int k = 0; k < 8; ++k) v[k] += o.v[k];
    return *this;
  }
};

inline int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  return 64 - std::countl_zero(uint64_t(x - 1));
}

template <class V, class Load>
V row_sum(const Load& load, int64_t size) {
  constexpr int64_t kLevels = 4, kRows = 4;
  const int64_t size_ilp = size / kRows;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(size_ilp) / kLevels);
  const int64_t level_step = int64_t(1) << level_power, level_mask = level_step - 1;
  V acc[kLevels][kRows] = {};
  int64_t i = 0;
  while (i + level_step <= size_ilp) {
    for (int64_t j = 0; j < level_step; ++j, ++i)
      for (int64_t k = 0; k < kRows; ++k) acc[0][k] += load(i * kRows + k);
    for (int64_t j = 1; j < kLevels; ++j) {
      for (int64_t k = 0; k < kRows; ++k) {
        acc[j][k] += acc[j - 1][k];
        acc[j - 1][k] = V{};
      }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < size_ilp; ++i)
    for (int64_t k = 0; k < kRows; ++k) acc[0][k] += load(i * kRows + k);
  for (int64_t j = 1; j < kLevels; ++j)
    for (int64_t k = 0; k < kRows; ++k) acc[0][k] += acc[j][k];
  V p = acc[0][0];
  for (int64_t i2 = size_ilp * kRows; i2 < size; ++i2) p += load(i2);
  for (int64_t k = 1; k < kRows; ++k) p += acc[0][k];
  return p;
}

// torch's cascade_sum of one contiguous range (the vectorized inner sum when n >= 8 lanes).
float torch_sum_range(const float* x, int64_t n) {
  if (n < 8) return 0.0f + row_sum<float>([&](int64_t i) { return x[i]; }, n);
  const int64_t nvec = n / 8;
  Vec8 v = row_sum<Vec8>([&](int64_t i) {
    Vec8 r;
    std::memcpy(r.v, x + i * 8, sizeof(r.v));
    return r;
  }, nvec);
  float acc = 0.0f;
  for (int64_t k = nvec * 8; k < n; ++k) acc += x[k];
  for (int k = 0; k < 8; ++k) acc += v.v[k];
  return 0.0f + acc;
}

}  // namespace

const float* code4_table(QuantType t) {
  LT_CHECK(t == QuantType::NF4 || t == QuantType::FP4, "code4_table: {} is not a 4-bit format", quant_type_name(t));
  return t == QuantType::FP4 ? kFp4.data() : kNf4.data();
}

const float* dynamic_map_signed() { return kDynamic.data(); }

void quantize_4bit(uint8_t* codes, float* absmax, const float* x, int64_t n, int blocksize, QuantType t) {
  check_blocksize4(blocksize);
  (void)code4_table(t);  // rejects Int8
  const Bounds4& b = bounds4(t);
  const int64_t nblocks = (n + blocksize - 1) / blocksize;
  const int64_t full = n / blocksize;
#pragma omp parallel for schedule(static) if (n >= quant::kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t i0 = blk * blocksize, i1 = std::min(n, i0 + blocksize);
    float am = 0.0f;
    bool nan = false;
    for (int64_t i = i0; i < i1; ++i) {
      nan |= std::isnan(x[i]);
      am = std::max(am, std::fabs(x[i]));
    }
    if (nan) am = std::nanf("");
    const bool short_block = blk >= full;
    float am_clamped = std::isnan(am) ? am : std::max(am, 1e-38f);
    absmax[blk] = short_block ? am_clamped : am;
    const float recip = 1.0f / am_clamped;
    // Codes for elements i0..i1; a pair (2j, 2j+1) shares byte j. Blocks start at even indices.
    for (int64_t i = i0; i < i1; i += 2) {
      uint8_t pair = 0;
      for (int64_t e = i; e < i + 2; ++e) {
        // e == i1 only past the last element of an odd count: torch pads with a zero.
        const float s = e < i1 ? clamp1(short_block ? x[e] / am_clamped : x[e] * recip) : 0.0f;
        pair = uint8_t(pair << 4 | b.code_of[bucketize15(s, b.mid)]);
      }
      codes[i / 2] = pair;
    }
  }
}

void dequantize_4bit(float* out, const uint8_t* codes, const float* absmax, int64_t n, int blocksize, QuantType t) {
  check_blocksize4(blocksize);
  const float* table = code4_table(t);
#pragma omp parallel for schedule(static) if (n >= quant::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t byte = codes[i >> 1];
    const int c = (i & 1) ? (byte & 15) : (byte >> 4);
    out[i] = table[c] * absmax[i / blocksize];
  }
}

float torch_mean_f32(const float* x, int64_t n, int torch_threads) {
  LT_CHECK(n > 0, "torch_mean_f32: empty input");
  constexpr int64_t kGrain = 32768;  // at::internal::GRAIN_SIZE
  int64_t chunks = 1;
  if (n > kGrain && torch_threads > 1) chunks = std::min<int64_t>(torch_threads, (n + kGrain - 1) / kGrain);
  float sum = 0.0f;
  if (chunks == 1) {
    sum = torch_sum_range(x, n);
  } else {
    const int64_t len = (n + chunks - 1) / chunks;
    for (int64_t s = 0; s < n; s += len) sum += torch_sum_range(x + s, std::min(len, n - s));
  }
  return sum / float(n);
}

void quantize_blockwise8(uint8_t* q, float* absmax, const float* x, int64_t n, int blocksize) {
  LT_CHECK(blocksize > 0, "quantize_blockwise8: block size {} must be positive", blocksize);
  const Lut8& lut = lut8();
  const int64_t nblocks = (n + blocksize - 1) / blocksize;
#pragma omp parallel for schedule(static) if (n >= quant::kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t i0 = blk * blocksize, i1 = std::min(n, i0 + blocksize);
    float am = -INFINITY;
    for (int64_t i = i0; i < i1; ++i) am = std::max(am, std::fabs(x[i]));  // NaNs are skipped
    am = std::max(0.0f, am);
    absmax[blk] = am;
    if (am == 0.0f) {
      std::memset(q + i0, 0, size_t(i1 - i0));
      continue;
    }
    const float inv = 1.0f / am;
    for (int64_t i = i0; i < i1; ++i) {
      const float v = std::clamp(x[i] * inv, -1.0f, 1.0f);
      const float t = std::fmaf((v + 1.0f) * 0.5f, 65535.0f, 0.5f);
      // cvttss2si then a 16-bit index: NaN gives 0x80000000, whose low half is 0.
      const int32_t i32 = std::isnan(t) || t >= 2147483648.0f ? INT32_MIN : int32_t(t);
      q[i] = lut.idx[uint16_t(i32)];
    }
  }
}

void dequantize_blockwise8(float* out, const uint8_t* q, const float* absmax, int64_t n, int blocksize) {
  for (int64_t i = 0; i < n; ++i) out[i] = kDynamic[q[i]] * absmax[i / blocksize];
}

float double_quantize(uint8_t* qabsmax, float* absmax2, const float* absmax, int64_t nblocks, int mean_threads) {
  const float offset = torch_mean_f32(absmax, nblocks, mean_threads);
  std::vector<float> centered(static_cast<size_t>(nblocks));
  for (int64_t i = 0; i < nblocks; ++i) centered[i] = absmax[i] - offset;
  quantize_blockwise8(qabsmax, absmax2, centered.data(), nblocks, 256);
  return offset;
}

void double_dequantize(float* absmax, const uint8_t* qabsmax, const float* absmax2, float offset, int64_t first,
                       int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t b = first + i;
    const float a = kDynamic[qabsmax[b]] * absmax2[b / 256];  // rounded before the add: no FMA
    absmax[i] = a + offset;
  }
}

}  // namespace lt
