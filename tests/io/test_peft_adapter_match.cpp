// An adapter must fit the base it is merged into (io/peft_adapter.h check_adapter_matches_model):
// one for a model with more layers, fewer layers or another hidden size is refused naming the
// tensor, instead of merging with layers dropped; an adapter holding NaN or infinity is refused
// at load naming the tensor; lora_alpha out of range in adapter_config.json is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "io/peft_adapter.h"
#include "io_test_util.h"

namespace lt {
namespace {

using test::error_of;
using test::expect_contains;
using test::TempDir;

// The base: hidden size C, 3 heads of 2 (q 6), 1 key/value head (kv 2), MLP width F.
ModelConfig base(int layers, int C = 6, int F = 10) {
  ModelConfig m;
  m.dim = C;
  m.n_layers = layers;
  m.n_heads = 3;
  m.n_kv_heads = 1;
  m.head_dim = C / 3;
  m.hidden_dim = F;
  m.vocab_size = 32;
  return m;
}

// Writes a rank-2 adapter of q_proj and down_proj in `layers` layers of base(layers, C, F), every
// layer adapted (layers_to_transform unset); `poison` (if set) goes into the first element of the
// last tensor.
void write_adapter(const std::string& dir, int layers, int C = 6, int F = 10,
                   float poison = std::numeric_limits<float>::quiet_NaN(), bool poisoned = false) {
  const int64_t r = 2;
  std::vector<std::vector<float>> data;
  std::vector<AdapterTensor> ts;
  auto add = [&](std::string key, std::vector<int64_t> shape) {
    data.emplace_back(size_t(shape[0] * (shape.size() > 1 ? shape[1] : 1)), 0.01f);
    ts.push_back({std::move(key), std::move(shape), nullptr});
  };
  for (int l = 0; l < layers; ++l) {
    add(peft_lora_key(l, "q_proj", true), {r, C});
    add(peft_lora_key(l, "q_proj", false), {C, r});
    add(peft_lora_key(l, "down_proj", true), {r, F});
    add(peft_lora_key(l, "down_proj", false), {C, r});
  }
  if (poisoned) data.back()[0] = poison;
  for (size_t i = 0; i < ts.size(); ++i) ts[i].data = data[i].data();
  LoraConfig c;
  c.r = int(r);
  c.alpha = 4;
  c.target_modules = {"q_proj", "down_proj"};
  save_peft_adapter(dir, c, "tiny-base", ts);
}

TEST(PeftAdapterMatch, TheAdapterOfThisModelFits) {
  TempDir dir;
  write_adapter(dir.path, 2);
  check_adapter_matches_model(load_peft_adapter(dir.path), base(2), dir.path);
}

TEST(PeftAdapterMatch, MoreLayersThanTheBaseNamesTheTensorAndTheLayerCount) {
  TempDir dir;
  write_adapter(dir.path, 3);
  expect_contains(error_of([&] { check_adapter_matches_model(load_peft_adapter(dir.path), base(2), dir.path); }),
                  {"layers.2.", "adapts layer 2", "2 layers", "another model"});
}

TEST(PeftAdapterMatch, FewerLayersThanTheBaseNamesTheMissingTensor) {
  TempDir dir;
  write_adapter(dir.path, 2);
  expect_contains(error_of([&] { check_adapter_matches_model(load_peft_adapter(dir.path), base(4), dir.path); }),
                  {peft_lora_key(2, "q_proj", true), "4-layer", "fewer layers"});
}

TEST(PeftAdapterMatch, OtherHiddenSizeNamesTheTensorAndBothShapes) {
  TempDir dir;
  write_adapter(dir.path, 2, /*C=*/6);
  expect_contains(error_of([&] { check_adapter_matches_model(load_peft_adapter(dir.path), base(2, 9), dir.path); }),
                  {"layers.0.mlp.down_proj.lora_B.weight", "[6, 2]", "[9, 2]", "(out 9, in 10)", "hidden size 9"});
  expect_contains(error_of([&] { check_adapter_matches_model(load_peft_adapter(dir.path), base(2, 6, 12), dir.path); }),
                  {"down_proj", "[2, 10]", "[2, 12]"});
}

TEST(PeftAdapterMatch, NaNOrInfinityIsRefusedAtLoadNamingTheTensor) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    TempDir dir;
    write_adapter(dir.path, 2, 6, 10, bad, true);
    expect_contains(error_of([&] { load_peft_adapter(dir.path); }),
                    {peft_lora_key(1, "down_proj", false), "non-finite", "element 0"});
  }
  TempDir ok;
  write_adapter(ok.path, 2, 6, 10, 3.0e38f, true);  // large but finite: loads
  load_peft_adapter(ok.path);
}

TEST(PeftAdapterMatch, LoraAlphaOutOfRangeInTheConfig) {
  for (const char* alpha : {"0", "-4", "1e39"}) {
    const std::string json = std::string(R"({"peft_type": "LORA", "r": 2, "target_modules": ["q_proj"], "lora_alpha": )") +
                             alpha + "}";
    expect_contains(error_of([&] { parse_peft_adapter_config(json, "adapter_config.json", nullptr); }),
                    {"adapter_config.json", "lora_alpha", "> 0"});
  }
}

}  // namespace
}  // namespace lt
