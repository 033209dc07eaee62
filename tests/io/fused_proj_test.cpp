// Phi-3's fused projections (io/fused_proj.h): a phi3 config.json parses with its defaults and
// legacy rope names; qkv_proj / gate_up_proj split into row views and fuse back byte for byte; a
// fused PEFT adapter becomes per-projection tensors sharing lora_A with lora_B's row blocks; the
// modules a base does not have are refused by name.
#include "io/fused_proj.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "io/hf_model.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace lt {
namespace {

using test::error_of;
using test::TempDir;

const char* kPhi3 = R"({"model_type": "phi3", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
  "num_key_value_heads": 1, "intermediate_size": 6, "vocab_size": 16, "max_position_embeddings": 64,
  "original_max_position_embeddings": 16, "sliding_window": 12,
  "rope_scaling": {"type": "su", "short_factor": [1, 1], "long_factor": [2, 3]}})";

TEST(Phi3Config, ParsesFusedLongropeAndWindow) {
  const ModelConfig c = parse_hf_config(kPhi3, "config.json");
  EXPECT_EQ(c.arch, "phi3");
  EXPECT_TRUE(c.fused_proj);
  EXPECT_EQ(c.rope_scaling.type, "longrope");  // "su" as Phi3Config reads it
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 16);
  EXPECT_EQ(c.sliding_window, 12);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_STREQ(c.module_name(Proj::K), "qkv_proj");
  EXPECT_STREQ(c.module_name(Proj::Up), "gate_up_proj");
  EXPECT_STREQ(c.module_name(Proj::Down), "down_proj");
  EXPECT_EQ(c.fused_rows(Proj::V), (std::pair<int64_t, int64_t>{8 + 4, 8 + 2 * 4}));
  EXPECT_EQ(c.fused_rows(Proj::Up), (std::pair<int64_t, int64_t>{6, 12}));
  std::string partial = kPhi3;
  partial.insert(1, R"("partial_rotary_factor": 0.5, )");
  EXPECT_NE(error_of([&] { parse_hf_config(partial, "config.json"); }).find("partial_rotary_factor 0.5"),
            std::string::npos);
}

TEST(FusedProj, SplitIsRowViewsAndFuseRestoresTheBytes) {
  const ModelConfig c = parse_hf_config(kPhi3, "config.json");
  std::vector<float> qkv(16 * 8), gate_up(12 * 8);
  std::iota(qkv.begin(), qkv.end(), 0.0f);
  std::iota(gate_up.begin(), gate_up.end(), 1000.0f);
  TensorSet ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    ts.add({name, DType::F32, shape, v.data(), v.size() * sizeof(float), "model.safetensors"});
  };
  add("model.layers.0.self_attn.qkv_proj.weight", {16, 8}, qkv);
  add("model.layers.0.mlp.gate_up_proj.weight", {12, 8}, gate_up);
  split_fused_tensors(c, ts);
  EXPECT_FALSE(ts.find("model.layers.0.self_attn.qkv_proj.weight"));
  const TensorInfo& k = ts.get("model.layers.0.self_attn.k_proj.weight", {4, 8});
  EXPECT_EQ(static_cast<const float*>(k.data)[0], 8.0f * 8);  // row 8 of qkv
  const TensorInfo& up = ts.get("model.layers.0.mlp.up_proj.weight", {6, 8});
  EXPECT_EQ(static_cast<const float*>(up.data)[0], 1000.0f + 6 * 8);
  std::vector<TensorInfo> out;
  for (const auto& [n, t] : ts.all()) out.push_back(t);
  std::vector<std::vector<uint8_t>> storage;
  fuse_proj_tensors(c, out, storage);
  ASSERT_EQ(out.size(), 2u);
  for (const TensorInfo& t : out) {
    const auto& want = t.name.find("qkv") != std::string::npos ? qkv : gate_up;
    ASSERT_EQ(t.nbytes, want.size() * sizeof(float)) << t.name;
    EXPECT_EQ(std::memcmp(t.data, want.data(), t.nbytes), 0) << t.name;
  }
  // a wrongly shaped fused tensor is named with what was expected
  TensorSet bad;
  bad.add({"model.layers.0.self_attn.qkv_proj.weight", DType::F32, {15, 8}, qkv.data(), 15 * 8 * 4, "m.safetensors"});
  const std::string e = error_of([&] { split_fused_tensors(c, bad); });
  EXPECT_NE(e.find("qkv_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("[16, 8]"), std::string::npos) << e;
}

TEST(FusedProj, AdapterSplitsIntoSharedAAndRowBlocksOfB) {
  const ModelConfig c = parse_hf_config(kPhi3, "config.json");
  TempDir dir;
  LoraConfig lc;
  lc.r = 2;
  lc.target_modules = {"qkv_proj", "down_proj"};
  std::vector<float> A(2 * 8, 0.5f), B(16 * 2), Ad(2 * 6, 0.25f), Bd(8 * 2, 1.0f);
  std::iota(B.begin(), B.end(), 0.0f);
  save_peft_adapter(dir.path, lc, "", {{peft_lora_key(0, "qkv_proj", true), {2, 8}, A.data()},
                                       {peft_lora_key(0, "qkv_proj", false), {16, 2}, B.data()},
                                       {peft_lora_key(0, "down_proj", true), {2, 6}, Ad.data()},
                                       {peft_lora_key(0, "down_proj", false), {8, 2}, Bd.data()}});
  LoadedAdapter ad = load_peft_adapter(dir.path);
  split_fused_adapter(ad, c, dir.path);
  check_adapter_matches_model(ad, c, dir.path);
  EXPECT_EQ(ad.config.target_modules, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "down_proj"}));
  const TensorInfo& vb = ad.tensors.get(peft_lora_key(0, "v_proj", false), {4, 2});
  EXPECT_EQ(static_cast<const float*>(vb.data)[0], 12.0f * 2);  // row 12 of B
  EXPECT_EQ(ad.tensors.get(peft_lora_key(0, "k_proj", true), {2, 8}).data,
            ad.tensors.get(peft_lora_key(0, "q_proj", true), {2, 8}).data);
  // the same adapter on a Llama base, and a q_proj adapter on Phi-3, are refused by name
  ModelConfig llama = c;
  llama.arch = "llama";
  llama.fused_proj = false;
  LoadedAdapter again = load_peft_adapter(dir.path);
  EXPECT_NE(error_of([&] { split_fused_adapter(again, llama, dir.path); }).find("qkv_proj, a Phi-3 fused module"),
            std::string::npos);
  TempDir q;
  lc.target_modules = {"q_proj"};
  std::vector<float> Bq(8 * 2);
  save_peft_adapter(q.path, lc, "", {{peft_lora_key(0, "q_proj", true), {2, 8}, A.data()},
                                     {peft_lora_key(0, "q_proj", false), {8, 2}, Bq.data()}});
  LoadedAdapter qa = load_peft_adapter(q.path);
  EXPECT_NE(error_of([&] { split_fused_adapter(qa, c, q.path); }).find("does not have"), std::string::npos);
}

// PEFT records "all-linear" on a small model as module paths; they match as PEFT matches them.
TEST(FusedProj, AdapterTargetsGivenAsModulePaths) {
  ModelConfig c = parse_hf_config(kPhi3, "config.json");
  TempDir dir;
  LoraConfig lc;
  lc.r = 2;
  lc.target_modules = {"model.layers.0.self_attn.qkv_proj"};
  std::vector<float> A(2 * 8, 0.5f), B(16 * 2, 1.0f);
  save_peft_adapter(dir.path, lc, "", {{peft_lora_key(0, "qkv_proj", true), {2, 8}, A.data()},
                                       {peft_lora_key(0, "qkv_proj", false), {16, 2}, B.data()}});
  LoadedAdapter ad = load_peft_adapter(dir.path);
  split_fused_adapter(ad, c, dir.path);
  EXPECT_EQ(ad.config.target_modules[1], "model.layers.0.self_attn.k_proj");
  check_adapter_matches_model(ad, c, dir.path);
  // a second layer the path does not name needs no tensors
  c.n_layers = 2;
  check_adapter_matches_model(ad, c, dir.path);
}

}  // namespace
}  // namespace lt
