// The training model end to end: finite differences on a tiny random Llama (LoRA on all seven
// modules with a non-zero B, and full fine-tuning; q/k/v biases, or a bias on every projection),
// checkpointing giving identical gradients, and the plan matching what was allocated.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "kernels/backward.h"
#include "model/llama_model.h"
#include "train/train_model.h"

using namespace lt;

namespace {

struct TinyModel {
  ModelConfig cfg;
  std::vector<std::vector<float>> store;
  TensorSet ts;

  // every_bias: all seven projections have biases (HF Llama attention_bias + mlp_bias); else
  // q/k/v only (Qwen2)
  explicit TinyModel(bool every_bias = false) {
    cfg.dim = 8; cfg.n_layers = 2; cfg.n_heads = 2; cfg.n_kv_heads = 1; cfg.head_dim = 4; cfg.hidden_dim = 12;
    cfg.vocab_size = 11; cfg.max_seq_len = 64; cfg.attention_bias = true;
    cfg.o_proj_bias = cfg.mlp_bias = every_bias;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 0.4f);
    auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm) {
      size_t n = 1;
      for (auto s : shape) n *= size_t(s);
      store.emplace_back(n);
      for (auto& v : store.back()) v = norm ? 1.0f + 0.3f * nd(rng) : nd(rng);
      TensorInfo t;
      t.name = name; t.shape = shape; t.data = store.back().data(); t.nbytes = n * 4; t.file = "memory";
      ts.add(t);
    };
    const int64_t C = 8, QD = 8, KVD = 4, F = 12, V = 11;
    add("model.embed_tokens.weight", {V, C}, false);
    for (int l = 0; l < 2; ++l) {
      auto p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {C}, true);
      add(p + "post_attention_layernorm.weight", {C}, true);
      add(p + "self_attn.q_proj.weight", {QD, C}, false);
      add(p + "self_attn.k_proj.weight", {KVD, C}, false);
      add(p + "self_attn.v_proj.weight", {KVD, C}, false);
      add(p + "self_attn.q_proj.bias", {QD}, false);
      add(p + "self_attn.k_proj.bias", {KVD}, false);
      add(p + "self_attn.v_proj.bias", {KVD}, false);
      add(p + "self_attn.o_proj.weight", {C, QD}, false);
      add(p + "mlp.gate_proj.weight", {F, C}, false);
      add(p + "mlp.up_proj.weight", {F, C}, false);
      add(p + "mlp.down_proj.weight", {C, F}, false);
      if (!every_bias) continue;
      add(p + "self_attn.o_proj.bias", {C}, false);
      add(p + "mlp.gate_proj.bias", {F}, false);
      add(p + "mlp.up_proj.bias", {F}, false);
      add(p + "mlp.down_proj.bias", {C}, false);
    }
    add("model.norm.weight", {C}, true);
    add("lm_head.weight", {V, C}, false);
    ts.source = "memory";
  }
};

struct Batch2 {
  std::vector<int> tokens, labels, pos, doc;
  Batch2(int B, int T) {
    std::mt19937 rng(7);
    for (int i = 0; i < B * T; ++i) {
      tokens.push_back(int(rng() % 11));
      pos.push_back(i % T);
      doc.push_back(i - i % T);
    }
    doc[3] = 2; doc[4] = 2; pos[2] = 0; pos[3] = 1; pos[4] = 2;  // a second document inside row 0
    doc[2] = 2;
    for (int i = 0; i < B * T; ++i) labels.push_back((i + 1) % T == 0 || i == 1 ? kIgnoreLabel : tokens[i + 1]);
  }
};

// Returns the names of the tensors checked.
std::vector<std::string> check_fd(TrainModelOptions o, double tol, bool every_bias = false) {
  TinyModel tm(every_bias);
  TrainModel m(tm.cfg, tm.ts, o, ops_ref());
  std::vector<std::string> names;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 0.3f);
  for (auto& p : m.params())  // non-zero B so that A gets a gradient too
    for (size_t i = 0; i < p.n; ++i) p.p[i] += nd(rng);
  Batch2 b(o.micro_batch, o.seq_len);
  m.zero_grads();
  m.forward_backward(b.tokens.data(), b.labels.data(), b.pos.data(), b.doc.data(), 1.0f, 0);
  int checked = 0;
  double worst = 0;
  for (auto& p : m.params()) {
    for (size_t i = 0; i < p.n; i += std::max<size_t>(1, p.n / 5)) {
      float keep = p.p[i];
      const float eps = 1e-2f;
      p.p[i] = keep + eps;
      double lp = m.forward_loss(b.tokens.data(), b.labels.data(), b.pos.data(), b.doc.data());
      p.p[i] = keep - eps;
      double lm = m.forward_loss(b.tokens.data(), b.labels.data(), b.pos.data(), b.doc.data());
      p.p[i] = keep;
      double fd = (lp - lm) / (2 * eps);
      // central differences in f32 carry O(eps^2) curvature error: compare against a floor of 0.05
      double err = std::fabs(fd - p.g[i]) / std::max(5e-2, std::fabs(fd));
      worst = std::max(worst, err);
      EXPECT_LE(err, tol) << p.name << "[" << i << "] fd " << fd << " analytic " << p.g[i];
      ++checked;
    }
    names.push_back(p.name);
  }
  EXPECT_GT(checked, 40);
  return names;
}

// The trainable biases among `names`, by projection suffix ("q_proj.bias", ...).
std::vector<std::string> biases_of(const std::vector<std::string>& names, int layer) {
  std::vector<std::string> out;
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  for (const auto& n : names)
    if (n.rfind(prefix, 0) == 0 && n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0)
      out.push_back(n.substr(n.rfind('.', n.size() - 6) + 1));
  return out;
}

}  // namespace

TEST(TrainModelGrad, LoraAllModulesMatchesFiniteDifferences) {
  TrainModelOptions o;
  o.method = Method::Lora;
  o.lora.r = 2;
  o.lora.alpha = 4;
  o.lora.target_modules = {"all-linear"};
  o.lora.bias = "all";
  o.micro_batch = 2;
  o.seq_len = 6;
  o.loss_chunk = 5;
  check_fd(o, 2e-2);
}

TEST(TrainModelGrad, FullFineTuningMatchesFiniteDifferences) {
  TrainModelOptions o;
  o.method = Method::Full;
  o.micro_batch = 2;
  o.seq_len = 6;
  check_fd(o, 2e-2);
}

// HF Llama attention_bias + mlp_bias: the o_proj and MLP biases' gradients (and what flows
// through them) match finite differences, full fine-tuning and LoRA with bias "all".
TEST(TrainModelGrad, EveryProjectionBiasMatchesFiniteDifferences) {
  TrainModelOptions o;
  o.method = Method::Full;
  o.micro_batch = 2;
  o.seq_len = 6;
  auto full = check_fd(o, 2e-2, true);
  const std::vector<std::string> all7 = {"q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias",
                                         "gate_proj.bias", "up_proj.bias", "down_proj.bias"};
  EXPECT_EQ(biases_of(full, 1), all7);
  o.method = Method::Lora;
  o.lora.r = 2;
  o.lora.alpha = 4;
  o.lora.target_modules = {"all-linear"};
  o.lora.bias = "all";
  EXPECT_EQ(biases_of(check_fd(o, 2e-2, true), 0), all7);
  // LoRA freezes the biases unless the bias option says otherwise; lora_only: the adapted modules'
  o.lora.bias = "none";
  EXPECT_TRUE(biases_of(check_fd(o, 2e-2, true), 0).empty());
  o.lora.bias = "lora_only";
  o.lora.target_modules = {"o_proj", "down_proj"};
  EXPECT_EQ(biases_of(check_fd(o, 2e-2, true), 1), (std::vector<std::string>{"o_proj.bias", "down_proj.bias"}));
}

// The seven biases are buffers of both plans: frozen weights for inference and LoRA, trainable
// tensors (with gradient and AdamW moments) for full fine-tuning.
TEST(TrainModelGrad, EveryBiasIsABufferOfTheInferenceAndTrainingPlans) {
  TinyModel tm(true);
  auto cat_of = [](const MemoryPlan& p, const std::string& name) {
    int found = -1;
    for (const auto& b : p.buffers)
      if (b.name == name) found = int(b.cat);
    return found;
  };
  TrainModelOptions full;
  full.method = Method::Full;
  full.seq_len = 6;
  TrainModelOptions lora = full;
  lora.method = Method::Lora;
  lora.lora.r = 4;  // at most min(in, out) of the smallest projection of this tiny model
  const MemoryPlan inf = plan_inference(tm.cfg, {}), tf = plan_training(tm.cfg, full), tl = plan_training(tm.cfg, lora);
  for (const char* b : {"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"}) {
    const std::string n = std::string("model.layers.1.") + b + ".bias";
    EXPECT_EQ(cat_of(inf, n), int(Category::FrozenWeights)) << n;
    EXPECT_EQ(cat_of(tl, n), int(Category::FrozenWeights)) << n;
    EXPECT_EQ(cat_of(tf, n), int(Category::TrainableParams)) << n;
    EXPECT_EQ(cat_of(tf, "grad." + n), int(Category::Grads)) << n;
  }
}

// The tiny model's all-linear LoRA r=4 options for one micro-batch of 2 x 6 under a checkpointing mode.
static TrainModelOptions tiny_lora_options(const char* mode, float dropout) {
  TrainModelOptions o;
  o.lora.target_modules = {"all-linear"};
  o.lora.r = 4;  // k_proj / v_proj are (out 4, in 8): a rank above 4 is refused (train/run_limits.h)
  o.lora.dropout = dropout;
  o.micro_batch = 2;
  o.seq_len = 6;
  parse_checkpointing(mode, o);
  return o;
}

// Every parameter nudged, then one forward + backward of Batch2: the gradients, tensor by tensor.
static std::vector<std::vector<float>> grads_of_one_step(TrainModel& m) {
  for (auto& p : m.params())
    for (size_t i = 0; i < p.n; ++i) p.p[i] += 0.01f * float(i % 7);
  Batch2 b(2, 6);
  m.zero_grads();
  m.forward_backward(b.tokens.data(), b.labels.data(), b.pos.data(), b.doc.data(), 1.0f, 5);
  std::vector<std::vector<float>> g;
  for (auto& p : m.params()) g.emplace_back(p.g, p.g + p.n);
  return g;
}

TEST(TrainModelGrad, EveryCheckpointingModeGivesIdenticalGradientsAndLessMemory) {
  TinyModel tm;
  const char* modes[] = {"none", "every", "every:2", "attention", "mlp"};
  std::vector<std::vector<float>> grads[5];
  size_t saved[5];
  for (int k = 0; k < 5; ++k) {
    TrainModel m(tm.cfg, tm.ts, tiny_lora_options(modes[k], 0.2f), ops_cpu());
    grads[k] = grads_of_one_step(m);
    saved[k] = m.plan().arena_bytes(Category::Activations) + m.plan().arena_bytes(Category::Recompute);
    for (size_t c = 0; c < kNumCategories; ++c) {
      if (Category(c) == Category::MappedWeights) continue;
      EXPECT_EQ(m.plan().arena_bytes(Category(c)), m.arenas().allocated_bytes(Category(c)));
    }
    if (k) {
      ASSERT_EQ(grads[0].size(), grads[k].size());
      for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[0][i], grads[k][i]) << modes[k];
      // with 2 layers, every:2 keeps one set and shares one: as much as none; the others save less
      if (k == 2) {
        EXPECT_LE(saved[k], saved[0]);
      } else {
        EXPECT_LT(saved[k], saved[0]) << modes[k];
      }
    }
  }
  EXPECT_LT(saved[1], saved[2]);  // every block saves more than every other block
}

// A replay skips the down projection (its output, the next layer's saved input, is kept) and
// computes only the down LoRA's xa: the gradients stay the same bits in every precision, for LoRA
// (bf16: the bf16 LoRA products, no dropout) and full fine-tuning, with both op tables.
TEST(TrainModelGrad, CheckpointReplayGivesTheSameBitsInEveryPrecisionAndMethod) {
  TinyModel tm;
  for (const Ops* ops : {&ops_cpu(), &ops_ref()})
    for (Precision prec : {Precision::FP32, Precision::BF16})
      for (Method meth : {Method::Lora, Method::Full}) {
        std::vector<std::vector<float>> grads[2];
        const char* modes[] = {"none", "every"};
        for (int k = 0; k < 2; ++k) {
          TrainModelOptions o = tiny_lora_options(modes[k], prec == Precision::FP32 ? 0.2f : 0.0f);
          o.method = meth;
          o.precision = prec;
          TrainModel m(tm.cfg, tm.ts, o, *ops);
          grads[k] = grads_of_one_step(m);
        }
        const std::string what = std::string(ops->name) + (prec == Precision::FP32 ? " fp32" : " bf16") +
                                 (meth == Method::Lora ? " lora" : " full");
        ASSERT_EQ(grads[0].size(), grads[1].size()) << what;
        for (size_t i = 0; i < grads[0].size(); ++i) ASSERT_EQ(grads[0][i], grads[1][i]) << what << " tensor " << i;
      }
}

TEST(TrainModelGrad, BadOptionsAreClearErrors) {
  TinyModel tm;
  TrainModelOptions o;
  o.seq_len = 8;
  o.lora.r = 0;
  EXPECT_THROW({ TrainModel m(tm.cfg, tm.ts, o, ops_ref()); }, Error);
  o.lora.r = 4;
  o.lora.target_modules = {"qkv_proj"};
  try {
    TrainModel m(tm.cfg, tm.ts, o, ops_ref());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qkv_proj"), std::string::npos);
  }
  o.lora.target_modules = {"q_proj"};
  o.seq_len = 65;  // longer than max_seq_len 64
  EXPECT_THROW({ TrainModel m(tm.cfg, tm.ts, o, ops_ref()); }, Error);
}
