// Mixed precision (precision: bf16 | fp16) on a small random Llama: LoRA and full fine-tuning
// gradients against fp32 within the 16-bit types' rounding (and not identical to them: the 16-bit
// path really ran), the full model's 16-bit working copies refreshed after an optimizer step, and
// the plan's bytes: frozen linear weights and the saved GEMM inputs halve (with bf16 attention also
// the saved attention operands q, k, v; with bf16 LoRA the frozen embedding and lm_head), the rest
// is unchanged but for the bf16 loss's x scratch. attention_precision: which runs get
// the bf16 attention, and its fallback (the f32 kernels on the rounded values) below avx512.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "train/optimizer.h"
#include "train/train_model.h"

using namespace lt;

namespace {

constexpr int C = 64, QD = 64, KVD = 32, F = 160, V = 97, L = 2;

struct SmallModel {
  ModelConfig cfg;
  std::vector<std::vector<float>> store;
  TensorSet ts;

  SmallModel() {
    cfg.dim = C; cfg.n_layers = L; cfg.n_heads = 4; cfg.n_kv_heads = 2; cfg.head_dim = 16; cfg.hidden_dim = F;
    cfg.vocab_size = V; cfg.max_seq_len = 64;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0, 1);
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float mean = 0) {
      size_t n = 1;
      for (auto s : shape) n *= size_t(s);
      store.emplace_back(n);
      for (auto& v : store.back()) v = mean + scale * nd(rng);
      TensorInfo t;
      t.name = name; t.shape = shape; t.data = store.back().data(); t.nbytes = n * 4; t.file = "memory";
      ts.add(t);
    };
    add("model.embed_tokens.weight", {V, C}, 1.0f);
    for (int l = 0; l < L; ++l) {
      auto p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {C}, 0.1f, 1.0f);
      add(p + "post_attention_layernorm.weight", {C}, 0.1f, 1.0f);
      add(p + "self_attn.q_proj.weight", {QD, C}, 0.125f);
      add(p + "self_attn.k_proj.weight", {KVD, C}, 0.125f);
      add(p + "self_attn.v_proj.weight", {KVD, C}, 0.125f);
      add(p + "self_attn.o_proj.weight", {C, QD}, 0.125f);
      add(p + "mlp.gate_proj.weight", {F, C}, 0.125f);
      add(p + "mlp.up_proj.weight", {F, C}, 0.125f);
      add(p + "mlp.down_proj.weight", {C, F}, 0.08f);
    }
    add("model.norm.weight", {C}, 0.1f, 1.0f);
    add("lm_head.weight", {V, C}, 0.125f);
    ts.source = "memory";
  }
};

constexpr int B = 2, T = 32;

struct Batch {
  std::vector<int> tok, lab, pos, doc;
  Batch() {
    std::mt19937 rng(8);
    for (int i = 0; i < B * T; ++i) {
      tok.push_back(int(rng() % V));
      pos.push_back(i % T);
      doc.push_back(i - i % T);
    }
    for (int i = 0; i < B * T; ++i) lab.push_back((i + 1) % T ? tok[i + 1] : kIgnoreLabel);
  }
};

TrainModelOptions options(const char* method, const char* precision,
                          AttentionPrecision attention = AttentionPrecision::Auto) {
  TrainModelOptions o;
  o.attention_precision = attention;
  o.method = parse_method(method);
  o.lora.r = 8;
  o.lora.alpha = 16;
  o.lora.target_modules = {"all-linear"};
  o.micro_batch = B;
  o.seq_len = T;
  o.precision = parse_precision(precision);
  return o;
}

// Loss and gradients (divided by grad_scale) after one forward/backward; LoRA B set non-zero.
struct GradRun {
  float loss;
  std::vector<std::vector<float>> grads;
};
GradRun run_once(const SmallModel& sm, const TrainModelOptions& o, float grad_scale = 1.0f) {
  TrainModel m(sm.cfg, sm.ts, o, ops_cpu());
  for (auto& p : m.params())
    if (p.name.find("lora_B") != std::string::npos)
      for (size_t i = 0; i < p.n; ++i) p.p[i] = 0.02f * float(int(i % 9) - 4);
  Batch b;
  GradRun r;
  r.loss = m.forward_backward(b.tok.data(), b.lab.data(), b.pos.data(), b.doc.data(), grad_scale, 0);
  for (auto& p : m.params()) {
    r.grads.emplace_back(p.g, p.g + p.n);
    for (auto& g : r.grads.back()) g /= grad_scale;
  }
  return r;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    n += double(ref[i]) * ref[i];
  }
  return std::sqrt(d / std::max(n, 1e-300));
}

void expect_close(const GradRun& r, const GradRun& ref, double tol, const char* what) {
  ASSERT_EQ(r.grads.size(), ref.grads.size());
  EXPECT_NEAR(r.loss, ref.loss, tol * ref.loss) << what;
  EXPECT_NE(r.loss, ref.loss) << what << ": the 16-bit path did not run";
  double worst = 0;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    const double e = rel_diff(r.grads[i], ref.grads[i]);
    worst = std::max(worst, e);
    EXPECT_LT(e, tol) << what << " gradient " << i;
  }
  EXPECT_GT(worst, 0.0) << what;
  std::printf("%s: loss %.5f vs fp32 %.5f, worst relative gradient error %.2e\n", what, r.loss, ref.loss, worst);
}

}  // namespace

TEST(MixedPrecision, LoraGradientsCloseToFp32) {
  SmallModel sm;
  const GradRun f32 = run_once(sm, options("lora", "fp32"));
  expect_close(run_once(sm, options("lora", "bf16")), f32, 3e-2, "LoRA bf16");
  // f16: the backward sees the loss scaled by 2^16 (as with loss scaling); gradients unscaled here
  expect_close(run_once(sm, options("lora", "fp16"), 65536.0f), f32, 4e-3, "LoRA fp16");
  TrainModelOptions q = options("lora", "bf16");  // a quantized base stays quantized; activations 16-bit
  q.quantization = QuantType::NF4;
  TrainModelOptions q32 = q;
  q32.precision = Precision::FP32;
  expect_close(run_once(sm, q), run_once(sm, q32), 3e-2, "LoRA bf16 on nf4");
}

TEST(MixedPrecision, FullFineTuningGradientsAndRefreshedWorkingCopies) {
  SmallModel sm;
  const GradRun f32 = run_once(sm, options("full", "fp32"));
  expect_close(run_once(sm, options("full", "bf16")), f32, 3e-2, "full bf16");
  expect_close(run_once(sm, options("full", "fp16"), 65536.0f), f32, 4e-3, "full fp16");
  // one AdamW step: the 16-bit working copies follow the f32 masters after zero_grads()
  Batch b;
  float after[2], before[2];
  const char* precisions[] = {"fp32", "bf16"};
  for (int k = 0; k < 2; ++k) {
    TrainModel m(sm.cfg, sm.ts, options("full", precisions[k]), ops_cpu());
    before[k] = m.forward_backward(b.tok.data(), b.lab.data(), b.pos.data(), b.doc.data(), 1.0f, 0);
    std::vector<ParamGroup> groups;
    for (auto& p : m.params()) groups.push_back({p.p, p.g, p.m, p.v, p.n});
    adamw_step(groups, AdamWOptions{}, 1e-2f, 1);
    m.zero_grads();
    after[k] = m.forward_loss(b.tok.data(), b.lab.data(), b.pos.data(), b.doc.data());
  }
  EXPECT_LT(after[1], before[1] - 0.05f);  // a stale bf16 copy would give the old loss
  EXPECT_NEAR(after[1], after[0], 2e-2 * after[0]);
}

TEST(MixedPrecision, PlanHalvesFrozenLinearsAndSavedGemmInputs) {
  SmallModel sm;
  const size_t N = B * T, linear = size_t(L) * (2 * C * QD + 2 * C * KVD + 3 * C * F);
  const size_t gemm_inputs = size_t(L) * N * QD;  // att (h, xn1, xn2: recomputed, one shared buffer each)
  const size_t attn_operands = size_t(L) * N * (QD + 2 * KVD);   // q, k, v: saved in bf16 with bf16 only
  const size_t mlp_projections = size_t(L) * N * 2 * F;          // gate, up: saved in bf16 with bf16 only
  for (const char* prec : {"bf16", "fp16"}) {
    const bool bf16 = std::string(prec) == "bf16";
    const AttentionPrecision ap = bf16 ? AttentionPrecision::BF16 : AttentionPrecision::Auto;
    const MemoryPlan p32 = plan_training(sm.cfg, options("lora", "fp32")), p16 = plan_training(sm.cfg, options("lora", prec, ap));
    const size_t halved = gemm_inputs + (bf16 ? attn_operands + mlp_projections : 0);
    // bf16 LoRA (bf16_head()): the frozen embedding and lm_head in bf16 too (2 of their 4 bytes per
    // element saved, each), and the loss chunk's rows of x in bf16 (loss.x16, chunk x C)
    const size_t tables = bf16 ? 2 * size_t(V) * C * 2 : 0, x16 = bf16 ? N * C * 2 : 0;
    EXPECT_EQ(p32.arena_bytes(Category::FrozenWeights) - p16.arena_bytes(Category::FrozenWeights), 2 * linear + tables)
        << prec;
    EXPECT_EQ(p32.arena_bytes(Category::Activations) - p16.arena_bytes(Category::Activations), 2 * halved) << prec;
    EXPECT_EQ(p32.arena_bytes(Category::Recompute) - p16.arena_bytes(Category::Recompute), 2 * N * (F + 2 * C)) << prec;
    EXPECT_EQ(p16.arena_bytes(Category::LossChunk) - p32.arena_bytes(Category::LossChunk), x16) << prec;
    for (Category c : {Category::TrainableParams, Category::Grads, Category::OptimizerState})
      EXPECT_EQ(p32.arena_bytes(c), p16.arena_bytes(c)) << prec << " " << category_name(c);
    // full: f32 masters, gradients and moments as in fp32, plus a 16-bit working copy of each linear
    const MemoryPlan f32 = plan_training(sm.cfg, options("full", "fp32")), f16 = plan_training(sm.cfg, options("full", prec));
    for (Category c : {Category::FrozenWeights, Category::TrainableParams, Category::Grads, Category::OptimizerState})
      EXPECT_EQ(f32.arena_bytes(c), f16.arena_bytes(c)) << prec << " " << category_name(c);
    EXPECT_GE(f16.arena_bytes(Category::Workspace), f32.arena_bytes(Category::Workspace) + 2 * linear) << prec;
  }
  // tied embeddings: one bf16 table serves as both
  ModelConfig tied = sm.cfg;
  tied.tie_embeddings = true;
  const MemoryPlan t32 = plan_training(tied, options("lora", "fp32")), t16 = plan_training(tied, options("lora", "bf16"));
  EXPECT_EQ(t32.arena_bytes(Category::FrozenWeights) - t16.arena_bytes(Category::FrozenWeights),
            2 * linear + size_t(V) * C * 2);
  size_t table16 = 0;
  for (const auto& b : t16.buffers)
    if (b.name == "model.embed_tokens.weight.bf16") table16 = b.bytes;
  EXPECT_EQ(table16, size_t(V) * C * 2);
  try {
    plan_training(sm.cfg, options("lora", "f16"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision: 'f16' is not one of fp32, bf16, fp16"), std::string::npos) << e.what();
  }
}

namespace {
// LEANTUNE_ISA set for a scope (restored after).
struct IsaCap {
  std::string old;
  bool had;
  explicit IsaCap(const char* level) : had(std::getenv("LEANTUNE_ISA") != nullptr) {
    if (had) old = std::getenv("LEANTUNE_ISA");
    setenv("LEANTUNE_ISA", level, 1);
  }
  ~IsaCap() {
    if (had) setenv("LEANTUNE_ISA", old.c_str(), 1);
    else unsetenv("LEANTUNE_ISA");
  }
};
}  // namespace

// Which runs get the bf16 attention: precision bf16 with attention_precision bf16, or auto where
// the kernels' level is avx512 on a CPU with AVX512-BF16; bf16 with another precision is refused.
TEST(MixedPrecision, AttentionPrecisionResolution) {
  // auto: bf16 with the AVX512-BF16 kernels, unless vdpbf16ps is the slow unit (the packed GEMMs' f32 FMAs)
  const bool fast = cpu_isa() == Isa::Avx512 && cpu_features().avx512_bf16 &&
                    cpu::packed_bf16_mode() != cpu::PackedMode::Fma;
  EXPECT_EQ(bf16_attention(options("lora", "bf16")), fast);
  EXPECT_TRUE(bf16_attention(options("lora", "bf16", AttentionPrecision::BF16)));
  EXPECT_FALSE(bf16_attention(options("lora", "bf16", AttentionPrecision::F32)));
  EXPECT_FALSE(bf16_attention(options("lora", "fp16")));
  EXPECT_FALSE(bf16_attention(options("full", "fp32", AttentionPrecision::F32)));
  {
    IsaCap cap("avx2");
    EXPECT_FALSE(bf16_attention(options("lora", "bf16")));
    EXPECT_TRUE(bf16_attention(options("lora", "bf16", AttentionPrecision::BF16)));
  }
  for (const char* prec : {"fp32", "fp16"}) {
    try {
      bf16_attention(options("lora", prec, AttentionPrecision::BF16));
      FAIL() << prec;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("attention_precision: bf16 needs precision: bf16"), std::string::npos)
          << e.what();
    }
  }
}

// attention_precision f32 in a bf16 run keeps q, k, v in f32 (and no f32 staging workspace for
// them); bf16 saves them in bf16. Both train close to fp32 and differ from each other (the bf16
// operands really ran). Below avx512 the bf16 choice runs the f32 kernels on the rounded values: the
// same function up to the bf16 kernels' own rounding of P and dS.
TEST(MixedPrecision, AttentionPrecisionF32AndBf16) {
  SmallModel sm;
  const size_t N = B * T, operands = size_t(L) * N * (QD + 2 * KVD);
  const MemoryPlan pf = plan_training(sm.cfg, options("lora", "bf16", AttentionPrecision::F32));
  const MemoryPlan pb = plan_training(sm.cfg, options("lora", "bf16", AttentionPrecision::BF16));
  EXPECT_EQ(pf.arena_bytes(Category::Activations) - pb.arena_bytes(Category::Activations), 2 * operands);
  // the f32 staging of q, k, v; the attention backward's kept dS rows in bf16 rather than f32; the
  // attention kernels' workspace with the bf16 kernels' tiles and rows
  const size_t ds16 = attention_ds_rows_bytes(int(N), T, 4, 2), ds32 = attention_ds_rows_bytes(int(N), T, 4, 4);
  const size_t ws16 = attention_workspace_bytes(int(N), 4, 2, QD / 4, true);
  const size_t ws32 = attention_workspace_bytes(int(N), 4, 2, QD / 4, false);
  ASSERT_GT(ds16, 0u);
  ASSERT_GT(ws16, ws32);
  EXPECT_EQ(pb.arena_bytes(Category::Workspace) + ds32 + ws32 - pf.arena_bytes(Category::Workspace),
            N * (QD + 2 * KVD) * 4 + ds16 + ws16);
  const GradRun f32 = run_once(sm, options("lora", "fp32"));
  const GradRun af = run_once(sm, options("lora", "bf16", AttentionPrecision::F32));
  const GradRun ab = run_once(sm, options("lora", "bf16", AttentionPrecision::BF16));
  expect_close(af, f32, 3e-2, "LoRA bf16, f32 attention");
  expect_close(ab, f32, 3e-2, "LoRA bf16, bf16 attention");
  expect_close(ab, af, 3e-2, "bf16 attention against f32 attention");
  if (!cpu_supports(Isa::Avx2)) return;
  const bool bf16_kernels_ran = train_ops_cpu().attention_backward_bf16 != nullptr;  // before the cap
  IsaCap cap("avx2");
  ASSERT_EQ(train_ops_cpu().attention_backward_bf16, nullptr);
  const GradRun fallback = run_once(sm, options("lora", "bf16", AttentionPrecision::BF16));
  expect_close(fallback, af, 3e-2, "bf16 attention at avx2 (f32 kernels on rounded q, k, v)");
  if (bf16_kernels_ran) expect_close(fallback, ab, 3e-2, "avx2 against bf16 kernels");
}
