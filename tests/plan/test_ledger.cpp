// The ledger against the plan: for many configurations (full / LoRA, every checkpointing mode,
// micro-batches, sequence lengths, two model sizes, QLoRA on NF4 / FP4 / int8 bases, bf16 and fp16
// mixed precision) the arenas hold exactly the planned bytes
// and, after one training step, every planned byte has been used (resident); the Llama-3-8B plan
// against a hand calculation; bad budgets and GPU names.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "core/ledger.h"
#include "io/hf_model.h"
#include "plan/budget.h"
#include "plan/flops.h"
#include "train/optimizer.h"
#include "train/train_model.h"

using namespace lt;

namespace {

// Random weights for every tensor a Llama of config c has (HF names).
struct RandomModel {
  ModelConfig cfg;
  std::vector<std::vector<float>> store;
  TensorSet ts;

  explicit RandomModel(const ModelConfig& c) : cfg(c) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0, 0.05f);
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      size_t n = 1;
      for (auto s : shape) n *= size_t(s);
      store.emplace_back(n);
      for (auto& v : store.back()) v = nd(rng);
      TensorInfo t;
      t.name = name; t.shape = shape; t.data = store.back().data(); t.nbytes = n * 4; t.file = "memory";
      ts.add(t);
    };
    const int64_t C = c.dim, QD = c.q_dim(), KVD = c.kv_dim(), F = c.hidden_dim, V = c.vocab_size;
    add("model.embed_tokens.weight", {V, C});
    for (int l = 0; l < c.n_layers; ++l) {
      auto p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {C});
      add(p + "post_attention_layernorm.weight", {C});
      add(p + "self_attn.q_proj.weight", {QD, C});
      add(p + "self_attn.k_proj.weight", {KVD, C});
      add(p + "self_attn.v_proj.weight", {KVD, C});
      add(p + "self_attn.o_proj.weight", {C, QD});
      add(p + "mlp.gate_proj.weight", {F, C});
      add(p + "mlp.up_proj.weight", {F, C});
      add(p + "mlp.down_proj.weight", {C, F});
    }
    add("model.norm.weight", {C});
    if (!c.tie_embeddings) add("lm_head.weight", {V, C});
    ts.source = "memory";
  }
};

ModelConfig small_config(int C, int L, int NH, int NKV, int F, int V, bool tied) {
  ModelConfig c;
  c.dim = C; c.n_layers = L; c.n_heads = NH; c.n_kv_heads = NKV; c.head_dim = C / NH; c.hidden_dim = F;
  c.vocab_size = V; c.max_seq_len = 512; c.tie_embeddings = tied;
  return c;
}

}  // namespace

TEST(PlanLedger, ArenasEqualThePlanAndEveryPlannedByteIsUsed) {
  // two sizes: ~10 KB of weights (tied) and ~4.6 MB (GQA 4:1, untied)
  const ModelConfig sizes[] = {small_config(16, 2, 4, 2, 24, 37, true), small_config(128, 4, 8, 2, 352, 1000, false)};
  struct Run {
    const char* method; const char* ckpt; int B, T; float dropout; const char* quant = "none"; bool dq = false;
    const char* precision = "fp32";
  };
  const Run runs[] = {
      {"lora", "none", 1, 16, 0}, {"lora", "every", 2, 8, 0}, {"lora", "every:2", 2, 16, 0.1f},
      {"lora", "attention", 1, 32, 0}, {"lora", "mlp", 3, 8, 0.1f}, {"full", "none", 1, 16, 0},
      {"full", "every", 2, 16, 0}, {"full", "every:2", 1, 32, 0}, {"full", "attention", 2, 8, 0},
      {"full", "mlp", 1, 24, 0}, {"lora-qv", "none", 2, 12, 0}, {"lora-qv", "every", 1, 16, 0},
      {"lora", "none", 1, 16, 0, "nf4", true}, {"lora", "every", 2, 8, 0.1f, "int8"},
      {"lora-qv", "mlp", 1, 16, 0, "fp4"}, {"lora", "attention", 2, 8, 0, "nf4"},
      {"lora", "none", 1, 16, 0, "none", false, "bf16"}, {"lora", "every:2", 2, 16, 0.1f, "none", false, "fp16"},
      {"full", "none", 1, 16, 0, "none", false, "bf16"}, {"full", "attention", 2, 8, 0, "none", false, "fp16"},
      {"lora", "mlp", 1, 16, 0, "nf4", true, "bf16"}, {"lora-qv", "every", 1, 16, 0, "none", false, "fp16"},
      // a quantized base's bf16 products under f32 LoRA (dropout): dy of the base's width alone (int8 would
      // leave its workspace's outlier columns untouched: how many there are depends on the data)
      {"lora", "every", 2, 8, 0.1f, "fp4", false, "bf16"},
      // 64 tokens: on AMX the larger model's bf16 LoRA appends its rank-r operands in the GEMM and
      // plans no lora.wcat (lora_wcat_bytes), the smaller's (sizes not multiples of 32) concatenates
      {"lora", "none", 2, 32, 0, "none", false, "bf16"}, {"lora", "every", 2, 32, 0, "none", false, "bf16"},
      {"lora", "mlp", 2, 32, 0, "none", false, "bf16"}, {"lora", "attention", 2, 32, 0, "none", false, "bf16"}};
  int configs = 0;
  for (const auto& mc : sizes) {
    RandomModel rm(mc);
    for (const auto& r : runs) {
      TrainModelOptions o;
      o.method = parse_method(std::string(r.method).substr(0, 4));
      o.lora.r = 4;
      o.lora.alpha = 8;
      o.lora.dropout = r.dropout;
      o.lora.target_modules = std::string(r.method) == "lora-qv" ? std::vector<std::string>{"q_proj", "v_proj"}
                                                                 : std::vector<std::string>{"all-linear"};
      o.micro_batch = r.B;
      o.seq_len = r.T;
      o.quantization = parse_quantization(r.quant);
      o.double_quant = r.dq;
      o.precision = parse_precision(r.precision);
      parse_checkpointing(r.ckpt, o);
      const MemoryPlan plan = plan_training(mc, o);  // what `leantune plan` prints
      TrainModel m(mc, rm.ts, o, ops_cpu());
      const std::string what = fmt::format("C={} {} {} B={} T={} {}{} {}", mc.dim, r.method, r.ckpt, r.B, r.T,
                                           r.quant, r.dq ? "+dq" : "", r.precision);
      for (size_t c = 0; c < kNumCategories; ++c)
        EXPECT_EQ(m.arenas().allocated_bytes(Category(c)), plan.arena_bytes(Category(c)))
            << what << " " << category_name(Category(c));
      EXPECT_EQ(m.arenas().allocated_total(), plan.total_bytes()) << what;
      // one step, measured: every category's arena is resident afterwards (no planned byte unused)
      Ledger ledger(m.arenas(), 64);
      m.set_ledger(&ledger);
      std::vector<int> tok(size_t(r.B * r.T)), lab(tok.size()), pos(tok.size()), doc(tok.size());
      for (int i = 0; i < r.B * r.T; ++i) {
        tok[i] = (i * 7 + 3) % mc.vocab_size;
        pos[i] = i % r.T;
        doc[i] = i - i % r.T;
        lab[i] = (i + 1) % r.T ? (i * 5 + 1) % mc.vocab_size : kIgnoreLabel;
      }
      m.forward_backward(tok.data(), lab.data(), pos.data(), doc.data(), 1.0f, 1);
      std::vector<ParamGroup> groups;
      for (auto& tp : m.params()) {
        ParamGroup g;
        g.param = tp.p; g.grad = tp.g; g.m = tp.m; g.v = tp.v; g.n = tp.n;
        groups.push_back(g);
      }
      adamw_step(groups, AdamWOptions{}, 1e-3f, 1);
      m.zero_grads();
      ledger.mark("optimizer");
      EXPECT_EQ(ledger.samples().size(), size_t(2 * mc.n_layers + 2)) << what;  // forward, loss, backward, optimizer
      auto res = ledger.max_resident();
      for (size_t c = 0; c < kNumCategories; ++c)
        EXPECT_EQ(res[c], plan.arena_bytes(Category(c))) << what << " " << category_name(Category(c));
      ++configs;
    }
  }
  EXPECT_GE(configs, 48);
}

TEST(PlanLedger, QuantizedFrozenWeightBytesPerParameter) {
  // SmolLM2-135M's shape: the seven linears of 30 layers hold 106,168,320 parameters
  const ModelConfig m = parse_hf_config(R"({"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
      "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
      "tie_word_embeddings": true})", "SmolLM2-135M/config.json");
  const size_t C = 576, KVD = 192, F = 1536, L = 30, V = 49152;
  const size_t linear = L * (2 * C * C + 2 * KVD * C + 3 * F * C), other = V * C + (2 * L + 1) * C;
  EXPECT_EQ(linear, 106168320u);
  TrainModelOptions o;
  o.method = Method::Lora;
  o.lora.target_modules = {"all-linear"};
  o.seq_len = 256;
  auto linear_bytes_per_param = [&](const char* quant, bool dq, const char* precision = "fp32") {
    o.quantization = parse_quantization(quant);
    o.double_quant = dq;
    o.precision = parse_precision(precision);
    const MemoryPlan p = plan_training(m, o);
    // bf16 LoRA stores the (tied) embedding in bf16 too (bf16_head()); the norms stay f32
    const size_t other_bytes = 4 * other - (o.precision == Precision::BF16 ? 2 * V * C : 0);
    return double(p.arena_bytes(Category::FrozenWeights) - other_bytes) / double(linear);
  };
  EXPECT_DOUBLE_EQ(linear_bytes_per_param("none", false), 4.0);
  EXPECT_DOUBLE_EQ(linear_bytes_per_param("none", false, "bf16"), 2.0);  // mixed precision: 16-bit frozen linears
  EXPECT_DOUBLE_EQ(linear_bytes_per_param("none", false, "fp16"), 2.0);
  EXPECT_EQ(linear_bytes_per_param("nf4", true, "bf16"), linear_bytes_per_param("nf4", true));  // stays NF4
  const double nf4dq = linear_bytes_per_param("nf4", true), nf4 = linear_bytes_per_param("nf4", false);
  const double i8 = linear_bytes_per_param("int8", false);
  // 0.5 + 1/64 + 4/(64*256) = 0.51587 (4.127 bits) plus 64-byte alignment of each part
  EXPECT_GT(nf4dq, 0.51587);
  EXPECT_LT(nf4dq, 0.5161);
  EXPECT_GE(nf4, 0.5625);  // 0.5 + 4/64
  EXPECT_LT(nf4, 0.5627);
  EXPECT_GT(i8, 1.0 + 4.0 / 1536);  // one f32 scale per row: rows have 576 or 1536 columns
  EXPECT_LT(i8, 1.0 + 4.0 / 576);
}

TEST(PlanLedger, Llama3_8BLoraPlanMatchesAHandCalculation) {
  // Meta-Llama-3-8B's config.json (the fields that shape memory)
  const ModelConfig m = parse_hf_config(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-05,
      "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})", "Llama-3-8B/config.json");
  TrainModelOptions o;
  o.method = Method::Lora;
  o.lora.r = 16;
  o.lora.target_modules = {"all-linear"};
  o.micro_batch = 1;
  o.seq_len = 512;
  const MemoryPlan p = plan_training(m, o);
  // parameters by hand: per layer q, o 4096x4096; k, v 1024x4096; gate, up, down 14336x4096; 2 norms
  const size_t C = 4096, KVD = 1024, F = 14336, V = 128256, L = 32, R = 16, NH = 32, N = 512;
  const size_t per_layer = 2 * C * C + 2 * KVD * C + 3 * F * C + 2 * C;
  const size_t params = L * per_layer + 2 * V * C + C;
  EXPECT_EQ(params, 8030261248u);  // the published 8.03B
  EXPECT_EQ(p.arena_bytes(Category::FrozenWeights), 4 * params);  // fp32
  // LoRA r=16 on the seven modules: r x (in + out) each
  const size_t lora = L * R * (2 * (C + C) + 2 * (C + KVD) + 3 * (C + F));
  EXPECT_EQ(lora, 41943040u);
  EXPECT_EQ(p.arena_bytes(Category::TrainableParams), 4 * lora);
  EXPECT_EQ(p.arena_bytes(Category::Grads), 4 * lora);
  EXPECT_EQ(p.arena_bytes(Category::OptimizerState), 2 * 4 * lora);  // AdamW m and v
  // saved activations per token per layer (floats): rstd 2, q and attention output 2C, k and v
  // 2*KVD, log-sum-exp NH, mid residual C, gate/up 2F, x·Aᵀ of 7 modules 7R; plus L+1 residual
  // streams, the final normed x and its rstd. h = silu(gate)·up (F) and the normed inputs xn1, xn2
  // (2C) are not saved: one shared recompute buffer each, refilled before each layer's backward.
  const size_t per_token_layer = 2 + 2 * C + 2 * KVD + NH + C + 2 * F + 7 * R;
  EXPECT_EQ(per_token_layer, 43154u);
  EXPECT_EQ(p.arena_bytes(Category::Activations), 4 * N * (L * per_token_layer + (L + 1) * C + C + 1));
  EXPECT_EQ(p.arena_bytes(Category::Recompute), 4 * N * (F + 2 * C));
  // with checkpointing of every block, a layer keeps only its input (the residual stream) and its
  // attention's output and log-sum-exp (C + NH: a replay recomputes q, k, v, not the attention)
  o.checkpointing = Checkpointing::EveryK;
  const MemoryPlan q = plan_training(m, o);
  EXPECT_EQ(q.arena_bytes(Category::Activations), 4 * N * ((L + 1) * C + C + 1 + L * (C + NH)));
  EXPECT_EQ(q.arena_bytes(Category::Recompute),
            4 * N * (per_token_layer - C - NH + F + 2 * C));  // one layer's set, reused
}

TEST(PlanBudget, BadBudgetsAndProfilesSaySoPlainly) {
  EXPECT_EQ(parse_bytes("6 GB"), 6000000000u);
  EXPECT_EQ(parse_bytes("6GiB"), 6442450944u);
  EXPECT_EQ(parse_bytes("6442450944"), 6442450944u);
  EXPECT_EQ(parse_bytes("6gib"), 6442450944u);
  EXPECT_EQ(parse_bytes("6G"), 6442450944u);
  for (const char* bad : {"", "GB", "6 parsecs", "1.2.3GB", "-6GB", "0", "6 G B"}) {
    try {
      parse_bytes(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("memory budget"), std::string::npos) << e.what();
    }
  }
  const ModelConfig m = small_config(128, 4, 8, 2, 352, 1000, false);
  TrainConfig c;
  c.memory_budget = "1MiB";
  try {
    fit_memory_budget(c, m, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("smaller than the model's weights alone"), std::string::npos) << e.what();
  }
  EXPECT_EQ(find_gpu_profile("h100").name, "H100 80GB");
  EXPECT_EQ(find_gpu_profile("RTX-4090").name, "RTX 4090 24GB");
  try {
    find_gpu_profile("V100");
    FAIL();
  } catch (const Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("unknown GPU profile 'V100'"), std::string::npos) << w;
    for (const auto& g : gpu_profiles()) EXPECT_NE(w.find(g.name), std::string::npos) << w;
  }
  EXPECT_THROW(find_gpu_profile("A100"), Error);  // two of them: ambiguous, also listed
}
