// Checkpoint accounting (io/checkpoint_tensors.h): which biases each architecture's config gives
// (Llama attention_bias: q, k, v and o; mlp_bias: gate, up, down; Qwen2: q, k, v; Mistral: none),
// the expected tensor list, and the errors for an extra, missing or mis-shaped tensor, with the
// allow-list (rotary inv_freq, a tied lm_head equal to the embedding) accepted.
#include "io/checkpoint_tensors.h"

#include <gtest/gtest.h>

#include <deque>

#include "io/hf_model.h"
#include "io_test_util.h"

namespace lt {
namespace {

std::string config_json(const std::string& type, const std::string& extra) {
  return R"({"model_type": ")" + type + R"(", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
      "num_key_value_heads": 1, "intermediate_size": 12, "vocab_size": 10)" + extra + "}";
}

// A TensorSet holding exactly checkpoint_tensors(c), with values from a counter.
struct Checkpoint {
  ModelConfig c;
  std::deque<std::vector<float>> store;
  TensorSet ts;
  explicit Checkpoint(const ModelConfig& cfg) : c(cfg) {
    ts.source = "ckpt";
    for (const auto& e : checkpoint_tensors(c)) add(e.name, e.shape);
  }
  const TensorInfo& add(const std::string& name, std::vector<int64_t> shape, const char* file = "ckpt/model.safetensors") {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    auto& v = store.emplace_back(n);
    for (size_t i = 0; i < n; ++i) v[i] = float(store.size() * 100 + i);
    TensorInfo t;
    t.name = name; t.shape = shape; t.data = v.data(); t.nbytes = n * 4; t.file = file;
    ts.add(t);
    return *ts.find(name);
  }
};

size_t count_biases(const ModelConfig& c) {
  size_t n = 0;
  for (const auto& e : checkpoint_tensors(c)) n += e.name.find(".bias") != std::string::npos;
  return n;
}

TEST(CheckpointTensors, EachArchitectureGetsTheBiasesTransformersBuilds) {
  ModelConfig llama = parse_hf_config(config_json("llama", R"(, "attention_bias": true, "mlp_bias": true)"), "c");
  for (int m = 0; m < 7; ++m) EXPECT_TRUE(llama.has_bias(m)) << m;
  EXPECT_EQ(count_biases(llama), 2u * 7);
  ModelConfig attn = parse_hf_config(config_json("llama", R"(, "attention_bias": true)"), "c");
  for (int m = 0; m < 7; ++m) EXPECT_EQ(attn.has_bias(m), m <= 3) << m;  // o_proj too
  ModelConfig mlp = parse_hf_config(config_json("llama", R"(, "mlp_bias": true)"), "c");
  for (int m = 0; m < 7; ++m) EXPECT_EQ(mlp.has_bias(m), m >= 4) << m;
  ModelConfig qwen = parse_hf_config(config_json("qwen2", ""), "c");
  for (int m = 0; m < 7; ++m) EXPECT_EQ(qwen.has_bias(m), m <= 2) << m;  // no o_proj bias
  // transformers' Mistral builds bias-free projections whatever the config says
  ModelConfig mistral = parse_hf_config(config_json("mistral", R"(, "attention_bias": true, "mlp_bias": true)"), "c");
  EXPECT_EQ(count_biases(mistral), 0u);
  const auto names = checkpoint_tensors(llama);
  EXPECT_EQ(names.size(), 1 + 2 * (2 + 7 + 7) + 1 + 1u);  // embedding, per layer, final norm, lm_head
  // embedding, two norms, then (weight, bias) per projection
  EXPECT_EQ(names[1 + 2 + 2 * 3 + 1].name, "model.layers.0.self_attn.o_proj.bias");
  EXPECT_EQ(names[1 + 2 + 2 * 3 + 1].shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(names[1 + 2 + 2 * 4 + 1].name, "model.layers.0.mlp.gate_proj.bias");
  EXPECT_EQ(names[1 + 2 + 2 * 4 + 1].shape, (std::vector<int64_t>{12}));
}

TEST(CheckpointTensors, QuantizedFoldersListTheParts) {
  ModelConfig c = parse_hf_config(config_json("llama", R"(, "quantization_config": {"quant_method": "leantune",
      "type": "nf4", "blocksize": 64, "double_quant": true})"), "c");
  std::vector<std::string> names;
  for (const auto& e : checkpoint_tensors(c)) names.push_back(e.name);
  for (const char* part : {".codes", ".qabsmax", ".absmax2", ".offset"})
    EXPECT_NE(std::find(names.begin(), names.end(), std::string("model.layers.1.mlp.down_proj.weight") + part),
              names.end()) << part;
  EXPECT_EQ(std::find(names.begin(), names.end(), "model.layers.1.mlp.down_proj.weight"), names.end());
}

TEST(CheckpointTensors, ExactSetPassesAndTheAllowListIsAccepted) {
  Checkpoint ck(parse_hf_config(config_json("llama", R"(, "attention_bias": true, "mlp_bias": true)"), "c"));
  check_checkpoint_tensors(ck.c, ck.ts);
  ck.add("model.layers.0.self_attn.rotary_emb.inv_freq", {2});
  ck.add("model.rotary_emb.inv_freq", {2});
  check_checkpoint_tensors(ck.c, ck.ts);
}

TEST(CheckpointTensors, ExtraTensorIsAnErrorNamingItAndItsFile) {
  Checkpoint ck(parse_hf_config(config_json("llama", ""), "c"));
  ck.add("model.layers.0.self_attn.extra.weight", {3}, "ckpt/model-00002-of-00002.safetensors");
  EXPECT_LT_ERROR(check_checkpoint_tensors(ck.c, ck.ts),
                  {"model-00002-of-00002.safetensors", "'model.layers.0.self_attn.extra.weight'", "not used"});
  // a layer beyond the config's count is extra too
  Checkpoint deeper(parse_hf_config(config_json("llama", ""), "c"));
  deeper.add("model.layers.2.input_layernorm.weight", {8});
  EXPECT_LT_ERROR(check_checkpoint_tensors(deeper.c, deeper.ts), {"model.layers.2.input_layernorm.weight", "2 layers"});
}

TEST(CheckpointTensors, BiasTheConfigLacksIsAnErrorSayingWhichFlag) {
  Checkpoint llama(parse_hf_config(config_json("llama", R"(, "attention_bias": true)"), "c"));
  llama.add("model.layers.1.mlp.up_proj.bias", {12});
  EXPECT_LT_ERROR(check_checkpoint_tensors(llama.c, llama.ts), {"model.layers.1.mlp.up_proj.bias", "mlp_bias"});
  Checkpoint qwen(parse_hf_config(config_json("qwen2", ""), "c"));
  qwen.add("model.layers.0.self_attn.o_proj.bias", {8});
  EXPECT_LT_ERROR(check_checkpoint_tensors(qwen.c, qwen.ts), {"model.layers.0.self_attn.o_proj.bias", "Qwen2"});
  Checkpoint plain(parse_hf_config(config_json("llama", ""), "c"));
  plain.add("model.layers.0.self_attn.o_proj.bias", {8});
  EXPECT_LT_ERROR(check_checkpoint_tensors(plain.c, plain.ts), {"o_proj.bias", "attention_bias"});
}

TEST(CheckpointTensors, MissingOrMisShapedTensorIsAnErrorNamingIt) {
  ModelConfig c = parse_hf_config(config_json("llama", R"(, "attention_bias": true)"), "c");
  ModelConfig no_o = c;
  no_o.o_proj_bias = false;  // a checkpoint written with q/k/v biases only (Qwen2 style)
  Checkpoint ck(no_o);
  EXPECT_LT_ERROR(check_checkpoint_tensors(c, ck.ts),
                  {"ckpt", "missing tensor 'model.layers.0.self_attn.o_proj.bias'", "[8]", "attention_bias"});
  ModelConfig bad = c;
  Checkpoint shaped(c);
  bad.hidden_dim = 16;  // the file's MLP is 12 wide
  EXPECT_LT_ERROR(check_checkpoint_tensors(bad, shaped.ts), {"model.layers.0.mlp.gate_proj.weight", "[12, 8]", "[16, 8]"});
}

TEST(CheckpointTensors, TiedHeadIsAcceptedOnlyWhenItEqualsTheEmbedding) {
  ModelConfig c = parse_hf_config(config_json("llama", R"(, "tie_word_embeddings": true)"), "c");
  Checkpoint same(c);
  const TensorInfo* e = same.ts.find("model.embed_tokens.weight");
  TensorInfo head = *e;
  head.name = "lm_head.weight";
  same.ts.add(head);  // the same bytes under the head's name
  check_checkpoint_tensors(c, same.ts);
  Checkpoint other(c);
  other.add("lm_head.weight", {10, 8});  // different values
  EXPECT_LT_ERROR(check_checkpoint_tensors(c, other.ts), {"'lm_head.weight'", "tie_word_embeddings"});
}

}  // namespace
}  // namespace lt
