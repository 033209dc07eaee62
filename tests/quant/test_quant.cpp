// Tests of src/quant: NF4 / FP4 code tables and packing, block-size and truncated-file errors,
// storage sizes, double quantization; and of its formats through the linear op's weight view:
// tiled dequantization (every ISA against the scalar reference, odd shapes), the fast linear
// forward and input-gradient against products with the dequantized matrix, and LLM.int8 against an
// fp64 reference within the int8 rounding bound.
// Byte-for-byte parity with bitsandbytes is tested in tests/python/test_quant_parity.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/decode_gemv.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"
#include "quant/int8.h"
#include "quant/quant4.h"
#include "quant/quant_tensor.h"

namespace lt {
namespace {

struct AlignedBuf {
  std::unique_ptr<void, decltype(&std::free)> p{nullptr, &std::free};
  size_t bytes = 0;
  explicit AlignedBuf(size_t n) : p(std::aligned_alloc(64, (n + 63) / 64 * 64 + 64), &std::free), bytes(n) {}
  void* get() const { return p.get(); }
};

struct Owned {
  AlignedBuf buf;
  QuantTensor q;
  Owned(const std::vector<float>& w, int64_t rows, int64_t cols, const QuantSpec& spec)
      : buf(quant_storage_bytes(spec, rows, cols)) {
    q = quantize_weight(buf.get(), buf.bytes, w.data(), rows, cols, spec);
  }
};

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> dequantized(const QuantTensor& q) {
  std::vector<float> out(size_t(q.numel()));
  dequantize_weight(out.data(), q);
  return out;
}

// The tile scratch the fast linear op needs for q on T tokens, and a scratch over it (short_by
// bytes less than it needs when asked).
size_t tile_bytes(const QuantTensor& q, int T) {
  return linear_tile_bytes(weight_kind(q.type), q.blocksize, q.double_quant, T, int(q.cols), int(q.rows));
}
LinearScratch scratch_of(const AlignedBuf& ws, size_t short_by = 0) {
  LinearScratch s;
  s.tile = ws.get();
  s.tile_bytes = ws.bytes - short_by;
  return s;
}

// y (T, OC) = x·Wᵀ through ops_cpu()'s linear op; dx (T, IC) += dy·W through train_ops_cpu()'s.
void fast_forward(float* y, const float* x, const QuantTensor& q, int T, float threshold, size_t short_by = 0) {
  AlignedBuf ws(tile_bytes(q, T));
  LinearWeights w;
  w.w = weight_view(q, threshold);
  ops_cpu().linear_forward(y, nullptr, {x, nullptr, T}, w, scratch_of(ws, short_by));
}
void fast_backward_input(float* dx, const float* dy, const QuantTensor& q, int T) {
  AlignedBuf ws(tile_bytes(q, T));
  LinearWeights w;
  w.w = weight_view(q, 0.0f);
  train_ops_cpu().linear_backward_input(dx, dy, T, w, scratch_of(ws));
}

std::vector<QuantSpec> all_specs(int blocksize) {
  return {{QuantType::NF4, blocksize, false}, {QuantType::NF4, blocksize, true}, {QuantType::FP4, blocksize, false},
          {QuantType::FP4, blocksize, true}, {QuantType::Int8, 64, false}};
}

std::string spec_name(const QuantSpec& s) {
  return std::string(quant_type_name(s.type)) + (s.double_quant ? "+dq" : "") + "/" + std::to_string(s.blocksize);
}

TEST(QuantTables, Nf4AndFp4Values) {
  const float* nf4 = code4_table(QuantType::NF4);
  EXPECT_EQ(nf4[0], -1.0f);
  EXPECT_EQ(nf4[7], 0.0f);
  EXPECT_EQ(nf4[15], 1.0f);
  EXPECT_FLOAT_EQ(nf4[1], -0.6961928009986877f);
  EXPECT_FLOAT_EQ(nf4[8], 0.07958029955625534f);
  for (int i = 1; i < 16; ++i) EXPECT_LT(nf4[i - 1], nf4[i]) << i;
  // FP4: sign bit 3, then the 3 magnitude bits {0, 0.0625, 8, 12, 4, 6, 2, 3} / 12.
  const float* fp4 = code4_table(QuantType::FP4);
  const float mag[8] = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(fp4[i], mag[i] / 12.0f) << i;
    EXPECT_EQ(fp4[i + 8], -(mag[i] / 12.0f)) << i;
  }
  EXPECT_TRUE(std::signbit(fp4[8]));  // code 8 is -0.0, as bitsandbytes' C++ dequantization
  const float* dyn = dynamic_map_signed();
  EXPECT_FLOAT_EQ(dyn[0], -0.99296875f);
  EXPECT_EQ(dyn[127], 0.0f);
  EXPECT_EQ(dyn[255], 1.0f);
  for (int i = 1; i < 256; ++i) EXPECT_LT(dyn[i - 1], dyn[i]) << i;
  EXPECT_THROW(code4_table(QuantType::Int8), Error);
}

TEST(QuantNf4, FirstElementInHighNibble) {
  std::vector<float> x(65, 0.0f);
  x[0] = 1.0f;    // code 15
  x[1] = -1.0f;   // code 0
  x[64] = 0.5f;   // alone in the short last block: code 15, padded with code 7 (zero)
  std::vector<uint8_t> codes(33);
  std::vector<float> absmax(2);
  quantize_4bit(codes.data(), absmax.data(), x.data(), 65, 64, QuantType::NF4);
  EXPECT_EQ(codes[0], 0xF0);
  EXPECT_EQ(codes[1], 0x77);
  EXPECT_EQ(codes[32], 0xF7);
  EXPECT_EQ(absmax[0], 1.0f);
  EXPECT_EQ(absmax[1], 0.5f);
  // FP4: +1 is code 3, -1 code 11 (sign bit set).
  quantize_4bit(codes.data(), absmax.data(), x.data(), 65, 64, QuantType::FP4);
  EXPECT_EQ(codes[0], 0x3B);
}

TEST(QuantNf4, CodeValuesRoundTripExactly) {
  // x built from code values times a per-block absmax (each block holds +absmax): quantizing must
  // give back those codes and dequantizing those exact floats.
  for (QuantType t : {QuantType::NF4, QuantType::FP4}) {
    const float* table = code4_table(t);
    const int64_t n = 64 * 9 + 21;
    std::mt19937 rng(7);
    std::vector<float> x(n);
    std::vector<int> want(n);
    for (int64_t i = 0; i < n; ++i) {
      const float a = 0.25f + float(i / 64);
      int c = int(rng() % 16);
      if (i % 64 == 0) c = t == QuantType::NF4 ? 15 : 3;  // +1.0: sets the block's absmax to a
      if (table[c] == 0.0f) c = t == QuantType::NF4 ? 7 : 0;  // FP4 has +0 and -0: expect +0
      want[i] = c;
      x[i] = table[c] * a;
    }
    std::vector<uint8_t> codes((n + 1) / 2);
    std::vector<float> absmax(10), back(n);
    quantize_4bit(codes.data(), absmax.data(), x.data(), n, 64, t);
    dequantize_4bit(back.data(), codes.data(), absmax.data(), n, 64, t);
    for (int64_t i = 0; i < n; ++i) {
      const int got = (i & 1) ? codes[i / 2] & 15 : codes[i / 2] >> 4;
      ASSERT_EQ(got, want[i]) << quant_type_name(t) << " element " << i;
      ASSERT_EQ(back[i], x[i]) << quant_type_name(t) << " element " << i;
    }
  }
}

TEST(QuantNf4, RoundTripWithinHalfTheLargestGap) {
  for (int bs : {64, 256, 4096}) {
    const int64_t n = 5000;
    auto x = randn(n, 3);
    std::vector<uint8_t> codes((n + 1) / 2);
    std::vector<float> absmax((n + bs - 1) / bs), back(n);
    quantize_4bit(codes.data(), absmax.data(), x.data(), n, bs, QuantType::NF4);
    dequantize_4bit(back.data(), codes.data(), absmax.data(), n, bs, QuantType::NF4);
    const float* t = code4_table(QuantType::NF4);
    float half_gap = 0;  // half the widest interval between NF4 values
    for (int c = 1; c < 16; ++c) half_gap = std::max(half_gap, (t[c] - t[c - 1]) / 2);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_LE(std::fabs(back[i] - x[i]), half_gap * absmax[i / bs] * 1.0001f) << "bs " << bs << " i " << i;
  }
}

TEST(QuantBlocksize, RejectsNonPowersOfTwoAndOutOfRange) {
  for (int bs : {0, -64, 32, 96, 100, 8192}) {
    try {
      check_blocksize4(bs);
      ADD_FAILURE() << "block size " << bs << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("power of two from 64 to 4096"), std::string::npos) << e.what();
    }
  }
  for (int bs : {64, 128, 256, 512, 1024, 2048, 4096}) EXPECT_NO_THROW(check_blocksize4(bs));
  std::vector<float> w(128, 1.0f);
  EXPECT_THROW(quant_storage_bytes({QuantType::NF4, 100, false}, 2, 64), Error);
  EXPECT_THROW(quant_storage_bytes({QuantType::Int8, 64, true}, 2, 64), Error);
  EXPECT_THROW(parse_quant_type("nf3"), Error);
}

// The linear op's reference decoding of weight_view(q) (kernels/ref/linear.cpp, from the view's
// parts and code tables alone) is bit for bit the format's own dequantization, for every format.
TEST(QuantTensorView, LinearOpDecodingOfTheViewIsDequantizeWeight) {
  for (const QuantSpec& spec : all_specs(64)) {
    const int64_t rows = 37, cols = 129;  // rows start mid-block and on odd elements
    auto w = randn(size_t(rows * cols), 4, 0.1f);
    Owned o(w, rows, cols, spec);
    const auto want = dequantized(o.q);
    const WeightView v = weight_view(o.q, 6.0f);
    EXPECT_EQ(v.kind, weight_kind(spec.type));
    EXPECT_EQ(v.qabsmax != nullptr, spec.double_quant);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(ref::weight_at(v, r, c), want[size_t(r * cols + c)]) << spec_name(spec) << " " << r << "," << c;
  }
}

TEST(QuantTensorView, TruncatedScalesAreAClearError) {
  const int64_t rows = 10, cols = 100;  // 1000 elements: 16 blocks of 64
  auto w = randn(rows * cols, 5);
  Owned plain(w, rows, cols, {QuantType::NF4, 64, false});
  QuantParts p;
  p.codes = plain.q.codes;
  p.codes_count = 500;
  p.absmax = plain.q.absmax;
  p.absmax_count = 15;
  try {
    quant_tensor_view({QuantType::NF4, 64, false}, rows, cols, p, "layers.0.q_proj");
    ADD_FAILURE() << "truncated absmax accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layers.0.q_proj"), std::string::npos) << m;
    EXPECT_NE(m.find("has 15 values, expected 16"), std::string::npos) << m;
    EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  }
  p.absmax_count = 16;
  const QuantTensor v = quant_tensor_view({QuantType::NF4, 64, false}, rows, cols, p, "ok");
  EXPECT_EQ(dequantized(v), dequantized(plain.q));
  p.codes_count = 499;
  EXPECT_THROW(quant_tensor_view({QuantType::NF4, 64, false}, rows, cols, p, "short codes"), Error);

  Owned dq(w, rows, cols, {QuantType::NF4, 64, true});
  QuantParts d;
  d.codes = dq.q.codes;
  d.codes_count = 500;
  d.qabsmax = dq.q.qabsmax;
  d.qabsmax_count = 16;
  d.absmax2 = dq.q.absmax2;
  d.absmax2_count = 0;
  d.offset = dq.q.offset;
  EXPECT_THROW(quant_tensor_view({QuantType::NF4, 64, true}, rows, cols, d, "no absmax2"), Error);
  d.absmax2_count = 1;
  EXPECT_EQ(dequantized(quant_tensor_view({QuantType::NF4, 64, true}, rows, cols, d, "ok")), dequantized(dq.q));

  QuantParts i8;
  EXPECT_THROW(quant_tensor_view({QuantType::Int8, 64, false}, rows, cols, i8, "missing"), Error);
}

TEST(QuantStorage, BytesPerParameter) {
  const int64_t rows = 4096, cols = 4096, n = rows * cols;
  const double nf4 = double(quant_storage_bytes({QuantType::NF4, 64, false}, rows, cols)) / n;
  const double nf4dq = double(quant_storage_bytes({QuantType::NF4, 64, true}, rows, cols)) / n;
  const double i8 = double(quant_storage_bytes({QuantType::Int8, 64, false}, rows, cols)) / n;
  EXPECT_NEAR(nf4, 0.5 + 4.0 / 64, 1e-6);
  EXPECT_NEAR(nf4dq, 0.5 + 1.0 / 64 + 4.0 / (64 * 256), 1e-6);  // 4.127 bits
  EXPECT_NEAR(nf4dq * 8, 4.127, 1e-3);
  EXPECT_NEAR(i8, 1.0 + 4.0 / cols, 1e-6);
  // Exact for a small odd shape: codes 130 (ceil(259/2)) + 5 absmax, each part 64-byte aligned.
  EXPECT_EQ(quant_storage_bytes({QuantType::FP4, 64, false}, 7, 37), 192u + 64u);
  EXPECT_EQ(quant_storage_bytes({QuantType::FP4, 64, true}, 7, 37), 192u + 64u + 64u);
}

TEST(QuantDoubleQuant, AbsmaxWithinDynamicMapError) {
  const int64_t nblocks = 700;  // 3 second-level blocks, the last short
  auto absmax = randn(nblocks, 11, 0.02f);
  for (auto& a : absmax) a = std::fabs(a) + 0.01f;
  std::vector<uint8_t> q(nblocks);
  std::vector<float> am2(3), back(nblocks);
  const float offset = double_quantize(q.data(), am2.data(), absmax.data(), nblocks);
  double mean = 0;
  for (float a : absmax) mean += a;
  mean /= nblocks;
  EXPECT_NEAR(offset, mean, 1e-6 * mean);
  double_dequantize(back.data(), q.data(), am2.data(), offset, 0, nblocks);
  for (int64_t i = 0; i < nblocks; ++i) {
    // The dynamic map's widest step near +-1 is 0.0141: half of it times the block's scale.
    EXPECT_LE(std::fabs(back[i] - absmax[i]), 0.0071f * am2[i / 256] + 1e-7f) << i;
  }
  // A sub-range starting mid-way gives the same values.
  std::vector<float> part(100);
  double_dequantize(part.data(), q.data(), am2.data(), offset, 250, 100);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(part[i], back[250 + i]);
}

TEST(QuantTorchMean, MatchesAccurateMeanAndIsOrderDependent) {
  for (int64_t n : {1, 5, 8, 37, 1000, 40000, 100001}) {
    auto x = randn(n, unsigned(n));
    double s = 0;
    for (float v : x) s += v;
    const float m1 = torch_mean_f32(x.data(), n, 1), m2 = torch_mean_f32(x.data(), n, 2);
    EXPECT_NEAR(m1, s / n, 1e-5) << n;
    if (n <= 32768) {
      EXPECT_EQ(m1, m2) << n;  // torch only splits the sum above 32768 elements
    }
  }
}

TEST(QuantDequantRows, EveryIsaMatchesReferenceOnOddShapes) {
  struct Shape { int64_t rows, cols; };
  for (Shape s : {Shape{37, 129}, Shape{130, 63}, Shape{5, 1}, Shape{3, 1001}, Shape{257, 16}, Shape{300, 401}}) {
    for (int bs : {64, 128}) {
      for (const QuantSpec& spec : all_specs(bs)) {
        auto w = randn(size_t(s.rows * s.cols), unsigned(s.rows * 31 + s.cols), 0.1f);
        Owned o(w, s.rows, s.cols, spec);
        const auto ref = dequantized(o.q);
        const WeightView view = weight_view(o.q, 0.0f);
        for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
          if (int(isa) > int(cpu_isa())) continue;
          // Tiles of 3 rows starting at odd rows: segments start mid-block and on low nibbles.
          std::vector<float> got(ref.size());
          for (int64_t r0 = 0; r0 < s.rows; r0 += 3) {
            const int64_t nr = std::min<int64_t>(3, s.rows - r0);
            std::vector<float> scratch(cpu::dequantize_rows_scratch_floats(view, nr) + 1);
            cpu::dequantize_rows(got.data() + r0 * s.cols, view, r0, nr, scratch.data(), isa);
          }
          for (size_t i = 0; i < ref.size(); ++i)
            ASSERT_EQ(got[i], ref[i]) << spec_name(spec) << " " << isa_name(isa) << " " << s.rows << "x" << s.cols
                                      << " element " << i;
          // All rows in one call (large enough to run in parallel).
          std::vector<float> scratch(cpu::dequantize_rows_scratch_floats(view, s.rows) + 1);
          cpu::dequantize_rows(got.data(), view, 0, s.rows, scratch.data(), isa);
          EXPECT_EQ(got, ref) << spec_name(spec) << " " << isa_name(isa) << " whole matrix";
        }
      }
    }
  }
}

// Σ_c |a[t,c]| |b[o,c]| for fp32-rounding tolerances.
double abs_dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int c = 0; c < n; ++c) s += std::fabs(double(a[c]) * b[c]);
  return s;
}

TEST(QuantLinear, ForwardAndInputGradientMatchDequantizedMatrix) {
  struct Dims { int T, IC, OC; };
  for (Dims d : {Dims{1, 129, 130}, Dims{5, 200, 257}, Dims{3, 64, 17}, Dims{2, 520, 130}}) {
    for (const QuantSpec& spec : all_specs(64)) {
      if (spec.type == QuantType::Int8) continue;  // forward is LLM.int8; tested below
      auto w = randn(size_t(d.OC) * d.IC, 21, 0.05f);
      Owned o(w, d.OC, d.IC, spec);
      const auto wd = dequantized(o.q);
      auto x = randn(size_t(d.T) * d.IC, 22), dy = randn(size_t(d.T) * d.OC, 23);
      std::vector<float> y(size_t(d.T) * d.OC), dx(size_t(d.T) * d.IC, 0.5f);
      fast_forward(y.data(), x.data(), o.q, d.T, 0.0f);
      fast_backward_input(dx.data(), dy.data(), o.q, d.T);
      for (int t = 0; t < d.T; ++t) {
        for (int oc = 0; oc < d.OC; ++oc) {
          double ref = 0;
          for (int c = 0; c < d.IC; ++c) ref += double(x[t * d.IC + c]) * wd[size_t(oc) * d.IC + c];
          const double tol = 1e-6 * abs_dot(&x[t * d.IC], &wd[size_t(oc) * d.IC], d.IC) + 1e-12;
          ASSERT_NEAR(y[t * d.OC + oc], ref, tol) << spec_name(spec) << " y[" << t << "," << oc << "]";
        }
        for (int c = 0; c < d.IC; ++c) {
          double ref = 0.5, mag = 0.5;
          for (int oc = 0; oc < d.OC; ++oc) {
            ref += double(dy[t * d.OC + oc]) * wd[size_t(oc) * d.IC + c];
            mag += std::fabs(double(dy[t * d.OC + oc]) * wd[size_t(oc) * d.IC + c]);
          }
          ASSERT_NEAR(dx[t * d.IC + c], ref, 1e-6 * mag) << spec_name(spec) << " dx[" << t << "," << c << "]";
        }
      }
      // a workspace short of the tile's is an error; a decode product (a few tokens) needs none
      if (!lt::cpu::decode_gemv_applies(weight_view(o.q, 0.0f), d.T)) {
        EXPECT_THROW(fast_forward(y.data(), x.data(), o.q, d.T, 0.0f, 64), Error);
      } else {
        EXPECT_NO_THROW(fast_forward(y.data(), x.data(), o.q, d.T, 0.0f, 64));
      }
    }
  }
}

TEST(QuantInt8, RowQuantizationRoundsHalfToEven) {
  const std::vector<float> w = {1.0f, -0.5f, 0.25f, 0.00393f, 0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<int8_t> q(8);
  std::vector<float> am(2);
  quantize_int8_rows(q.data(), am.data(), w.data(), 2, 4);
  EXPECT_EQ(am[0], 1.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -64);  // -63.5 -> -64 (half to even)
  EXPECT_EQ(q[2], 32);   // 31.75
  EXPECT_EQ(q[3], 0);    // 0.499
  EXPECT_EQ(am[1], 0.0f);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(q[i], 0);
  std::vector<float> back(8);
  dequantize_int8_rows(back.data(), q.data(), am.data(), 2, 4);
  EXPECT_EQ(back[0], (127.0f * 1.0f) * 7.874015718698502e-3f);
  EXPECT_EQ(back[5], 0.0f);
}

// The int8 product against fp64: each non-outlier column contributes at most
// |x| ew + |w| ex + ex ew of error (ex, ew: half a quantization step of the row), outlier
// columns only fp32 rounding against the dequantized weight.
void check_int8_linear(int T, int IC, int OC, float threshold, const std::vector<int>& outlier_cols, unsigned seed) {
  auto x = randn(size_t(T) * IC, seed), w = randn(size_t(OC) * IC, seed + 1, 0.05f);
  for (int c : outlier_cols) x[size_t(seed % T) * IC + c] = (c % 2 ? -1.0f : 1.0f) * (threshold + 2.0f);
  Owned o(w, OC, IC, {QuantType::Int8, 64, false});
  const auto wd = dequantized(o.q);
  std::vector<float> y(size_t(T) * OC);
  fast_forward(y.data(), x.data(), o.q, T, threshold);
  std::vector<char> is_out(IC, 0);
  for (int c : outlier_cols) is_out[c] = 1;
  for (int t = 0; t < T; ++t) {
    float ax = 0;
    for (int c = 0; c < IC; ++c)
      if (!is_out[c]) ax = std::max(ax, std::fabs(x[t * IC + c]));
    const double ex = ax / 254.0;
    for (int oc = 0; oc < OC; ++oc) {
      const double ew = o.q.row_absmax[oc] / 254.0;
      double ref = 0, bound = 0, mag = 0;
      for (int c = 0; c < IC; ++c) {
        const double xv = x[t * IC + c];
        if (is_out[c]) {
          ref += xv * wd[size_t(oc) * IC + c];
          mag += std::fabs(xv * wd[size_t(oc) * IC + c]);
        } else {
          const double wv = w[size_t(oc) * IC + c];
          ref += xv * wv;
          bound += std::fabs(xv) * ew + std::fabs(wv) * ex + ex * ew;
          mag += std::fabs(xv * wv);
        }
      }
      ASSERT_NEAR(y[t * OC + oc], ref, bound + 2e-6 * mag + 1e-7)
          << "T=" << T << " IC=" << IC << " OC=" << OC << " y[" << t << "," << oc << "]";
    }
  }
}

TEST(QuantInt8, MatmulWithinInt8RoundingBound) {
  check_int8_linear(1, 131, 45, 0.0f, {}, 1);
  check_int8_linear(7, 200, 130, 6.0f, {}, 2);
  check_int8_linear(5, 67, 19, 6.0f, {3, 50, 66}, 3);
  check_int8_linear(4, 300, 140, 6.0f, {0, 1, 2, 150, 299}, 4);
}

TEST(QuantInt8, OutlierColumnsExactToFp32Rounding) {
  // Only outlier columns carry signal: the result is their f32 product with the dequantized weight.
  const int T = 3, IC = 70, OC = 33;
  auto w = randn(size_t(OC) * IC, 9, 0.05f);
  std::vector<float> x(size_t(T) * IC, 0.0f);
  const std::vector<int> cols = {4, 31, 69};
  for (int t = 0; t < T; ++t)
    for (int c : cols) x[t * IC + c] = 7.0f + float(t) - 0.37f * float(c % 5);
  Owned o(w, OC, IC, {QuantType::Int8, 64, false});
  const auto wd = dequantized(o.q);
  std::vector<float> y(size_t(T) * OC);
  fast_forward(y.data(), x.data(), o.q, T, 6.0f);
  for (int t = 0; t < T; ++t)
    for (int oc = 0; oc < OC; ++oc) {
      double ref = 0;
      for (int c : cols) ref += double(x[t * IC + c]) * wd[size_t(oc) * IC + c];
      const double tol = 4 * 6e-8 * abs_dot(&x[t * IC], &wd[size_t(oc) * IC], IC);
      ASSERT_NEAR(y[t * OC + oc], ref, tol) << t << "," << oc;
    }
  // With outliers disabled the same input goes through int8 and differs from that f32 result.
  std::vector<float> y0(y.size());
  fast_forward(y0.data(), x.data(), o.q, T, 0.0f);
  double diff = 0;
  for (size_t i = 0; i < y.size(); ++i) diff = std::max(diff, double(std::fabs(y0[i] - y[i])));
  EXPECT_GT(diff, 1e-6);
}

TEST(QuantInt8, VnniEqualsScalarReference) {
  if (!cpu::int8_vnni_available(Isa::Avx512)) GTEST_SKIP() << "no AVX512-VNNI here (" << cpu_features_string() << ")";
  for (int IC : {1, 63, 64, 65, 200}) {
    const int T = 6, OC = 40;  // T*IC*OC >= 32768 at IC=200: the parallel loop runs
    auto x = randn(size_t(T) * IC, IC), w = randn(size_t(OC) * IC, IC + 1);
    std::vector<int8_t> xq(x.size()), wq(w.size());
    std::vector<float> ax(T), aw(OC), ys(size_t(T) * OC), yv(size_t(T) * OC);
    quantize_int8_rows(xq.data(), ax.data(), x.data(), T, IC);
    quantize_int8_rows(wq.data(), aw.data(), w.data(), OC, IC);
    xq[0] = -127;
    wq[0] = -127;  // extreme codes: the u8 offset trick must not overflow
    cpu::int8_gemm_scaled(ys.data(), xq.data(), ax.data(), wq.data(), aw.data(), T, IC, OC, false);
    cpu::int8_gemm_scaled(yv.data(), xq.data(), ax.data(), wq.data(), aw.data(), T, IC, OC, true);
    for (size_t i = 0; i < ys.size(); ++i) ASSERT_EQ(yv[i], ys[i]) << "IC=" << IC << " i=" << i;
  }
}

// The AVX2 integer loop (vpmaddubsw on |w| and x carrying w's sign) gives the scalar loop's bits
// at every ISA that takes it, including the extreme codes (-128 weights from a file, ±127
// activations: a pair sums to at most 32512, below int16 saturation) and tails after 32 columns.
// Codes of random x (T, IC) and w (OC, IC) with the extreme ones at both ends of their first rows
// (-128 weights from a file, ±127 activations), and the scalar loop's y.
struct Int8Operands {
  std::vector<int8_t> xq, wq;
  std::vector<float> ax, aw, ys;
  Int8Operands(int T, int IC, int OC, unsigned seed) : ax(T), aw(OC), ys(size_t(T) * OC) {
    auto x = randn(size_t(T) * IC, seed), w = randn(size_t(OC) * IC, seed + 1);
    xq.resize(x.size()), wq.resize(w.size());
    quantize_int8_rows(xq.data(), ax.data(), x.data(), T, IC);
    quantize_int8_rows(wq.data(), aw.data(), w.data(), OC, IC);
    xq[0] = -127, xq[size_t(IC) - 1] = 127;
    wq[0] = -128, wq[size_t(IC) - 1] = -128;
    cpu::int8_gemm_scaled(ys.data(), xq.data(), ax.data(), wq.data(), aw.data(), T, IC, OC, false);
  }
};

TEST(QuantInt8, EveryIsaIntegerLoopEqualsScalarReference) {
  for (int IC : {1, 31, 32, 33, 64, 577}) {
    const int T = 3, OC = 45;
    const Int8Operands op(T, IC, OC, IC + 7);
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
      if (!cpu_supports(isa)) continue;
      std::vector<float> y(op.ys.size(), NAN);
      cpu::int8_gemm_isa(isa, y.data(), op.xq.data(), op.ax.data(), op.wq.data(), op.aw.data(), T, IC, OC);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], op.ys[i]) << isa_name(isa) << " IC=" << IC << " i=" << i;
    }
  }
}

// The AMX int8 tiles give the scalar loop's bits (exact int32 sums, the same scaling): token and
// row counts past and short of the 32 x 32 blocks, inner sizes short of, at and past a 64-column
// chunk, the extreme codes, at 1 and 2 threads, scratch at an odd address.
using Int8ScratchFn = size_t (*)(int, int, int);
using Int8GemmFn = void (*)(float*, const int8_t*, const float*, const int8_t*, const float*, int, int, int, void*,
                           int);
void expect_scalar_bits(Int8ScratchFn scratch_bytes, Int8GemmFn gemm) {
  for (int IC : {1, 63, 64, 65, 577})
    for (auto [T, OC] : {std::pair{32, 45}, std::pair{70, 32}, std::pair{33, 100}}) {
      const Int8Operands op(T, IC, OC, IC + 9);
      for (int threads : {1, 2}) {
        std::vector<char> scratch(scratch_bytes(T, IC, threads) + 1);  // + 1: an odd start, unaligned
        std::vector<float> y(op.ys.size(), NAN);
        gemm(y.data(), op.xq.data(), op.ax.data(), op.wq.data(), op.aw.data(), T, IC, OC, scratch.data() + 1, threads);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], op.ys[i]) << "T=" << T << " IC=" << IC << " OC=" << OC << " threads " << threads
                                    << " i=" << i;
      }
    }
}

TEST(QuantInt8, AmxEqualsScalarReference) {
  if (!amx_int8_kernels()) GTEST_SKIP() << "no AMX int8 here (" << cpu_features_string() << ")";
  expect_scalar_bits(cpu::amx::int8_gemm_scratch_bytes, cpu::amx::int8_gemm);
}

// The VNNI panels (w + 128 against x, each lane started at -128·Σx) likewise.
TEST(QuantInt8, VnniPanelsEqualScalarReference) {
  if (!cpu::int8_vnni_available(Isa::Avx512)) GTEST_SKIP() << "no AVX512-VNNI here (" << cpu_features_string() << ")";
  expect_scalar_bits(cpu::vnni_int8::int8_gemm_scratch_bytes, cpu::vnni_int8::int8_gemm);
}

// quantize_int8_activations without outlier columns (the AVX-512 row loop where cpu_isa() is avx512)
// gives the scalar formula's codes and absmax: am = max|x|, q = clamp(nearbyint(x·((1/am)·127))),
// halves to even; rows of 37 (a masked tail) and 16, a zero row, exact ties.
TEST(QuantInt8, ActivationRowsEqualTheScalarFormula) {
  for (int IC : {37, 16}) {
    const int T = 5;
    auto x = randn(size_t(T) * IC, IC + 3);
    for (int c = 0; c < IC; ++c) x[size_t(2) * IC + c] = 0.0f;
    x[0] = 1.0f, x[1] = -0.5f, x[2] = 0.25f, x[3] = 1.5f / 127, x[4] = -2.5f / 127;  // ties at 1.5 and -2.5
    for (int c = 5; c < IC; ++c) x[c] = std::clamp(x[c], -0.9f, 0.9f);
    std::vector<int8_t> q(x.size());
    std::vector<float> am(T);
    std::vector<int32_t> cols(IC);
    ASSERT_EQ(cpu::quantize_int8_activations(q.data(), am.data(), cols.data(), x.data(), T, IC, 100.0f), 0);
    for (int t = 0; t < T; ++t) {
      float a = 0.0f;
      for (int c = 0; c < IC; ++c) a = std::max(a, std::fabs(x[size_t(t) * IC + c]));
      ASSERT_EQ(am[t], a) << "row " << t;
      const float sc = a > 0.0f ? (1.0f / a) * 127.0f : 0.0f;
      for (int c = 0; c < IC; ++c) {
        const float v = std::clamp(std::nearbyint(x[size_t(t) * IC + c] * sc), -127.0f, 127.0f);
        ASSERT_EQ(q[size_t(t) * IC + c], int8_t(v)) << "IC=" << IC << " row " << t << " column " << c;
      }
    }
    EXPECT_EQ(q[3], 2);   // 1.5 -> 2
    EXPECT_EQ(q[4], -2);  // -2.5 -> -2
  }
}

}  // namespace
}  // namespace lt
