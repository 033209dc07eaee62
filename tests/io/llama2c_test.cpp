// llama2.c checkpoints: stories260K loads with the documented header and the HF-named views point
// at the right bytes; truncated / padded / corrupt headers and the load_model_files dispatch.
#include "io/llama2c.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace lt {
namespace {

using test::TempDir;
using test::write_bytes;

const std::string kStories = std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin";

TEST(Llama2cLoader, Stories260K) {
  Llama2cModel m = load_llama2c(kStories);
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_EQ(c.rope_layout, RopeLayout::Interleaved);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);

  const TensorSet& s = m.tensors;
  EXPECT_EQ(s.all().size(), 1u + 9u * 5u + 1u);  // embed, 9 per layer, final norm; no lm_head
  EXPECT_EQ(s.find("lm_head.weight"), nullptr);
  // Offsets (in floats, after the 7-int header) follow the llama2.c layout.
  std::string bytes = read_text_file(kStories);
  auto at = [&](size_t float_offset) { return bytes.data() + 28 + 4 * float_offset; };
  auto expect_view = [&](const std::string& name, std::vector<int64_t> shape, size_t float_offset) {
    const TensorInfo& t = s.get(name, shape);
    EXPECT_EQ(t.dtype, DType::F32);
    EXPECT_EQ(t.file, kStories);
    EXPECT_EQ(std::memcmp(t.data, at(float_offset), t.nbytes), 0) << name;
  };
  const size_t V = 512, C = 64, L = 5, F = 172, KV = 32;
  size_t o = 0;
  expect_view("model.embed_tokens.weight", {512, 64}, o);
  o += V * C;
  expect_view("model.layers.0.input_layernorm.weight", {64}, o);
  expect_view("model.layers.4.input_layernorm.weight", {64}, o + 4 * C);
  o += L * C;
  expect_view("model.layers.1.self_attn.q_proj.weight", {64, 64}, o + C * C);
  o += L * C * C;
  expect_view("model.layers.2.self_attn.k_proj.weight", {32, 64}, o + 2 * KV * C);
  o += L * KV * C;
  expect_view("model.layers.3.self_attn.v_proj.weight", {32, 64}, o + 3 * KV * C);
  o += L * KV * C;
  expect_view("model.layers.4.self_attn.o_proj.weight", {64, 64}, o + 4 * C * C);
  o += L * C * C;
  expect_view("model.layers.0.post_attention_layernorm.weight", {64}, o);
  o += L * C;
  expect_view("model.layers.1.mlp.gate_proj.weight", {172, 64}, o + F * C);
  o += L * F * C;
  expect_view("model.layers.2.mlp.down_proj.weight", {64, 172}, o + 2 * F * C);
  o += L * F * C;
  expect_view("model.layers.3.mlp.up_proj.weight", {172, 64}, o + 3 * F * C);
  o += L * F * C;
  expect_view("model.norm.weight", {64}, o);
  // RMSNorm weights of a trained model are positive-ish numbers near 1, not garbage.
  const float* norm = static_cast<const float*>(s.get("model.norm.weight", {64}).data);
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(norm[i] > 0.01f && norm[i] < 20.0f) << norm[i];
}

TEST(Llama2cLoader, TruncatedOrPaddedCopy) {
  TempDir dir;
  std::string bytes = read_text_file(kStories);
  std::string p = dir / "cut.bin";
  write_bytes(p, bytes.substr(0, bytes.size() - 4));
  EXPECT_LT_ERROR(load_llama2c(p), {"cut.bin", "should be 1056540 bytes", "has 1056536 bytes"});
  write_bytes(p, bytes + "xxxx");
  EXPECT_LT_ERROR(load_llama2c(p), {"cut.bin", "1056540", "1056544"});
  write_bytes(p, bytes.substr(0, 20));
  EXPECT_LT_ERROR(load_llama2c(p), {"cut.bin", "28-byte header"});
}

TEST(Llama2cLoader, UnsharedClassifier) {
  // Flip vocab_size negative and append wcls: lm_head appears, tie_embeddings is false.
  TempDir dir;
  std::string bytes = read_text_file(kStories);
  int32_t v = -512;
  std::memcpy(bytes.data() + 20, &v, 4);
  std::string wcls(512 * 64 * 4, '\0');
  float one = 1.0f;
  std::memcpy(wcls.data() + wcls.size() - 4, &one, 4);
  write_bytes(dir / "u.bin", bytes + wcls);
  Llama2cModel m = load_llama2c(dir / "u.bin");
  EXPECT_FALSE(m.config.tie_embeddings);
  EXPECT_EQ(m.config.vocab_size, 512);
  const TensorInfo& head = m.tensors.get("lm_head.weight", {512, 64});
  EXPECT_EQ(static_cast<const float*>(head.data)[512 * 64 - 1], 1.0f);
  write_bytes(dir / "u.bin", bytes);  // negative vocab but no wcls: too short
  EXPECT_LT_ERROR(load_llama2c(dir / "u.bin"), {"u.bin", "should be 1187612 bytes"});
}

TEST(Llama2cLoader, BadHeaders) {
  TempDir dir;
  auto header = [&](std::vector<int32_t> h) {
    std::string b(28, '\0');
    std::memcpy(b.data(), h.data(), 28);
    write_bytes(dir / "h.bin", b + std::string(64, '\0'));
  };
  header({64, 172, 5, 0, 4, 512, 512});
  EXPECT_LT_ERROR(load_llama2c(dir / "h.bin"), {"h.bin", "non-positive"});
  header({64, 172, 5, 8, 3, 512, 512});
  EXPECT_LT_ERROR(load_llama2c(dir / "h.bin"), {"h.bin", "n_kv_heads"});
  header({64, 172, 5, 7, 7, 512, 512});
  EXPECT_LT_ERROR(load_llama2c(dir / "h.bin"), {"h.bin", "n_heads"});
  header({0x616b3432, 2, 5, 7, 7, 512, 512});
  EXPECT_LT_ERROR(load_llama2c(dir / "h.bin"), {"h.bin", "version 2"});
  // Huge sizes must not overflow: 1024 layers (the most validate_config allows) of 2^30 x (2^31 - 1)
  // feed-forward matrices are past 2^64 bytes, so the expected size saturates.
  header({1 << 30, INT32_MAX, 1024, 1, 1, -INT32_MAX, INT32_MAX});
  EXPECT_LT_ERROR(load_llama2c(dir / "h.bin"), {"h.bin", "should be 18446744073709551615 bytes", "has 92 bytes"});
  header({64, 172, INT32_MAX, 8, 4, 512, 512});
  EXPECT_LT_ERROR(load_llama2c(dir / "h.bin"), {"h.bin", "num_hidden_layers", "2147483647", "1024"});
  header({64, 172, 5, 8, 4, 0, 512});
  EXPECT_LT_ERROR(load_llama2c(dir / "h.bin"), {"h.bin", "vocab_size"});
}

TEST(IoModelFiles, Dispatch) {
  ModelFiles l = load_model_files(kStories);
  EXPECT_EQ(l.config.rope_layout, RopeLayout::Interleaved);
  EXPECT_EQ(l.tensors.all().size(), 47u);

  TempDir dir;
  write_text_file_atomic(dir / "config.json", R"({"model_type": "qwen2", "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10, "tie_word_embeddings": true})");
  std::vector<float> norm(8, 3.0f);
  TensorInfo t;
  t.name = "model.norm.weight";
  t.shape = {8};
  t.data = norm.data();
  t.nbytes = 32;
  save_safetensors(dir / "model.safetensors", {t});
  ModelFiles h = load_model_files(dir.path);
  EXPECT_EQ(h.config.arch, "qwen2");
  EXPECT_EQ(h.config.rope_layout, RopeLayout::Halves);
  EXPECT_EQ(static_cast<const float*>(h.tensors.get("model.norm.weight", {8}).data)[0], 3.0f);
  ModelFiles f = load_model_files(dir / "model.safetensors");
  EXPECT_TRUE(f.config.attention_bias);
  EXPECT_NE(f.tensors.find("model.norm.weight"), nullptr);

  TempDir lone;
  save_safetensors(lone / "x.safetensors", {t});
  EXPECT_LT_ERROR(load_model_files(lone / "x.safetensors"), {"x.safetensors", "config.json"});
  EXPECT_LT_ERROR(load_model_files(lone / "missing.bin"), {"missing.bin"});
  write_bytes(lone / "junk.bin", "not a model");
  EXPECT_LT_ERROR(load_model_files(lone / "junk.bin"), {"junk.bin"});
}

}  // namespace
}  // namespace lt
