// Inference with the weights held as --weights asks (stories260K): bf16 / f16 linear weights and
// lm_head (the inputs rounded to the type), int8 / int4 blocks of 32 (q4) / NF4 blocks of 64 with
// an int8 lm_head, and the bf16 KV cache: the logits over a prompt and KV-cache decode steps stay
// close to f32 (bounds: the formats' relative weight error on a model this small), the fast
// kernels (decode GEMVs) agree with the reference kernels on the same formats, the plan's arenas
// are what was allocated, the weights and the cache shrink by the element sizes, and bad options
// are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"
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

// --weights q8_0 (llama.cpp's blocks of 32 int8 with an f16 scale, q8_0 lm_head) needs rows of whole
// blocks, which stories260K's MLP (172 wide) does not have: a random Llama with SmolLM2's layout
// (GQA, tied embeddings) and dimensions that 32 divides. q8_0's weight error is at most half a step
// of its block's amax/127 (~0.5% RMS of a Gaussian block), and each product's input is quantized the
// same way (llama.cpp's q8_0 product), which a random model's logits see at a few % (its layers
// amplify relative errors); LLM.int8's per-row scales (weights and inputs) are coarser steps, so q8_0
// must come out closer to f32 than int8 does on the same model.
namespace {

std::string write_q8_model(unsigned seed) {
  const int C = 128, L = 2, NH = 4, NKV = 2, HS = C / NH, F = 320, V = 352;
  // one folder per test: ctest runs the tests as parallel processes, and two of them use seed 7
  const std::string dir = ::testing::TempDir() + "/q8_0_model_" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + std::to_string(seed);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << fmt::format(
      R"({{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": {}, "num_hidden_layers": {},
      "num_attention_heads": {}, "num_key_value_heads": {}, "intermediate_size": {}, "vocab_size": {},
      "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true}})",
      C, L, NH, NKV, F, V);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<std::vector<float>> store;
  std::vector<TensorInfo> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool ones) {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    store.emplace_back(n);
    for (auto& v : store.back()) v = ones ? 1.0f : nd(rng);
    TensorInfo t;
    t.name = name, t.dtype = DType::F32, t.shape = shape, t.data = store.back().data(), t.nbytes = n * 4;
    ts.push_back(t);
  };
  add("model.embed_tokens.weight", {V, C}, false);
  for (int l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C}, true);
    add(p + "post_attention_layernorm.weight", {C}, true);
    add(p + "self_attn.q_proj.weight", {NH * HS, C}, false);
    add(p + "self_attn.k_proj.weight", {NKV * HS, C}, false);
    add(p + "self_attn.v_proj.weight", {NKV * HS, C}, false);
    add(p + "self_attn.o_proj.weight", {C, NH * HS}, false);
    add(p + "mlp.gate_proj.weight", {F, C}, false);
    add(p + "mlp.up_proj.weight", {F, C}, false);
    add(p + "mlp.down_proj.weight", {C, F}, false);
  }
  add("model.norm.weight", {C}, true);
  save_safetensors(dir + "/model.safetensors", ts);
  return dir;
}

std::vector<float> run_ids(LlamaModel& m) {
  std::vector<int> ids;
  for (int i = 0; i < 32; ++i) ids.push_back(1 + (i * 37 + 11) % 340);
  std::vector<float> out;
  m.forward(ids.data(), 24, 0);  // prefill: the tiled GEMM over decoded rows
  out.insert(out.end(), m.logits(), m.logits() + m.config().vocab_size);
  for (int i = 24; i < 32; ++i) {  // decode: the q8_0 GEMVs
    m.forward(&ids[size_t(i)], 1, i);
    out.insert(out.end(), m.logits(), m.logits() + m.config().vocab_size);
  }
  return out;
}

InferenceOptions q8_options() {
  InferenceOptions o;
  o.quantization = QuantType::Q8_0, o.quant_blocksize = 32, o.head = WeightKind::Q8_0;
  return o;
}

}  // namespace

TEST(WeightFormats, Q8_0StaysCloseToF32InAQuarterOfTheBytesPlusScales) {
  const std::string dir = write_q8_model(7);
  auto f32 = LlamaModel::load(dir, {}, ops_cpu());
  auto m = LlamaModel::load(dir, q8_options(), ops_cpu());
  const auto ref = run_ids(*f32);
  const double e = rel_rms(run_ids(*m), ref);
  InferenceOptions i8;
  i8.quantization = QuantType::Int8, i8.head = WeightKind::Int8;
  const double e8 = rel_rms(run_ids(*LlamaModel::load(dir, i8, ops_cpu())), ref);
  std::printf("q8_0: relative RMS logit error vs f32 %.5f (int8 per row: %.5f)\n", e, e8);
  EXPECT_LT(e, 0.03);
  EXPECT_LT(e, e8);
  EXPECT_GT(e, 0.0);
  for (size_t c = 0; c < kNumCategories; ++c)
    EXPECT_EQ(m->arenas().allocated_bytes(Category(c)), m->plan().arena_bytes(Category(c)));
  // every linear weight and the head: 34 bytes per 32 weights (64-byte aligned per tensor)
  const ModelConfig& c = m->config();
  size_t q8 = 0, f32_lin = 0;
  auto q8_bytes = [](size_t n) { return (n / 32 * 34 + 63) / 64 * 64; };
  for (Proj p : kProjs) {
    const size_t n = size_t(c.linear_shape(p).first * c.linear_shape(p).second);
    q8 += q8_bytes(n) * size_t(c.n_layers), f32_lin += n * 4 * size_t(c.n_layers);
  }
  q8 += q8_bytes(size_t(c.vocab_size) * c.dim);  // the q8_0 head beside the tied f32 table
  EXPECT_EQ(m->arenas().allocated_bytes(Category::FrozenWeights),
            f32->arenas().allocated_bytes(Category::FrozenWeights) - f32_lin + q8);
  // the fast kernels (decode GEMVs, decoded tiles) against the reference on the same weights: f32
  // rounding in another order, amplified by two layers; both quantize each product's input to int8,
  // so, as for int8 above, a last-bit difference upstream can move an input code to the next step
  auto r = LlamaModel::load(dir, q8_options(), ops_ref());
  const double fr = rel_rms(run_ids(*m), run_ids(*r));
  std::printf("q8_0: fast vs reference kernels, relative RMS logit difference %.2e\n", fr);
  EXPECT_LT(fr, 5e-3);
}

TEST(WeightFormats, Q8_0NeedsRowsOfWholeBlocks) {
  InferenceOptions o = q8_options();
  o.head = WeightKind::F32;
  try {
    LlamaModel::load(kModel, o, ops_cpu());  // stories260K's down_proj rows are 172 wide
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("whole blocks of 32"), std::string::npos) << e.what();
  }
}

// --weights q4_0 (llama.cpp's blocks of 32 4-bit codes with an f16 scale, q4_0 lm_head, inputs
// quantized to q8_0 as llama.cpp's product does) on the same random model. Its step is a block's
// amax/8 instead of q8_0's amax/127, 16x coarser: on Gaussian blocks of 32 (amax ≈ 2.1σ) the
// rounding error is step/√12 ≈ 0.077σ, ~8% of the weights' RMS, against ~0.5% for q8_0. The
// logits see q8_0's weight and input errors at ~0.02 (above), so 16x the weight part puts q4_0 near
// 0.3: bounded by 0.45, and above q8_0's. The grid is Int4's (--weights q4, f32 scales, f32 inputs),
// so the two must be as close to f32 as each other (within 1.3x): the f16 scale and the q8_0 inputs
// add errors ~100x smaller than the 4-bit step.
TEST(WeightFormats, Q4_0StaysCloseToF32InAnEighthOfTheBytesPlusScales) {
  const std::string dir = write_q8_model(7);
  auto f32 = LlamaModel::load(dir, {}, ops_cpu());
  InferenceOptions o;
  o.quantization = QuantType::Q4_0, o.quant_blocksize = 32, o.head = WeightKind::Q4_0;
  auto m = LlamaModel::load(dir, o, ops_cpu());
  const auto ref = run_ids(*f32);
  const double e = rel_rms(run_ids(*m), ref);
  InferenceOptions i4;
  i4.quantization = QuantType::Int4, i4.quant_blocksize = 32, i4.head = WeightKind::Int8;
  const double e4 = rel_rms(run_ids(*LlamaModel::load(dir, i4, ops_cpu())), ref);
  const double e8 = rel_rms(run_ids(*LlamaModel::load(dir, q8_options(), ops_cpu())), ref);
  std::printf("q4_0: relative RMS logit error vs f32 %.5f (q4, f32 scales: %.5f; q8_0: %.5f)\n", e, e4, e8);
  EXPECT_LT(e, 0.45);
  EXPECT_GT(e, e8);
  EXPECT_LT(e, 1.3 * e4);
  EXPECT_LT(e4, 1.3 * e);
  for (size_t c = 0; c < kNumCategories; ++c)
    EXPECT_EQ(m->arenas().allocated_bytes(Category(c)), m->plan().arena_bytes(Category(c)));
  // every linear weight and the head: 18 bytes per 32 weights (64-byte aligned per tensor)
  const ModelConfig& c = m->config();
  size_t q4 = 0, f32_lin = 0;
  auto q4_bytes = [](size_t n) { return (n / 32 * 18 + 63) / 64 * 64; };
  for (Proj p : kProjs) {
    const size_t n = size_t(c.linear_shape(p).first * c.linear_shape(p).second);
    q4 += q4_bytes(n) * size_t(c.n_layers), f32_lin += n * 4 * size_t(c.n_layers);
  }
  q4 += q4_bytes(size_t(c.vocab_size) * c.dim);  // the q4_0 head beside the tied f32 table
  EXPECT_EQ(m->arenas().allocated_bytes(Category::FrozenWeights),
            f32->arenas().allocated_bytes(Category::FrozenWeights) - f32_lin + q4);
  // fast kernels against the reference on the same weights: as for q8_0 above
  auto r = LlamaModel::load(dir, o, ops_ref());
  const double fr = rel_rms(run_ids(*m), run_ids(*r));
  std::printf("q4_0: fast vs reference kernels, relative RMS logit difference %.2e\n", fr);
  EXPECT_LT(fr, 5e-3);
}

// One token's q|k|v and gate|up run as one product each over their stacked rows (16-bit, q8_0,
// q4_0 weights lie one after another in the plan): the same rows with the same per-row arithmetic
// as three and two products, so the logits of 12 one-token steps are the same bits as a model
// whose prefill block of 1 leaves no room for the stacked outputs (stacking off).
TEST(WeightFormats, StackedDecodeProjectionsGiveTheSameBits) {
  const std::string q8_dir = write_q8_model(11);
  InferenceOptions bf16, f16, q4 = q8_options();
  bf16.linear16 = DType::BF16, bf16.head = WeightKind::BF16;
  f16.linear16 = DType::F16, f16.head = WeightKind::F16;
  q4.quantization = QuantType::Q4_0, q4.head = WeightKind::Q4_0;
  const std::pair<std::string, InferenceOptions> cases[] = {
      {kModel, bf16}, {kModel, f16}, {q8_dir, q8_options()}, {q8_dir, q4}};
  for (const auto& [path, o] : cases) {
    InferenceOptions off = o;
    off.prefill_block = 1;
    auto a = LlamaModel::load(path, o, ops_cpu()), b = LlamaModel::load(path, off, ops_cpu());
    EXPECT_EQ(a->stacked_decode_layers(), a->config().n_layers);
    EXPECT_EQ(b->stacked_decode_layers(), 0);
    std::vector<float> la, lb;
    for (int i = 0; i < 12; ++i) {
      const int id = 1 + (i * 37 + 11) % 300;
      a->forward(&id, 1, i);
      b->forward(&id, 1, i);
      la.insert(la.end(), a->logits(), a->logits() + a->config().vocab_size);
      lb.insert(lb.end(), b->logits(), b->logits() + b->config().vocab_size);
    }
    EXPECT_EQ(la, lb) << weight_kind_name(o.head);
  }
}
