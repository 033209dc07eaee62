// Inference with the weights held as --weights asks (stories260K): bf16 / f16 linear weights and
// lm_head (the inputs rounded to the type), int8 / int4 blocks of 32 (q4) / NF4 blocks of 64 with
// an int8 lm_head, and the bf16 KV cache: the logits over a prompt and KV-cache decode steps stay
// close to f32 (bounds: the formats' relative weight error on a model this small), the fast
// kernels (decode GEMVs) agree with the reference kernels on the same formats, the plan's arenas
// are what was allocated, the weights and the cache shrink by the element sizes, and bad options
// are refused.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/llama_model.h"

using namespace lt;

static const std::string kModel = std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin";

namespace {

// Logits of a 24-token prompt, then of 8 decode steps, concatenated.
std::vector<float> run(LlamaModel& m) {
  std::vector<int> ids;
  for (int i = 0; i < 32; ++i) ids.push_back(1 + (i * 37 + 11) % 500);
  std::vector<float> out;
  m.forward(ids.data(), 24, 0);
  out.insert(out.end(), m.logits(), m.logits() + m.config().vocab_size);
  for (int i = 24; i < 32; ++i) {
    m.forward(&ids[size_t(i)], 1, i);
    out.insert(out.end(), m.logits(), m.logits() + m.config().vocab_size);
  }
  return out;
}

double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct Format {
  const char* name;
  InferenceOptions o;
  double max_err;  // relative RMS logit error vs f32
};

std::vector<Format> formats() {
  std::vector<Format> v;
  InferenceOptions o;
  o.linear16 = DType::BF16, o.head = WeightKind::BF16;
  v.push_back({"bf16", o, 0.03});  // 8-bit mantissas of weights and inputs: ~0.4% per product
  o.linear16 = DType::F16, o.head = WeightKind::F16;
  v.push_back({"f16", o, 0.005});
  o = {};
  o.quantization = QuantType::Int8, o.head = WeightKind::Int8;
  v.push_back({"int8", o, 0.03});
  o.quantization = QuantType::Int4, o.quant_blocksize = 32;
  v.push_back({"q4", o, 0.2});  // 4-bit: ~10% weight error on a model this small
  o.quantization = QuantType::NF4, o.quant_blocksize = 64;
  v.push_back({"nf4", o, 0.2});
  return v;
}

}  // namespace

TEST(WeightFormats, EveryFormatStaysCloseToF32AndShrinksTheWeights) {
  auto f32 = LlamaModel::load(kModel, {}, ops_cpu());
  const auto ref = run(*f32);
  const size_t f32_bytes = f32->arenas().allocated_bytes(Category::FrozenWeights);
  for (const Format& f : formats()) {
    auto m = LlamaModel::load(kModel, f.o, ops_cpu());
    const double e = rel_rms(run(*m), ref);
    std::printf("%s: relative RMS logit error vs f32 %.5f, weights %zu bytes (f32 %zu)\n", f.name, e,
                m->arenas().allocated_bytes(Category::FrozenWeights), f32_bytes);
    EXPECT_LT(e, f.max_err) << f.name;
    EXPECT_GT(e, 0.0) << f.name;  // the format is really in use
    for (size_t c = 0; c < kNumCategories; ++c)
      EXPECT_EQ(m->arenas().allocated_bytes(Category(c)), m->plan().arena_bytes(Category(c))) << f.name;
    EXPECT_FALSE(m->f32_weights());
    EXPECT_EQ(m->lm_head_weights(), nullptr);
    EXPECT_THROW(m->merge_adapter("/nonexistent"), Error) << f.name;
    // another sequence over the same weights decodes the same
    std::shared_ptr<const LlamaModel> shared = std::move(m);
    LlamaModel seq(shared, {});
    auto again = LlamaModel::load(kModel, f.o, ops_cpu());
    EXPECT_EQ(run(seq), run(*again)) << f.name;
  }
}

TEST(WeightFormats, SixteenBitWeightsTakeHalfTheBytes) {
  auto f32 = LlamaModel::load(kModel, {}, ops_cpu());
  InferenceOptions o;
  o.linear16 = DType::BF16, o.head = WeightKind::BF16;
  auto m = LlamaModel::load(kModel, o, ops_cpu());
  const ModelConfig& c = m->config();
  // every linear weight halves; the head is a 16-bit copy of the tied table (plus the f32 table)
  size_t lin = 0;
  for (Proj p : kProjs) lin += size_t(c.linear_shape(p).first * c.linear_shape(p).second);
  lin *= size_t(c.n_layers);
  const size_t head16 = size_t(c.vocab_size) * c.dim * 2, head32 = c.tie_embeddings ? 0 : size_t(c.vocab_size) * c.dim * 4;
  EXPECT_EQ(f32->arenas().allocated_bytes(Category::FrozenWeights) - lin * 2 - head32 + head16,
            m->arenas().allocated_bytes(Category::FrozenWeights));
}

TEST(WeightFormats, FastKernelsMatchTheReferenceOnEachFormat) {
  for (const Format& f : formats()) {
    auto fast = LlamaModel::load(kModel, f.o, ops_cpu());
    auto ref = LlamaModel::load(kModel, f.o, ops_ref());
    // the same weights and formulas, summed in another order: f32 rounding (~1e-7 relative)
    // amplified by the layers; where an input is rounded to 8 bits (bf16's mantissa, int8 codes)
    // or 11 (f16), a last-bit difference upstream can move one element to the next step (2^-8 /
    // 2^-11 of it), which the logits see at ~1e-3 / ~1e-4 relative
    const double tol = f.o.linear16 == DType::F16 ? 1e-3 : f.o.linear16 == DType::BF16 || f.o.quantization == QuantType::Int8 ? 5e-3 : 1e-4;
    const double e = rel_rms(run(*fast), run(*ref));
    std::printf("%s: fast vs reference kernels, relative RMS logit difference %.2e\n", f.name, e);
    EXPECT_LT(e, tol) << f.name;
  }
}

TEST(WeightFormats, Bf16KvCacheStaysCloseAndHalvesTheCache) {
  auto f32 = LlamaModel::load(kModel, {}, ops_cpu());
  InferenceOptions o;
  o.kv_cache = DType::BF16;
  auto m = LlamaModel::load(kModel, o, ops_cpu());
  const double e = rel_rms(run(*m), run(*f32));
  std::printf("bf16 KV cache: relative RMS logit error vs f32 %.5f\n", e);
  EXPECT_LT(e, 0.01);
  EXPECT_GT(e, 0.0);
  EXPECT_EQ(m->arenas().allocated_bytes(Category::KVCache) * 2, f32->arenas().allocated_bytes(Category::KVCache));
  // fast vs reference kernels: a last-bit difference in a key or value can round it to the
  // neighbouring bf16 (2^-8 relative), so the bound is bf16's, not f32's
  auto r = LlamaModel::load(kModel, o, ops_ref());
  EXPECT_LT(rel_rms(run(*m), run(*r)), 3e-3);
}

TEST(WeightFormats, BadOptionsAreRefused) {
  InferenceOptions o;
  o.linear16 = DType::BF16;
  o.quantization = QuantType::NF4;
  EXPECT_THROW(LlamaModel::load(kModel, o, ops_cpu()), Error);
  o = {};
  o.linear16 = DType::I8;
  EXPECT_THROW(LlamaModel::load(kModel, o, ops_cpu()), Error);
  o = {};
  o.head = WeightKind::NF4;
  EXPECT_THROW(LlamaModel::load(kModel, o, ops_cpu()), Error);
  o = {};
  o.kv_cache = DType::F16;
  EXPECT_THROW(LlamaModel::load(kModel, o, ops_cpu()), Error);
}
