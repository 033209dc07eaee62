// The decode products (kernels/cpu/decode_gemv.h: T <= 3 tokens against BF16 / F16 / NF4 / Int4 /
// Q8_0 / Q4_0 weights) at every ISA level this CPU runs, through ops_cpu_for(isa).linear_forward and
// cpu::decode_gemv directly (including, on AVX-512, both the vdpbf16ps and the widening bf16
// loops), against the scalar reference (kernels/ref) on odd shapes: OC not a multiple of the 8-row
// work items nor of the vector width, IC with a tail after the last full vector (16-bit), several
// 4-bit block sizes, Q8_0 and Q4_0 rows of 1 to 48 blocks; 1 and 2 threads give the same bits.
// GgmlPrefill: the Q8_0 / Q4_0 prefill paths (T > 3, the AMX int8 tiles where the CPU has them, the
// AVX512-VNNI product where it has VNNI: also for T = 1-3, called directly).
//
// Tolerance: reference and fast kernels compute the same exact products of the same f32 operands
// (16-bit values are exact in f32, and a bf16·bf16 product is exact in f32 as vdpbf16ps forms it),
// only summed in another order: the reference adds x·(table[q]·s) left to right; the fast loops add
// x·table[q] into per-lane block sums, scale each block sum once by s, and add lanes and blocks in a
// tree. Q8_0 (and Q4_0, whose codes q − 8 are int8 too) quantizes x too (kernels/q8_0_act.h, the same function on both sides, so the same
// codes), and both sides form the same block terms (dx·dw)·Σ qx·qw (an exact int32 sum, one rounding
// of dx·dw, one of the product); the fast loops split each block's sum over 8 lanes (so up to 8 terms
// per block, each with those two roundings) and add them in another order: the bound above holds with
// Σ|x̃·w| over the quantized input x̃ = qx·dx in place of Σ|x·w|. Each term of Σ|x·w| passes through at most IC + 4 roundings either way (the product or the
// table·scale product, the scale of the block sum, and at most IC - 1 + 2 additions), so by Higham's
// bound each result is within γ_{IC+4}·Σ|terms| of the exact sum, and the two within twice that.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/decode_gemv.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/ops.h"
#include "kernels/q8_0_act.h"
#include "kernels/ref/ref.h"
#include "linear_test_util.h"

namespace lt::test {
namespace {

using Vec = std::vector<float>;

// One weight: 16-bit values, or 4-bit codes with per-block scales (no double quantization, no
// offset: the layouts the decode products take), and a fitting input.
struct DecodeCase {
  WeightKind kind;
  int T, IC, OC, bs;
  std::vector<uint16_t> h16, x16;
  std::vector<uint8_t> codes;
  Vec code_values, absmax, x;
  WeightView view() const {
    WeightView v;
    v.kind = kind, v.rows = OC, v.cols = IC;
    if (kind == WeightKind::BF16 || kind == WeightKind::F16) {
      v.data = h16.data();
    } else if (kind == WeightKind::Q8_0 || kind == WeightKind::Q4_0) {
      v.data = codes.data(), v.blocksize = 32;
    } else {
      v.data = codes.data(), v.blocksize = bs, v.code_values = code_values.data(), v.absmax = absmax.data();
    }
    return v;
  }
  LinearInput in() const { return {x.data(), x16.empty() ? nullptr : x16.data(), T}; }
  std::string name() const {
    return std::string(weight_kind_name(kind)) + " T=" + std::to_string(T) + " IC=" + std::to_string(IC) +
           " OC=" + std::to_string(OC) + (h16.empty() ? " bs=" + std::to_string(bs) : "");
  }
  DecodeCase(WeightKind k, int t, int ic, int oc, int blocksize, unsigned seed)
      : kind(k), T(t), IC(ic), OC(oc), bs(blocksize) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.5f, 1.5f);
    const size_t n = size_t(oc) * ic;
    const bool half = k == WeightKind::BF16 || k == WeightKind::F16;
    auto to16 = [&](float v) { return k == WeightKind::F16 ? f32_to_f16(v) : f32_to_bf16(v); };
    auto from16 = [&](uint16_t h) { return k == WeightKind::F16 ? f16_to_f32(h) : bf16_to_f32(h); };
    if (half)
      for (size_t i = 0; i < n; ++i) h16.push_back(to16(u(rng) * 0.5f));
    else if (k == WeightKind::Q8_0) {  // ggml's block_q8_0: f16 d, then 32 int8 codes (all of -128..127)
      for (size_t b = 0; b < n / 32; ++b) {
        const uint16_t d = f32_to_f16(pos(rng) * 4e-4f);
        codes.push_back(uint8_t(d & 255)), codes.push_back(uint8_t(d >> 8));
        for (int j = 0; j < 32; ++j) codes.push_back(uint8_t(rng()));
      }
    } else if (k == WeightKind::Q4_0) {  // ggml's block_q4_0: f16 d, then 16 bytes of nibbles (all of 0..15)
      for (size_t b = 0; b < n / 32; ++b) {
        const uint16_t d = f32_to_f16(pos(rng) * 6e-3f);
        codes.push_back(uint8_t(d & 255)), codes.push_back(uint8_t(d >> 8));
        for (int j = 0; j < 16; ++j) codes.push_back(uint8_t(rng()));
      }
    } else {
      for (size_t i = 0; i < n / 2; ++i) codes.push_back(uint8_t(rng()));
      for (int i = 0; i < 16; ++i) code_values.push_back(k == WeightKind::Int4 ? float(i - 8) : u(rng));
      for (size_t i = 0; i < n / size_t(bs); ++i) absmax.push_back(pos(rng) * 0.05f);
    }
    for (size_t i = 0; i < size_t(t) * ic; ++i) {
      float v = u(rng);
      if (half) x16.push_back(to16(v)), v = from16(x16.back());
      x.push_back(v);
    }
  }
};

std::vector<DecodeCase> cases() {
  std::vector<DecodeCase> v;
  unsigned seed = 3;
  for (int T = 1; T <= cpu::kDecodeMaxT; ++T) {
    for (WeightKind k : {WeightKind::BF16, WeightKind::F16})
      for (auto [IC, OC] : {std::pair{71, 150}, {33, 7}, {577, 193}, {64, 1}, {96, 9}}) v.emplace_back(k, T, IC, OC, 0, seed++);
    for (WeightKind k : {WeightKind::NF4, WeightKind::Int4})
      for (auto [IC, OC, bs] : {std::tuple{96, 150, 32}, {192, 7, 64}, {576, 193, 32}, {128, 1, 128}, {256, 17, 256}})
        v.emplace_back(k, T, IC, OC, bs, seed++);
    for (WeightKind k : {WeightKind::Q8_0, WeightKind::Q4_0})
      for (auto [IC, OC] : {std::pair{32, 150}, {96, 7}, {576, 193}, {64, 1}, {1536, 9}})
        v.emplace_back(k, T, IC, OC, 32, seed++);
  }
  return v;
}

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (cpu_supports(i)) v.push_back(i);
  return v;
}

// The scratch a linear_forward / decode_gemv call on c takes (Q8_0: its quantized input).
struct Scratch {
  std::vector<float> buf;
  explicit Scratch(const DecodeCase& c) : buf(linear_tile_bytes(c.kind, c.bs, false, c.T, c.IC, c.OC) / 4 + 16) {}
  LinearScratch linear() { return {buf.data(), buf.size() * 4}; }
};

// y_ref from the reference, and the bound 2·γ_{IC+4}·Σ|x·w| per element (Q8_0: x quantized)
void reference(const DecodeCase& c, Vec& y, std::vector<double>& bound) {
  const WeightView w = c.view();
  Vec xq = c.x;
  if (c.kind == WeightKind::Q8_0 || c.kind == WeightKind::Q4_0) fake_quantize_act_q8_0(c.x.data(), int64_t(c.x.size()), xq.data());
  y.assign(size_t(c.T) * c.OC, 0.0f);
  LinearWeights lw;
  lw.w = w;
  ops_ref().linear_forward(y.data(), nullptr, c.in(), lw, LinearScratch{});
  bound.assign(y.size(), 0.0);
  for (int t = 0; t < c.T; ++t)
    for (int o = 0; o < c.OC; ++o) {
      double m = 0;
      for (int i = 0; i < c.IC; ++i) m += std::fabs(double(xq[size_t(t) * c.IC + i]) * ref::weight_at(w, o, i));
      bound[size_t(t) * c.OC + o] = 2 * gamma_n(c.IC + 4) * m;
    }
}

void expect_within(const Vec& got, const Vec& want, const std::vector<double>& bound, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), bound[i]) << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

// ops_cpu_for(isa).linear_forward on c, checked against the reference within the bound; returns y
Vec forward_within(const DecodeCase& c, Isa isa, const Vec& y_ref, const std::vector<double>& bound, Scratch& s) {
  Vec y(y_ref.size(), NAN);
  LinearWeights lw;
  lw.w = c.view();
  ops_cpu_for(isa).linear_forward(y.data(), nullptr, c.in(), lw, s.linear());
  expect_within(y, y_ref, bound, c.name() + " " + isa_name(isa) + " (linear_forward)");
  return y;
}

// One q8_0 / q4_0 row loop called directly: within the bound from row 0, and from row 1 (so the
// rows pair up differently) the same bits. `grouped`: x rearranged by q4_0_group_x first.
using RowsLoop = void (*)(float*, const cpu::gemv::QuantizedX&, const WeightView&, int, int);
void expect_rows_alone_as_paired(const DecodeCase& c, const WeightView& w, const Vec& y_ref,
                                 const std::vector<double>& bound, RowsLoop fn, bool grouped, const std::string& what) {
  std::vector<int8_t> xq(c.x.size());
  Vec xd(c.x.size() / 32);
  std::vector<int32_t> xo(c.x.size() / 4);
  quantize_act_q8_0(c.x.data(), int64_t(c.x.size()), xq.data(), xd.data());
  if (grouped) cpu::gemv::avx512::q4_0_group_x(xq.data(), xo.data(), c.IC, c.T);
  else cpu::gemv::code_offsets(xo.data(), xq.data(), int64_t(xq.size()), c.kind == WeightKind::Q4_0 ? 8 : 128);
  const cpu::gemv::QuantizedX x{xq.data(), xd.data(), xo.data(), c.T};
  Vec y(y_ref.size(), NAN), y1(y_ref.size(), NAN);
  fn(y.data(), x, w, 0, c.OC);
  expect_within(y, y_ref, bound, c.name() + " " + what);
  fn(y1.data(), x, w, 1, c.OC);
  for (int t = 0; t < c.T; ++t)
    for (int o = 1; o < c.OC; ++o)
      ASSERT_EQ(f32_bits(y1[size_t(t) * c.OC + o]), f32_bits(y[size_t(t) * c.OC + o])) << c.name() << " " << what
                                                                                        << " row " << o;
}

TEST(DecodeGemv, EveryIsaMatchesReferenceOnOddShapes) {
  int checked = 0;
  for (const DecodeCase& c : cases()) {
    const WeightView w = c.view();
    ASSERT_TRUE(cpu::decode_gemv_applies(w, c.T)) << c.name();
    Vec y_ref;
    std::vector<double> bound;
    reference(c, y_ref, bound);
    for (Isa isa : isas()) {
      Scratch s(c);
      const Vec y = forward_within(c, isa, y_ref, bound, s);
      Vec y2(y_ref.size(), NAN);
      cpu::decode_gemv(isa, y2.data(), c.in(), w, s.buf.data(), s.buf.size() * 4);
      EXPECT_EQ(y2, y) << c.name() << " " << isa_name(isa);
      ++checked;
    }
    // the widening bf16 loop too where vdpbf16ps is what dispatch picks
    // the AVX2 q8_0 / q4_0 loop directly (on AVX-512 VNNI machines dispatch picks another), and the
    // AVX-512 VNNI loops directly (q4_0's on x grouped per 4 blocks by q4_0_group_x); each row's sums the
    // same whether it runs paired (rows two at a time from o0) or alone: from o0 = 1
    const bool q4 = c.kind == WeightKind::Q4_0;
    if ((c.kind == WeightKind::Q8_0 || q4) && cpu_supports(Isa::Avx2))
      expect_rows_alone_as_paired(c, w, y_ref, bound, q4 ? cpu::gemv::avx2::q4_0_rows : cpu::gemv::avx2::q8_0_rows,
                                  false, "avx2 rows");
    if ((c.kind == WeightKind::Q8_0 || q4) && cpu_supports(Isa::Avx512) && cpu_features().avx512_vnni)
      expect_rows_alone_as_paired(c, w, y_ref, bound, q4 ? cpu::gemv::avx512::q4_0_rows_vnni
                                                         : cpu::gemv::avx512::q8_0_rows_vnni, q4, "avx512 vnni rows");
    if (c.kind == WeightKind::BF16 && cpu_supports(Isa::Avx512)) {
      Vec y(y_ref.size(), NAN);
      cpu::gemv::avx512::half_rows(y.data(), c.in(), w, 0, c.OC);
      expect_within(y, y_ref, bound, c.name() + " avx512 widening");
    }
  }
  EXPECT_GE(checked, 90);
}

// The 16-bit row loops read 8 rows side by side for T = 1 (4 for T = 2-3; AVX2 2), each row with
// the one-row loop's arithmetic: a row computed alone (o1 = o0 + 1), in the groups from o0 = 0, or
// in groups shifted by 1 or 3 rows must give the same bits (a group that sums a row in another
// order, or mixes rows up, differs here even where it stays inside the rounding bound).
TEST(DecodeGemv, SixteenBitRowsGroupedOrAloneGiveTheSameBits) {
  using RowFn = void (*)(float*, const LinearInput&, const WeightView&, int, int);
  int checked = 0;
  for (const DecodeCase& c : cases()) {
    if (c.kind != WeightKind::F16 && c.kind != WeightKind::BF16) continue;
    const WeightView w = c.view();
    std::vector<std::pair<RowFn, std::string>> fns;
    if (cpu_supports(Isa::Avx2)) fns.emplace_back(cpu::gemv::avx2::half_rows, "avx2 half_rows");
    if (cpu_supports(Isa::Avx512)) fns.emplace_back(cpu::gemv::avx512::half_rows, "avx512 half_rows");
    if (c.kind == WeightKind::BF16 && cpu_supports(Isa::Avx512) && cpu_features().avx512_bf16)
      fns.emplace_back(cpu::gemv::avx512::bf16_dot_rows, "avx512 bf16_dot_rows");
    for (const auto& [fn, what] : fns) {
      const size_t n = size_t(c.T) * c.OC;
      Vec y(n, NAN), alone(n, NAN);
      fn(y.data(), c.in(), w, 0, c.OC);
      for (int o = 0; o < c.OC; ++o) fn(alone.data(), c.in(), w, o, o + 1);
      for (int shift : {1, 3}) {
        if (shift >= c.OC) continue;
        Vec ys(n, NAN);
        fn(ys.data(), c.in(), w, shift, c.OC);
        for (int t = 0; t < c.T; ++t)
          for (int o = shift; o < c.OC; ++o)
            ASSERT_EQ(f32_bits(ys[size_t(t) * c.OC + o]), f32_bits(y[size_t(t) * c.OC + o]))
                << c.name() << " " << what << " from row " << shift << ", row " << o << " token " << t;
      }
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(f32_bits(alone[i]), f32_bits(y[i])) << c.name() << " " << what << " alone, element " << i;
      ++checked;
    }
  }
  if (cpu_supports(Isa::Avx2)) EXPECT_GE(checked, 30);
}

// Makes c (Q8_0 / Q4_0) a case of integers: every block's scale 1 and x integers with 127 in each
// block (so its q8_0 codes are x and its scales 1). Returns the exact products, summed in int64.
static Vec integer_blocks(DecodeCase& c, unsigned seed) {
  const size_t kb = c.kind == WeightKind::Q8_0 ? 34 : 18;
  for (size_t b = 0; b < c.codes.size() / kb; ++b) c.codes[b * kb] = 0x00, c.codes[b * kb + 1] = 0x3c;  // f16 1
  std::mt19937 rng(seed);
  for (size_t i = 0; i < c.x.size(); ++i) c.x[i] = i % 32 == 7 ? 127.0f : float(int(rng() % 255) - 127);
  Vec exact(size_t(c.T) * c.OC);
  const WeightView w = c.view();
  for (int t = 0; t < c.T; ++t)
    for (int o = 0; o < c.OC; ++o) {
      int64_t sum = 0;
      for (int i = 0; i < c.IC; ++i) sum += int64_t(ref::weight_at(w, o, i)) * int64_t(c.x[size_t(t) * c.IC + i]);
      exact[size_t(t) * c.OC + o] = float(sum);
    }
  return exact;
}

// Q8_0 / Q4_0 integer blocks (integer_blocks): every product and partial sum is an integer below
// 2^24, exact in f32 in any order, so every path must give the exact sum, bit for bit: an error of
// one in one lane's code offset or a code paired with the wrong x, which the rounding bound above
// can miss, fails here.
TEST(DecodeGemv, IntegerBlocksGiveTheExactSum) {
  unsigned seed = 90;
  for (WeightKind k : {WeightKind::Q8_0, WeightKind::Q4_0})
    for (int T = 1; T <= cpu::kDecodeMaxT; ++T)
      for (int IC : {32, 96, 128, 576, 1536}) {
        if (k == WeightKind::Q8_0 && IC > 576) continue;  // 1536 · 128 · 127 would pass 2^24
        DecodeCase c(k, T, IC, 11, 32, seed++);
        const Vec exact = integer_blocks(c, seed);
        for (Isa isa : isas()) {
          Scratch s(c);
          Vec y(exact.size(), NAN);
          cpu::decode_gemv(isa, y.data(), c.in(), c.view(), s.buf.data(), s.buf.size() * 4);
          EXPECT_EQ(y, exact) << c.name() << " " << isa_name(isa);
        }
      }
}

TEST(DecodeGemv, ThreadCountDoesNotChangeBits) {
  for (const DecodeCase& c : cases()) {
    if (c.OC < 100) continue;
    for (Isa isa : isas()) {
      Vec y1(size_t(c.T) * c.OC), y2(y1.size());
      Scratch s(c);
      const int saved = omp_get_max_threads();
      omp_set_num_threads(1);
      cpu::decode_gemv(isa, y1.data(), c.in(), c.view(), s.buf.data(), s.buf.size() * 4);
      omp_set_num_threads(2);
      cpu::decode_gemv(isa, y2.data(), c.in(), c.view(), s.buf.data(), s.buf.size() * 4);
      omp_set_num_threads(saved);
      EXPECT_EQ(y1, y2) << c.name() << " " << isa_name(isa);
    }
  }
}

TEST(DecodeGemv, LayoutsItDoesNotTakeGoToTheTiledPath) {
  DecodeCase c(WeightKind::NF4, 1, 96, 8, 32, 1);
  WeightView w = c.view();
  EXPECT_TRUE(cpu::decode_gemv_applies(w, 1));
  EXPECT_FALSE(cpu::decode_gemv_applies(w, cpu::kDecodeMaxT + 1));
  w.cols = 80;  // rows not whole blocks
  EXPECT_FALSE(cpu::decode_gemv_applies(w, 1));
  w = c.view();
  w.block_offset = c.absmax.data();  // asymmetric int4
  EXPECT_FALSE(cpu::decode_gemv_applies(w, 1));
  DecodeCase q8(WeightKind::Q8_0, 1, 64, 8, 32, 2);
  w = q8.view();
  EXPECT_TRUE(cpu::decode_gemv_applies(w, 1));
  w.cols = 48;  // q8_0 rows not whole blocks of 32
  EXPECT_FALSE(cpu::decode_gemv_applies(w, 1));
  w = c.view();
  w.kind = WeightKind::Int8;
  EXPECT_FALSE(cpu::decode_gemv_applies(w, 1));
  EXPECT_THROW(cpu::decode_gemv(Isa::Scalar, nullptr, c.in(), w), Error);
}

// The q8_0 / q4_0 prefill products (T > 3: quant_linear.cpp's decoded tiles, and on CPUs with AMX
// int8 the tile product of ggml_gemm_amx.cpp) against the same reference and bound: the AMX path
// forms each block term with one FMA (fewer roundings than the reference's multiply and add) and
// adds them in block order. Token counts around the 16-token tiles, rows around the 16-row tiles.
TEST(GgmlPrefill, EveryPathMatchesReferenceOnOddShapes) {
  unsigned seed = 100;
  int checked = 0;
  for (WeightKind k : {WeightKind::Q8_0, WeightKind::Q4_0})
    for (int T : {4, 15, 16, 17, 40})
      for (auto [IC, OC] : {std::pair{32, 150}, {96, 7}, {576, 33}, {64, 1}, {1536, 16}}) {
        const DecodeCase c(k, T, IC, OC, 32, seed++);
        const WeightView w = c.view();
        ASSERT_FALSE(cpu::decode_gemv_applies(w, c.T)) << c.name();
        Vec y_ref;
        std::vector<double> bound;
        reference(c, y_ref, bound);
        for (Isa isa : isas()) {
          Scratch s(c);
          forward_within(c, isa, y_ref, bound, s);
          ++checked;
        }
        if (!cpu_supports(Isa::Avx512) || !amx_int8_kernels()) continue;
        std::vector<char> scratch(cpu::amx::ggml_forward_scratch_bytes(T, IC, 2) + 64);
        void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
        Vec y1(y_ref.size(), NAN), y2(y_ref.size(), NAN);
        cpu::amx::ggml_forward(y1.data(), c.x.data(), w, T, aligned, 1);
        expect_within(y1, y_ref, bound, c.name() + " amx");
        cpu::amx::ggml_forward(y2.data(), c.x.data(), w, T, aligned, 2);
        EXPECT_EQ(y1, y2) << c.name() << " amx, 1 and 2 threads";
      }
  EXPECT_GE(checked, 50);
}

// The AVX512-VNNI prefill product (ggml_gemm_vnni_avx512.cpp) called directly on `threads` threads,
// with the scratch it asks for.
Vec vnni_forward(const DecodeCase& c, int threads) {
  std::vector<char> scratch(cpu::vnni::ggml_forward_scratch_bytes(c.T, c.IC, threads) + 64);
  void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
  Vec y(size_t(c.T) * c.OC, NAN);
  cpu::vnni::ggml_forward(y.data(), c.x.data(), c.view(), c.T, aligned, threads);
  return y;
}

bool vnni_here() { return cpu_supports(Isa::Avx512) && cpu_features().avx512_vnni; }

// The VNNI product against the reference within the bound above: it forms the AMX path's terms (each
// block's Σ qx·qw exact in int32 — at most 32·128·255 in magnitude with its offset, so exact as a
// float too —, one rounding of dx·dw, then one FMA per block in block order), which round no more
// often than the reference's multiply and add, so each result is within γ_{IC+4}·Σ|x̃·w| of the
// exact sum like the reference and the two within twice that. Token counts around the 6-token
// register tiles (1, 2, 5, 17, 33, 128), rows around the 16-row vectors and 32-row work items
// (OC 1, 7, 33, 47, 150); 1, 2 and 3 threads give the same bits (3 threads split the tokens of a
// weight with fewer row groups than twice the team); linear_forward at the avx512 level runs this
// product for T > 3 where there is no AMX int8 and the AMX one where there is, both the same bits.
TEST(GgmlPrefill, VnniMatchesReferenceOnOddShapes) {
  if (!vnni_here()) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  unsigned seed = 300;
  for (WeightKind k : {WeightKind::Q8_0, WeightKind::Q4_0})
    for (int T : {1, 2, 5, 17, 33, 128})
      for (auto [IC, OC] : {std::pair{32, 150}, {96, 7}, {576, 33}, {64, 1}, {1536, 47}, {2048, 40}}) {
        const DecodeCase c(k, T, IC, OC, 32, seed++);
        Vec y_ref;
        std::vector<double> bound;
        reference(c, y_ref, bound);
        const Vec y1 = vnni_forward(c, 1);
        expect_within(y1, y_ref, bound, c.name() + " vnni");
        EXPECT_EQ(vnni_forward(c, 2), y1) << c.name() << " vnni, 1 and 2 threads";
        EXPECT_EQ(vnni_forward(c, 3), y1) << c.name() << " vnni, 1 and 3 threads";
        if (T <= cpu::kDecodeMaxT) continue;  // linear_forward runs the decode rows
        Scratch s(c);
        Vec y(y_ref.size(), NAN);
        LinearWeights lw;
        lw.w = c.view();
        ops_cpu_for(Isa::Avx512).linear_forward(y.data(), nullptr, c.in(), lw, s.linear());
        EXPECT_EQ(y, y1) << c.name() << " linear_forward at avx512";
      }
}

// As DecodeGemv.IntegerBlocksGiveTheExactSum for the VNNI prefill product: every scale 1 and x
// integers with 127 in each block, so every term and partial sum is an integer below 2^24 and the
// result must be the exact sum (a wrong code offset, or a code paired with the wrong x or row in
// the transposed panel, fails here even where it would stay inside the rounding bound).
TEST(GgmlPrefill, VnniIntegerBlocksGiveTheExactSum) {
  if (!vnni_here()) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  unsigned seed = 400;
  for (WeightKind k : {WeightKind::Q8_0, WeightKind::Q4_0})
    for (int T : {1, 5, 17, 40})
      for (int IC : {32, 96, 576, 1536}) {
        if (k == WeightKind::Q8_0 && IC > 576) continue;  // 1536 · 128 · 127 would pass 2^24
        DecodeCase c(k, T, IC, 37, 32, seed++);
        const Vec exact = integer_blocks(c, seed);
        EXPECT_EQ(vnni_forward(c, 2), exact) << c.name();
      }
}

// The AVX-512 input quantization (gemv::avx512::quantize_x, used by the VNNI decode rows and the AMX
// prefill) gives quantize_act_q8_0's bits: random blocks, an all-zero block, values whose scaled
// code is exactly halfway (ties to even), tiny values (the f16 scale subnormal) and large ones.
// The AVX-512 and AVX2 input quantization loops against the scalar reference, bit for bit.
void expect_reference_quantization(void (*quantize)(const float*, int64_t, int8_t*, float*)) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Vec x(32 * 40);
  for (float& v : x) v = u(rng);
  for (int j = 0; j < 32; ++j) x[32 + j] = 0.0f;                                     // block 1: zeros
  for (int j = 0; j < 32; ++j) x[64 + j] = j == 0 ? 127.0f : float(j) + 0.5f;       // block 2: ties
  for (int j = 0; j < 32; ++j) x[96 + j] = u(rng) * 1e-9f;                           // block 3: subnormal f16 d
  for (int j = 0; j < 32; ++j) x[128 + j] = u(rng) * 6e4f;                           // block 4: large
  std::vector<int8_t> q_ref(x.size()), q(x.size());
  Vec d_ref(x.size() / 32), d(x.size() / 32);
  quantize_act_q8_0(x.data(), int64_t(x.size()), q_ref.data(), d_ref.data());
  quantize(x.data(), int64_t(x.size()), q.data(), d.data());
  EXPECT_EQ(q, q_ref);
  for (size_t b = 0; b < d.size(); ++b) EXPECT_EQ(std::memcmp(&d[b], &d_ref[b], 4), 0) << "block " << b << ": " << d[b] << " vs " << d_ref[b];
}

TEST(GgmlPrefill, Avx512InputQuantizationHasTheReferenceBits) {
  if (!cpu_supports(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 here";
  expect_reference_quantization(cpu::gemv::avx512::quantize_x);
}

TEST(GgmlPrefill, Avx2InputQuantizationHasTheReferenceBits) {
  if (!cpu_supports(Isa::Avx2)) GTEST_SKIP() << "no AVX2 here";
  expect_reference_quantization(cpu::gemv::avx2::quantize_x);
}

}  // namespace
}  // namespace lt::test
