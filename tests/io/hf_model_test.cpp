// HF config.json parsing (every supported architecture, defaults, each error naming file and
// field) and weight folders (single file, sharded index, missing shard or tensor).
#include "io/hf_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/atomic_file.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace lt {
namespace {

using test::TempDir;
using test::write_bytes;

const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
  "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
  "intermediate_size": 8192, "vocab_size": 128256, "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true,
  "attention_bias": false, "mlp_bias": false, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "torch_dtype": "bfloat16"})";

TEST(HfConfig, Llama32) {
  ModelConfig c = parse_hf_config(kLlama, "config.json");
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.dim, 2048);
  EXPECT_EQ(c.n_layers, 16);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.hidden_dim, 8192);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_layout, RopeLayout::Halves);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_id, 128001);
}

TEST(HfConfig, DefaultsForOptionalFields) {
  ModelConfig c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, "rope_scaling": null,
      "head_dim": null, "eos_token_id": 2})", "c.json");
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_seq_len, 2048);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, "");
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.eos_token_id, 2);
}

TEST(HfConfig, Qwen2AlwaysHasQkvBias) {
  ModelConfig c = parse_hf_config(R"({"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
      "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
      "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
      "tie_word_embeddings": true, "bos_token_id": 151643, "eos_token_id": 151645, "sliding_window": 32768})",
                                  "qwen/config.json");
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
}

TEST(HfConfig, Mistral) {
  ModelConfig c = parse_hf_config(R"({"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
      "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000, "sliding_window": null})",
                                  "m.json");
  EXPECT_EQ(c.arch, "mistral");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FALSE(c.tie_embeddings);
}

TEST(HfConfig, Qwen3PerHeadNormsAndItsOwnHeadDim) {
  const std::string base = R"("model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28,
      "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 3072, "vocab_size": 151936,
      "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000, "tie_word_embeddings": true)";
  ModelConfig c = parse_hf_config("{" + base + "}", "q3/config.json");
  EXPECT_EQ(c.arch, "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 128);  // Qwen3Config's default, not hidden / heads = 64
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  ModelConfig b = parse_hf_config("{" + base + R"(, "attention_bias": true, "head_dim": 64})", "q3/config.json");
  EXPECT_EQ(b.head_dim, 64);
  EXPECT_TRUE(b.attention_bias && b.o_proj_bias);
  EXPECT_FALSE(b.mlp_bias);
  EXPECT_FALSE(parse_hf_config(R"({"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10})", "q2.json").qk_norm);
}

TEST(HfConfig, MixtureOfExpertsAndVisionTowersAreRefusedByName) {
  const std::string dims = R"("hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100)";
  const std::string supported = "llama, mistral, qwen2, qwen3";
  EXPECT_LT_ERROR(parse_hf_config(R"({"model_type": "mixtral", "num_local_experts": 8, )" + dims + "}", "mx.json"),
                  {"mx.json", "'mixtral'", "mixture-of-experts", "num_local_experts = 8", supported});
  EXPECT_LT_ERROR(parse_hf_config(R"({"model_type": "qwen3_moe", "num_experts": 128, )" + dims + "}", "qm.json"),
                  {"qm.json", "'qwen3_moe'", "mixture-of-experts", "num_experts = 128", supported});
  EXPECT_LT_ERROR(parse_hf_config(R"({"model_type": "qwen2_moe", )" + dims + "}", "q2m.json"),
                  {"q2m.json", "'qwen2_moe'", "mixture-of-experts", supported});
  // an expert count on a dense model type is refused too; a zero or null one is not an MoE
  EXPECT_LT_ERROR(parse_hf_config(R"({"model_type": "llama", "n_routed_experts": 4, )" + dims + "}", "l.json"),
                  {"l.json", "n_routed_experts = 4", "mixture-of-experts"});
  EXPECT_EQ(parse_hf_config(R"({"model_type": "qwen2", "num_experts": 0, )" + dims + "}", "z.json").arch, "qwen2");
  EXPECT_LT_ERROR(parse_hf_config(R"({"model_type": "qwen2_vl", "vision_config": {"depth": 32}, )" + dims + "}",
                                  "vl.json"),
                  {"vl.json", "'qwen2_vl'", "vision tower", "'vision_config'", supported});
  EXPECT_LT_ERROR(parse_hf_config(R"({"model_type": "llava", "vision_config": {}, "text_config": {}})", "lv.json"),
                  {"lv.json", "'llava'", "vision tower", supported});
}

TEST(HfConfig, SlidingWindowsPerLayerAsTransformersApplies) {
  const std::string dims = R"("hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100)";
  auto parse = [&](const std::string& type, const std::string& rest) {
    return parse_hf_config(R"({"model_type": ")" + type + R"(", )" + dims + rest + "}", "sw/config.json");
  };
  ModelConfig m = parse("mistral", R"(, "sliding_window": 16)");  // Mistral: every layer
  EXPECT_EQ(m.sliding_window, 16);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(m.attention_window(l), 16);
  EXPECT_EQ(parse("mistral", R"(, "sliding_window": null)").attention_window(0), 0);
  // Qwen2 / Qwen3: only with use_sliding_window, from max_window_layers (default 28) on
  EXPECT_EQ(parse("qwen2", R"(, "sliding_window": 16, "max_window_layers": 1)").attention_window(3), 0);
  ModelConfig q = parse("qwen2", R"(, "use_sliding_window": true, "sliding_window": 16, "max_window_layers": 2)");
  EXPECT_EQ(q.attention_window(0), 0);
  EXPECT_EQ(q.attention_window(1), 0);
  EXPECT_EQ(q.attention_window(2), 16);
  EXPECT_EQ(q.attention_window(3), 16);
  EXPECT_EQ(parse("qwen3", R"(, "use_sliding_window": true, "sliding_window": 8)").attention_window(3), 0);
  // layer_types (transformers 5 writes it) wins over max_window_layers
  ModelConfig t = parse("qwen3", R"(, "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 0,
      "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"])");
  EXPECT_EQ(t.attention_window(0), 8);
  EXPECT_EQ(t.attention_window(1), 0);
  EXPECT_EQ(t.attention_window(2), 8);
  EXPECT_LT_ERROR(parse("qwen2", R"(, "use_sliding_window": true, "sliding_window": 8, "layer_types": ["full_attention"])"),
                  {"sw/config.json", "'layer_types'", "one type per layer (4)"});
  EXPECT_LT_ERROR(parse("qwen2", R"(, "use_sliding_window": true, "sliding_window": 8,
      "layer_types": ["full_attention", "chunked_attention", "full_attention", "full_attention"])"),
                  {"sw/config.json", "layer_types[1]", "chunked_attention", "sliding_attention"});
  EXPECT_LT_ERROR(parse("mistral", R"(, "sliding_window": -4)"), {"sw/config.json", "'sliding_window'", "-4"});
}

TEST(HfConfig, UnknownArchitecture) {
  EXPECT_LT_ERROR(parse_hf_config(R"({"model_type": "gpt2", "hidden_size": 768})", "gpt/config.json"),
                  {"unknown architecture 'gpt2' in gpt/config.json; supported model types: llama, mistral, qwen2, qwen3"});
  EXPECT_LT_ERROR(parse_hf_config(R"({"hidden_size": 768})", "x/config.json"), {"x/config.json", "'model_type'"});
}

TEST(HfConfig, MissingAndWrongTypedFields) {
  std::string base = R"("model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100)";
  EXPECT_LT_ERROR(parse_hf_config("{" + base + "}", "a/config.json"), {"a/config.json", "'hidden_size'", "missing"});
  EXPECT_LT_ERROR(parse_hf_config("{" + base + R"(, "hidden_size": "64"})", "b/config.json"),
                  {"b/config.json", "'hidden_size'", "integer"});
  EXPECT_LT_ERROR(parse_hf_config("{" + base + R"(, "hidden_size": 64.5})", "c/config.json"),
                  {"c/config.json", "'hidden_size'", "integer"});
  EXPECT_LT_ERROR(parse_hf_config("{" + base + R"(, "hidden_size": 4294967360})", "d/config.json"),
                  {"d/config.json", "'hidden_size'", "range"});
  EXPECT_LT_ERROR(parse_hf_config("{" + base + R"(, "hidden_size": 64, "rms_norm_eps": "x"})", "e/config.json"),
                  {"e/config.json", "'rms_norm_eps'", "number"});
  EXPECT_LT_ERROR(parse_hf_config("{" + base + R"(, "hidden_size": 64, "tie_word_embeddings": 1})", "f/config.json"),
                  {"f/config.json", "'tie_word_embeddings'"});
  EXPECT_LT_ERROR(parse_hf_config("{" + base + R"(, "hidden_size": 64, "eos_token_id": ["a"]})", "g/config.json"),
                  {"g/config.json", "'eos_token_id'"});
  EXPECT_LT_ERROR(parse_hf_config("{" + base + R"(, "hidden_size": 64, "num_key_value_heads": 3})", "h/config.json"),
                  {"h/config.json", "key/value heads"});
  EXPECT_LT_ERROR(parse_hf_config("{" + base + R"(, "hidden_size": -64})", "i/config.json"),
                  {"i/config.json", "hidden size", "positive"});
  EXPECT_LT_ERROR(parse_hf_config("{" + base + R"(, "hidden_size": 64, "num_attention_heads": 0})", "j/config.json"),
                  {"j/config.json", "'num_attention_heads'"});
}

TEST(HfConfig, RopeScaling) {
  std::string base = R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256, "rope_scaling": )";
  EXPECT_LT_ERROR(parse_hf_config(base + R"({"type": "su", "factor": 2.0}})", "r/config.json"),
                  {"r/config.json", "'su'", "linear, dynamic, yarn, longrope, llama3"});
  EXPECT_LT_ERROR(parse_hf_config(base + R"({"rope_type": "llama3"}})", "r/config.json"),
                  {"r/config.json", "rope_scaling.factor"});
  EXPECT_LT_ERROR(parse_hf_config(base + R"({"rope_type": "linear"}})", "r/config.json"),
                  {"r/config.json", "rope_scaling.factor"});
  EXPECT_LT_ERROR(parse_hf_config(base + R"(5})", "r/config.json"), {"r/config.json", "'rope_scaling'"});
  EXPECT_LT_ERROR(parse_hf_config(base + R"({"rope_type": "linear", "factor": 2, "partial_rotary_factor": 0.5}})",
                                  "r/config.json"),
                  {"r/config.json", "partial_rotary_factor"});
  EXPECT_EQ(parse_hf_config(base + R"({"rope_type": "default"}})", "r").rope_scaling.type, "");
  EXPECT_EQ(parse_hf_config(base + R"({"type": "llama3", "factor": 8}})", "r").rope_scaling.factor, 8.0f);
  // llama3 without original_max_position_embeddings: max_position_embeddings, as transformers
  EXPECT_EQ(parse_hf_config(base + R"({"type": "llama3", "factor": 8}})", "r").rope_scaling.original_max_position_embeddings,
            256);
  ModelConfig lin = parse_hf_config(base + R"({"type": "linear", "factor": 4}})", "r");
  EXPECT_EQ(lin.rope_scaling.type, "linear");
  EXPECT_FLOAT_EQ(lin.rope_scaling.factor, 4.0f);
  EXPECT_FLOAT_EQ(lin.rope_attention_factor, 1.0f);
  EXPECT_EQ(parse_hf_config(base + R"({"type": "dynamic", "factor": 2}})", "r").rope_scaling.type, "dynamic");
}

TEST(HfConfig, RopeScalingYarnAndLongrope) {
  std::string base = R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256, )";
  ModelConfig y = parse_hf_config(base + R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0,
      "original_max_position_embeddings": 64, "beta_fast": 16, "beta_slow": 0, "truncate": false}})", "y");
  EXPECT_EQ(y.rope_scaling.type, "yarn");
  EXPECT_EQ(y.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_FLOAT_EQ(y.rope_scaling.beta_fast, 16.0f);
  EXPECT_FLOAT_EQ(y.rope_scaling.beta_slow, 1.0f);  // `beta_slow or 1`
  EXPECT_FALSE(y.rope_scaling.truncate);
  EXPECT_NEAR(y.rope_attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);
  // factor null: max_position_embeddings / original; a top-level original_max_position_embeddings wins
  ModelConfig y2 = parse_hf_config(base + R"("original_max_position_embeddings": 32,
      "rope_scaling": {"rope_type": "yarn", "factor": null, "original_max_position_embeddings": 64,
                       "attention_factor": 1.5}})", "y2");
  EXPECT_EQ(y2.rope_scaling.original_max_position_embeddings, 32);
  EXPECT_FLOAT_EQ(y2.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(y2.rope_attention_factor, 1.5f);
  // longrope: factor lists of head_dim / 2 = 8, attention factor from max_position / original
  std::string lists = R"("short_factor": [1, 1, 1, 1, 1, 1, 1, 1], "long_factor": [1, 1, 2, 2, 4, 4, 8, 8])";
  ModelConfig l = parse_hf_config(base + R"("rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 64, )" +
                                      lists + "}}",
                                  "l");
  EXPECT_EQ(l.rope_scaling.long_factor.size(), 8u);
  EXPECT_FLOAT_EQ(l.rope_scaling.long_factor[7], 8.0f);
  EXPECT_FLOAT_EQ(l.rope_scaling.factor, 4.0f);
  EXPECT_NEAR(l.rope_attention_factor, std::sqrt(1.0 + std::log(4.0) / std::log(64.0)), 1e-6);
  EXPECT_LT_ERROR(parse_hf_config(base + R"("rope_scaling": {"rope_type": "longrope", "short_factor": [1, 1],
      "long_factor": [1, 1]}})", "l/config.json"),
                  {"l/config.json", "short_factor", "head_dim / 2 = 8", "got 2"});
  EXPECT_LT_ERROR(parse_hf_config(base + R"("rope_scaling": {"rope_type": "longrope", "short_factor": "x"}})",
                                  "l/config.json"),
                  {"l/config.json", "'short_factor'", "list of numbers"});
}

TEST(HfConfig, RopeParametersTransformers5) {
  std::string base = R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "rope_parameters": )";
  ModelConfig d = parse_hf_config(base + R"({"rope_type": "default", "rope_theta": 1000000.0}})", "v5");
  EXPECT_FLOAT_EQ(d.rope_theta, 1e6f);
  EXPECT_EQ(d.rope_scaling.type, "");
  ModelConfig l = parse_hf_config(
      base + R"({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
      "v5");
  EXPECT_FLOAT_EQ(l.rope_theta, 5e5f);
  EXPECT_EQ(l.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(l.rope_scaling.factor, 8.0f);
  EXPECT_LT_ERROR(parse_hf_config(base + R"({"rope_type": "ntk", "factor": 4.0}})", "v5/config.json"),
                  {"v5/config.json", "'ntk'"});
  EXPECT_EQ(parse_hf_config(base + R"({"rope_type": "yarn", "factor": 4.0}})", "v5").rope_scaling.type, "yarn");
}

TEST(HfConfig, FileErrors) {
  TempDir dir;
  EXPECT_LT_ERROR(load_hf_config(dir / "config.json"), {"config.json"});
  write_bytes(dir / "config.json", R"({"model_type": "llama", "hidden_size": )");
  EXPECT_LT_ERROR(load_hf_config(dir / "config.json"), {dir / "config.json", "malformed JSON"});
  write_bytes(dir / "config.json", "[1, 2]");
  EXPECT_LT_ERROR(load_hf_config(dir / "config.json"), {dir / "config.json", "object"});
  write_bytes(dir / "config.json", R"({"model_type": "gpt2"})");
  EXPECT_LT_ERROR(load_hf_config(dir / "config.json"),
                  {"unknown architecture 'gpt2' in " + (dir / "config.json") + "; supported model types: llama, mistral, qwen2, qwen3"});
}

// A tiny llama folder: config + weights, written either as one file or as two shards.
const char* kTinyConfig = R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10})";

TensorInfo f32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& data) {
  TensorInfo t;
  t.name = name;
  t.shape = std::move(shape);
  t.data = data.data();
  t.nbytes = data.size() * 4;
  return t;
}

TEST(IoHfWeights, SingleFileFolder) {
  TempDir dir;
  write_text_file_atomic(dir / "config.json", kTinyConfig);
  std::vector<float> emb(80, 0.5f), norm(8, 1.0f);
  save_safetensors(dir / "model.safetensors",
                   {f32_tensor("model.embed_tokens.weight", {10, 8}, emb), f32_tensor("model.norm.weight", {8}, norm)});
  HfModelFiles m = load_hf_folder(dir.path);
  EXPECT_EQ(m.config.dim, 8);
  const TensorInfo& e = m.tensors.get("model.embed_tokens.weight", {m.config.vocab_size, m.config.dim});
  EXPECT_EQ(static_cast<const float*>(e.data)[79], 0.5f);
  EXPECT_LT_ERROR(m.tensors.get("model.norm.weight", {m.config.hidden_dim}),
                  {"model.safetensors", "'model.norm.weight'", "[8]", "[16]"});
}

struct ShardedFolder {
  TempDir dir;
  std::vector<float> emb = std::vector<float>(80, 0.25f), norm = std::vector<float>(8, 2.0f);
  ShardedFolder() {
    write_text_file_atomic(dir / "config.json", kTinyConfig);
    save_safetensors(dir / "model-00001-of-00002.safetensors", {f32_tensor("model.embed_tokens.weight", {10, 8}, emb)});
    save_safetensors(dir / "model-00002-of-00002.safetensors", {f32_tensor("model.norm.weight", {8}, norm)});
  }
  void index(const std::string& weight_map) {
    write_text_file_atomic(dir / "model.safetensors.index.json",
                           R"({"metadata": {"total_size": 352}, "weight_map": )" + weight_map + "}");
  }
};

TEST(IoHfWeights, ShardedIndex) {
  ShardedFolder f;
  f.index(R"({"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
              "model.norm.weight": "model-00002-of-00002.safetensors"})");
  TensorSet s = load_hf_weights(f.dir.path);
  EXPECT_EQ(s.all().size(), 2u);
  EXPECT_EQ(static_cast<const float*>(s.get("model.norm.weight", {8}).data)[7], 2.0f);
  EXPECT_EQ(s.get("model.embed_tokens.weight", {10, 8}).file, f.dir / "model-00001-of-00002.safetensors");
}

TEST(IoHfWeights, MissingShard) {
  ShardedFolder f;
  f.index(R"({"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
              "model.norm.weight": "model-00003-of-00003.safetensors"})");
  EXPECT_LT_ERROR(load_hf_weights(f.dir.path),
                  {"model.safetensors.index.json", "model-00003-of-00003.safetensors", "missing"});
}

TEST(IoHfWeights, TensorNotInItsShard) {
  ShardedFolder f;
  f.index(R"({"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
              "model.norm.weight": "model-00002-of-00002.safetensors",
              "lm_head.weight": "model-00002-of-00002.safetensors"})");
  EXPECT_LT_ERROR(load_hf_weights(f.dir.path), {"model.safetensors.index.json", "'lm_head.weight'", "not found"});
  f.index(R"({"model.embed_tokens.weight": "model-00002-of-00002.safetensors",
              "model.norm.weight": "model-00002-of-00002.safetensors"})");
  EXPECT_LT_ERROR(load_hf_weights(f.dir.path), {"model.safetensors.index.json", "'model.embed_tokens.weight'"});
}

TEST(IoHfWeights, BadIndex) {
  ShardedFolder f;
  f.index(R"({"a": "../etc/passwd"})");
  EXPECT_LT_ERROR(load_hf_weights(f.dir.path), {"model.safetensors.index.json", "'a'", "../etc/passwd"});
  f.index("[]");
  EXPECT_LT_ERROR(load_hf_weights(f.dir.path), {"model.safetensors.index.json", "weight_map"});
  write_bytes(f.dir / "model.safetensors.index.json", "{");
  EXPECT_LT_ERROR(load_hf_weights(f.dir.path), {"model.safetensors.index.json", "malformed JSON"});
  TempDir empty;
  EXPECT_LT_ERROR(load_hf_weights(empty.path), {empty.path, "model.safetensors"});
}

}  // namespace
}  // namespace lt
