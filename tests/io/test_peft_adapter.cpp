// PEFT adapter folders (io/peft_adapter.h): key names, save -> load round trip of config and
// tensors, the JSON fields PEFT expects, configs written by PEFT itself, key normalization, and the
// errors for configs and tensor sets we do not support.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/mapped_file.h"
#include "io_test_util.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"

namespace lt {
namespace {

using test::TempDir;

TEST(PeftAdapterKeys, Names) {
  EXPECT_EQ(peft_lora_key(3, "q_proj", true), "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(peft_lora_key(0, "down_proj", false), "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
  EXPECT_EQ(peft_bias_key(12, "gate_proj"), "base_model.model.model.layers.12.mlp.gate_proj.bias");
  EXPECT_EQ(peft_bias_key(1, "o_proj"), "base_model.model.model.layers.1.self_attn.o_proj.bias");
}

// An adapter for 2 layers x {q_proj (in 6 -> out 6), down_proj (in 10 -> out 6)} with rank r.
struct Fixture {
  int r = 4;
  std::vector<std::vector<float>> data;
  std::vector<AdapterTensor> tensors;
  explicit Fixture(int rank = 4) : r(rank) {
    for (int layer = 0; layer < 2; layer++)
      for (const char* m : {"q_proj", "down_proj"}) {
        const int64_t in = std::string(m) == "q_proj" ? 6 : 10, out = 6;
        add(peft_lora_key(layer, m, true), {r, in});
        add(peft_lora_key(layer, m, false), {out, r});
      }
  }
  void add(const std::string& key, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; i++) v[i] = float(data.size() * 1000 + i) * 0.125f - 3.0f;
    data.push_back(std::move(v));
    tensors.push_back({key, shape, nullptr});
    for (size_t i = 0; i < tensors.size(); i++) tensors[i].data = data[i].data();
  }
};

LoraConfig sample_config() {
  LoraConfig c;
  c.r = 4;
  c.alpha = 8.0f;
  c.dropout = 0.05f;
  c.use_rslora = true;
  c.target_modules = {"q_proj", "down_proj"};
  c.layers_to_transform = {0, 1};
  return c;
}

TEST(PeftAdapterRoundTrip, ConfigAndTensors) {
  TempDir dir;
  Fixture fx;
  const LoraConfig c = sample_config();
  save_peft_adapter(dir.path, c, "meta-llama/Llama-3.2-1B", fx.tensors);
  const LoadedAdapter a = load_peft_adapter(dir.path);
  EXPECT_EQ(a.base_model, "meta-llama/Llama-3.2-1B");
  EXPECT_EQ(a.config.r, 4);
  EXPECT_EQ(a.config.alpha, 8.0f);
  EXPECT_EQ(a.config.dropout, 0.05f);
  EXPECT_TRUE(a.config.use_rslora);
  EXPECT_EQ(a.config.target_modules, c.target_modules);
  EXPECT_EQ(a.config.layers_to_transform, c.layers_to_transform);
  EXPECT_EQ(a.config.bias, "none");
  EXPECT_EQ(a.config.init, "default");
  EXPECT_FLOAT_EQ(a.config.scaling(), 4.0f);  // rsLoRA: 8 / sqrt(4)
  ASSERT_EQ(a.tensors.all().size(), fx.tensors.size());
  for (size_t i = 0; i < fx.tensors.size(); i++) {
    const TensorInfo* t = a.tensors.find(fx.tensors[i].key);
    ASSERT_NE(t, nullptr) << fx.tensors[i].key;
    EXPECT_EQ(t->dtype, DType::F32);
    EXPECT_EQ(t->shape, fx.tensors[i].shape);
    ASSERT_EQ(t->nbytes, fx.data[i].size() * sizeof(float));
    EXPECT_EQ(0, std::memcmp(t->data, fx.data[i].data(), t->nbytes)) << fx.tensors[i].key;
  }
}

TEST(PeftAdapterRoundTrip, DoraMagnitudesAndInitNames) {
  EXPECT_EQ(peft_magnitude_key(2, "v_proj"), "base_model.model.model.layers.2.self_attn.v_proj.lora_magnitude_vector");
  TempDir dir;
  Fixture fx;
  for (int layer = 0; layer < 2; layer++)
    for (const char* m : {"q_proj", "down_proj"}) fx.add(peft_magnitude_key(layer, m), {6});
  LoraConfig c = sample_config();
  c.use_dora = true;
  c.init = "gaussian";
  save_peft_adapter(dir.path, c, "", fx.tensors);
  const auto j = nlohmann::json::parse(read_text_file(dir / "adapter_config.json"));
  EXPECT_EQ(j["use_dora"], true);
  EXPECT_EQ(j["init_lora_weights"], "gaussian");
  const LoadedAdapter a = load_peft_adapter(dir.path);
  EXPECT_TRUE(a.config.use_dora);
  EXPECT_EQ(a.config.init, "gaussian");
  const TensorInfo& t = a.tensors.get(peft_magnitude_key(1, "down_proj"), {6});
  EXPECT_EQ(0, std::memcmp(t.data, fx.data.back().data(), t.nbytes));
  // PEFT's in-memory name ("...lora_magnitude_vector.default.weight") is normalized too
  TensorSet ts;
  load_safetensors(dir / "adapter_model.safetensors", ts);
  std::vector<TensorInfo> renamed;
  for (const auto& [name, info] : ts.all()) {
    TensorInfo r = info;
    if (name.find("lora_magnitude_vector") != std::string::npos) r.name = name + ".default.weight";
    renamed.push_back(r);
  }
  TempDir dir2;
  save_safetensors(dir2 / "adapter_model.safetensors", renamed);
  test::write_bytes(dir2 / "adapter_config.json", read_text_file(dir / "adapter_config.json"));
  EXPECT_NE(load_peft_adapter(dir2.path).tensors.find(peft_magnitude_key(0, "q_proj")), nullptr);
  // a magnitude in an adapter that is not DoRA, and a DoRA magnitude saved without use_dora
  c.use_dora = false;
  test::expect_contains(test::error_of([&] { save_peft_adapter(dir.path, c, "", fx.tensors); }),
                        {"lora_magnitude_vector", "use_dora false"});
  test::write_bytes(dir2 / "adapter_config.json", peft_adapter_config_json(c, ""));
  test::expect_contains(test::error_of([&] { load_peft_adapter(dir2.path); }),
                        {"adapter_model.safetensors", "DoRA magnitude", "use_dora false"});
}

// A loaded adapter's A and B are what they are, however they were started (PEFT's tests and users
// save init_lora_weights false or eva): only a base-changing initialisation is refused (above).
TEST(PeftAdapterRoundTrip, InitOfALoadedAdapterMattersOnlyIfItChangedTheBase) {
  for (const char* init : {"false", "true", "\"eva\"", "\"gaussian\""}) {
    TempDir dir;
    Fixture fx;
    save_peft_adapter(dir.path, sample_config(), "", fx.tensors);
    auto j = nlohmann::json::parse(read_text_file(dir / "adapter_config.json"));
    j["init_lora_weights"] = nlohmann::json::parse(init);
    test::write_bytes(dir / "adapter_config.json", j.dump());
    EXPECT_EQ(load_peft_adapter(dir.path).config.init, std::string(init) == "\"gaussian\"" ? "gaussian" : "default")
        << init;
  }
}

TEST(PeftAdapterRoundTrip, TensorsOutliveTheLoaderLocals) {
  TempDir dir;
  Fixture fx;
  save_peft_adapter(dir.path, sample_config(), "", fx.tensors);
  TensorSet moved;
  {
    LoadedAdapter a = load_peft_adapter(dir.path);
    EXPECT_EQ(a.base_model, "");
    moved = std::move(a.tensors);
  }
  const TensorInfo& t = moved.get(fx.tensors[0].key, fx.tensors[0].shape);
  EXPECT_EQ(static_cast<const float*>(t.data)[1], fx.data[0][1]);
}

TEST(PeftAdapterRoundTrip, BiasesUnderBaseLayerForAdaptedModules) {
  // PEFT 0.21 with bias="all" on a Llama with attention biases saves the adapted q_proj's bias as
  // "...q_proj.base_layer.bias" (and loads it only from there) and k_proj's as "...k_proj.bias".
  TempDir dir;
  Fixture fx;
  fx.add(peft_bias_key(0, "q_proj"), {6});
  fx.add(peft_bias_key(1, "k_proj"), {6});
  LoraConfig c = sample_config();
  c.bias = "all";
  save_peft_adapter(dir.path, c, "", fx.tensors);
  TensorSet raw;
  load_safetensors(dir / "adapter_model.safetensors", raw);
  EXPECT_NE(raw.find("base_model.model.model.layers.0.self_attn.q_proj.base_layer.bias"), nullptr);
  EXPECT_NE(raw.find("base_model.model.model.layers.1.self_attn.k_proj.bias"), nullptr);
  EXPECT_EQ(raw.find(peft_bias_key(0, "q_proj")), nullptr);
  const LoadedAdapter a = load_peft_adapter(dir.path);
  EXPECT_EQ(a.config.bias, "all");
  const TensorInfo& qb = a.tensors.get(peft_bias_key(0, "q_proj"), {6});
  EXPECT_EQ(0, std::memcmp(qb.data, fx.data[fx.data.size() - 2].data(), 6 * sizeof(float)));
  a.tensors.get(peft_bias_key(1, "k_proj"), {6});
  c.bias = "none";
  test::expect_contains(test::error_of([&] { save_peft_adapter(dir.path, c, "", fx.tensors); }),
                        {"q_proj.bias", "bias \"none\""});
}

TEST(PeftAdapterJson, FieldsAsPeftWritesThem) {
  TempDir dir;
  Fixture fx;
  LoraConfig c = sample_config();
  c.alpha = 16.0f;
  c.layers_to_transform = {};
  c.target_modules = {"all-linear"};
  save_peft_adapter(dir.path, c, "base/model", fx.tensors);
  const std::string text = read_text_file(dir / "adapter_config.json");
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], 4);
  EXPECT_TRUE(j["lora_alpha"].is_number_integer());  // PEFT's lora_alpha is an int
  EXPECT_EQ(j["lora_alpha"], 16);
  EXPECT_NE(text.find("\"lora_dropout\": 0.05,"), std::string::npos) << text;  // not 0.0500000007
  EXPECT_EQ(j["target_modules"], nlohmann::json(llama_linear_modules()));  // all-linear resolved
  EXPECT_EQ(j["bias"], "none");
  EXPECT_EQ(j["use_rslora"], true);
  EXPECT_EQ(j["fan_in_fan_out"], false);
  EXPECT_EQ(j["inference_mode"], true);
  EXPECT_EQ(j["init_lora_weights"], true);
  EXPECT_TRUE(j["layers_to_transform"].is_null());
  EXPECT_TRUE(j["layers_pattern"].is_null());
  EXPECT_EQ(j["base_model_name_or_path"], "base/model");
  EXPECT_TRUE(j["modules_to_save"].is_null());
  EXPECT_TRUE(j["revision"].is_null());
  EXPECT_EQ(j["use_dora"], false);
  EXPECT_EQ(j["rank_pattern"], nlohmann::json::object());
  EXPECT_EQ(j["alpha_pattern"], nlohmann::json::object());
  // Keys sorted, 2-space indent, as json.dump(sort_keys=True, indent=2).
  EXPECT_EQ(text.rfind("{\n  \"alpha_pattern\": {},\n  \"base_model_name_or_path\"", 0), 0u) << text;
  // The safetensors metadata PEFT (safetensors.torch.save_file) writes.
  TensorSet ts;
  const auto meta = load_safetensors(dir / "adapter_model.safetensors", ts);
  EXPECT_EQ(meta.at("format"), "pt");
}

// adapter_config.json as written by PEFT 0.21.2: LoraConfig(r=8, lora_alpha=16,
// target_modules=['q_proj','v_proj'], task_type='CAUSAL_LM', lora_dropout=0.05).save_pretrained().
const char* kPeft021Config = R"({
  "alora_invocation_tokens": null, "alpha_pattern": {}, "arrow_config": null, "auto_mapping": null,
  "base_model_name_or_path": null, "bias": "none", "corda_config": null, "ensure_weight_tying": false,
  "eva_config": null, "exclude_modules": null, "fan_in_fan_out": false, "inference_mode": false,
  "init_lora_weights": true, "kasa_config": null, "layer_replication": null, "layers_pattern": null,
  "layers_to_transform": null, "loftq_config": {}, "lora_alpha": 16, "lora_bias": false, "lora_dropout": 0.05,
  "lora_ga_config": null, "megatron_config": null, "megatron_core": "megatron.core", "modules_to_save": null,
  "monteclora_config": null, "peft_type": "LORA", "peft_version": "0.21.2", "qalora_group_size": 16, "r": 8,
  "rank_pattern": {}, "revision": null, "target_modules": ["v_proj", "q_proj"], "target_parameters": null,
  "task_type": "CAUSAL_LM", "trainable_token_indices": null, "use_bdlora": null, "use_dora": false,
  "use_qalora": false, "use_rslora": false, "velora_config": null
})";

TEST(PeftAdapterJson, ReadsConfigWrittenByPeft) {
  std::string base = "x";
  const LoraConfig c = parse_peft_adapter_config(kPeft021Config, "adapter_config.json", &base);
  EXPECT_EQ(base, "");
  EXPECT_EQ(c.r, 8);
  EXPECT_EQ(c.alpha, 16.0f);
  EXPECT_EQ(c.dropout, 0.05f);
  EXPECT_EQ(c.target_modules, (std::vector<std::string>{"v_proj", "q_proj"}));
  EXPECT_FALSE(c.use_rslora);
  EXPECT_TRUE(c.layers_to_transform.empty());
  EXPECT_FLOAT_EQ(c.scaling(), 2.0f);
}

TEST(PeftAdapterLoad, AcceptsAllLinearStringAndAdapterNameInKeys) {
  TempDir dir;
  const std::vector<float> a(2 * 6, 1.0f), b(6 * 2, 2.0f);
  auto info = [](std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
    TensorInfo t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.data = v.data();
    t.nbytes = v.size() * sizeof(float);
    return t;
  };
  save_safetensors(dir / "adapter_model.safetensors",
                   {info("base_model.model.model.layers.5.self_attn.o_proj.lora_A.default.weight", {2, 6}, a),
                    info("base_model.model.model.layers.5.self_attn.o_proj.lora_B.default.weight", {6, 2}, b)});
  test::write_bytes(dir / "adapter_config.json",
                    R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4.5, "target_modules": "all-linear",
                        "layers_to_transform": 5, "layers_pattern": "layers"})");
  const LoadedAdapter ad = load_peft_adapter(dir.path);
  EXPECT_EQ(ad.config.target_modules, (std::vector<std::string>{"all-linear"}));
  EXPECT_EQ(ad.config.alpha, 4.5f);
  EXPECT_EQ(ad.config.layers_to_transform, (std::vector<int>{5}));
  const TensorInfo& ta = ad.tensors.get(peft_lora_key(5, "o_proj", true), {2, 6});
  const TensorInfo& tb = ad.tensors.get(peft_lora_key(5, "o_proj", false), {6, 2});
  EXPECT_EQ(static_cast<const float*>(ta.data)[0], 1.0f);
  EXPECT_EQ(static_cast<const float*>(tb.data)[11], 2.0f);
}

// Writes the fixture adapter, replaces adapter_config.json by `config_text`, and returns the
// message of the lt::Error load_peft_adapter throws.
std::string load_error_with_config(const std::string& config_text) {
  TempDir dir;
  Fixture fx;
  save_peft_adapter(dir.path, sample_config(), "", fx.tensors);
  test::write_bytes(dir / "adapter_config.json", config_text);
  return test::error_of([&] { load_peft_adapter(dir.path); });
}

TEST(PeftAdapterLoad, BadConfigsNameFileAndKey) {
  const std::string ok_targets = R"("target_modules": ["q_proj", "down_proj"])";
  test::expect_contains(load_error_with_config(R"({"peft_type": "IA3", "r": 4, )" + ok_targets + "}"),
                        {"adapter_config.json", "IA3", "only LORA"});
  test::expect_contains(load_error_with_config(R"({"r": 4, )" + ok_targets + "}"), {"missing 'peft_type'"});
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": 0, )" + ok_targets + "}"),
                        {"adapter_config.json", "'r' must be > 0"});
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": 4, "target_modules": ".*q_proj"})"),
                        {"target_modules '.*q_proj'", "not supported"});
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": 4, "target_modules": ["c_attn"]})"),
                        {"target module 'c_attn'"});
  // per-module ranks load (tests/io/test_peft_rank_pattern.cpp); tensors against the pattern do not
  test::expect_contains(
      load_error_with_config(R"({"peft_type": "LORA", "r": 4, "rank_pattern": {"q_proj": 8}, )" + ok_targets + "}"),
      {"q_proj", "r = 8", "rank_pattern"});
  test::expect_contains(
      load_error_with_config(R"({"peft_type": "LORA", "r": 4, "alpha_pattern": {"q_proj": -1}, )" + ok_targets + "}"),
      {"alpha_pattern['q_proj']", "> 0"});
  // DoRA without its magnitudes; an adapter in PiSSA / OLoRA form (for a residual base)
  test::expect_contains(
      load_error_with_config(R"({"peft_type": "LORA", "r": 4, "use_dora": true, )" + ok_targets + "}"),
      {"adapter_model.safetensors", "use_dora", "down_proj.lora_magnitude_vector"});
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": 4, "init_lora_weights": "pissa", )" +
                                               ok_targets + "}"),
                        {"adapter_config.json", "PiSSA form", "path_initial_model_for_weight_conversion"});
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": 4, "init_lora_weights": "olora", )" +
                                               ok_targets + "}"),
                        {"OLoRA form"});
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": 4, "init_lora_weights": "loftq", )" +
                                               ok_targets + "}"),
                        {"init_lora_weights 'loftq'", "LoftQ form"});
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": 4, "modules_to_save": ["lm_head"], )" +
                                               ok_targets + "}"),
                        {"'modules_to_save'"});
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": "4", )" + ok_targets + "}"),
                        {"key 'r' must be an integer"});
  test::expect_contains(load_error_with_config("{not json"), {"adapter_config.json", "malformed JSON"});
  // r in the config disagrees with the tensors' rank
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": 8, )" + ok_targets + "}"),
                        {"adapter_model.safetensors", "lora_A.weight", "r = 8"});
  // tensors adapt down_proj, which the config does not list
  test::expect_contains(load_error_with_config(R"({"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"]})"),
                        {"mlp.down_proj.lora_A.weight", "not in target_modules"});
}

TEST(PeftAdapterLoad, BadTensorSetsNameTheKey) {
  {  // lora_A without lora_B
    TempDir dir;
    Fixture fx;
    fx.tensors.erase(fx.tensors.begin() + 1);  // layer 0 q_proj lora_B
    save_peft_adapter(dir.path, sample_config(), "", fx.tensors);
    test::expect_contains(test::error_of([&] { load_peft_adapter(dir.path); }),
                          {"adapter_model.safetensors", "layers.0.self_attn.q_proj.lora_B.weight", "no matching",
                           "layers.0.self_attn.q_proj.lora_A.weight"});
  }
  {  // a key that is not a LoRA key
    TempDir dir;
    const std::vector<float> v(4, 0.0f);
    TensorInfo t;
    t.name = "base_model.model.lm_head.weight";
    t.shape = {2, 2};
    t.data = v.data();
    t.nbytes = 16;
    save_safetensors(dir / "adapter_model.safetensors", {t});
    test::write_bytes(dir / "adapter_config.json", peft_adapter_config_json(sample_config(), ""));
    test::expect_contains(test::error_of([&] { load_peft_adapter(dir.path); }),
                          {"adapter_model.safetensors", "base_model.model.lm_head.weight", "not a LoRA"});
  }
  {  // no folder contents
    TempDir dir;
    test::expect_contains(test::error_of([&] { load_peft_adapter(dir.path); }), {"adapter_config.json"});
  }
  {  // saving a key that load would not accept
    TempDir dir;
    const float x = 0;
    test::expect_contains(
        test::error_of([&] { save_peft_adapter(dir.path, sample_config(), "", {{"model.layers.0.q", {1}, &x}}); }),
        {"model.layers.0.q", "not a PEFT LoRA key"});
  }
}

}  // namespace
}  // namespace lt
