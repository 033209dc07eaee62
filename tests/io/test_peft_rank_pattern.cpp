// Adapters with per-module ranks (PEFT's rank_pattern / alpha_pattern, written by adaptive rank):
// save_peft_adapter writes the patterns, load_peft_adapter returns the plain LoRA of rank
// max(r, ranks) that computes the same s_m·B_m·A_m per module (factors zero-padded, B scaled by
// s_m / s), keys matched as PEFT's get_pattern_key (a suffix of the module path, as a regex); a
// shape that contradicts the pattern and a bad pattern value are refused naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/mapped_file.h"
#include "io/peft_adapter.h"
#include "io_test_util.h"

namespace lt {
namespace {

using test::error_of;
using test::expect_contains;
using test::TempDir;

// s·B·A of module (in, out) from the loaded set: out x in, in double.
std::vector<double> delta(const LoadedAdapter& ad, int layer, const std::string& module, int in, int out) {
  const TensorInfo* A = ad.tensors.find(peft_lora_key(layer, module, true));
  const TensorInfo* B = ad.tensors.find(peft_lora_key(layer, module, false));
  const int64_t R = A->shape[0];
  std::vector<float> a(size_t(A->numel())), b(size_t(B->numel()));
  convert_to_f32(a.data(), A->data, A->dtype, a.size());
  convert_to_f32(b.data(), B->data, B->dtype, b.size());
  std::vector<double> d(size_t(out * in), 0.0);
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i)
      for (int64_t k = 0; k < R; ++k) d[size_t(o * in + i)] += double(b[size_t(o * R + k)]) * a[size_t(k * in + i)];
  for (double& x : d) x *= ad.config.scaling();
  return d;
}

TEST(PeftRankPattern, LoadsAsTheSameFunctionAtOneRank) {
  TempDir dir;
  LoraConfig c;
  c.r = 4;
  c.alpha = 8;
  c.target_modules = {"q_proj", "v_proj"};
  const int in = 6, out_q = 6, out_v = 2;
  // layer 0 q_proj at rank 2 (alpha 4: the scale 2 of r 4, alpha 8), v_proj at rank 3 with its own alpha 9;
  // layer 1 both at r 4, alpha 8
  RankPattern p;
  p.rank["model.layers.0.self_attn.q_proj"] = 2;
  p.alpha["model.layers.0.self_attn.q_proj"] = 4;
  p.rank["layers.0.self_attn.v_proj"] = 3;  // a suffix, as PEFT matches it
  p.alpha["layers.0.self_attn.v_proj"] = 9;
  std::vector<std::vector<float>> store;
  store.reserve(8);  // the tensors point into it
  std::vector<AdapterTensor> ts;
  auto add = [&](int layer, const std::string& m, int r, int o) {
    auto& a = store.emplace_back(size_t(r * in));
    auto& b = store.emplace_back(size_t(o * r));
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(float(i + 1) * 0.7f + float(layer));
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(float(i + 1) * 0.3f - float(r));
    ts.push_back({peft_lora_key(layer, m, true), {r, in}, a.data()});
    ts.push_back({peft_lora_key(layer, m, false), {o, r}, b.data()});
  };
  add(0, "q_proj", 2, out_q);
  add(0, "v_proj", 3, out_v);
  add(1, "q_proj", 4, out_q);
  add(1, "v_proj", 4, out_v);
  save_peft_adapter(dir.path, c, "base", ts, p);
  const auto j = nlohmann::json::parse(read_text_file(dir.path + "/adapter_config.json"));
  EXPECT_EQ(j["rank_pattern"]["model.layers.0.self_attn.q_proj"], 2);
  EXPECT_EQ(j["alpha_pattern"]["layers.0.self_attn.v_proj"], 9);

  const LoadedAdapter ad = load_peft_adapter(dir.path);
  EXPECT_EQ(ad.config.r, 4);
  // the reference: each module's own s_m·B_m·A_m from the saved factors
  auto want = [&](size_t t, int r, double s, int o) {
    std::vector<double> d(size_t(o * in), 0.0);
    for (int oo = 0; oo < o; ++oo)
      for (int i = 0; i < in; ++i)
        for (int k = 0; k < r; ++k)
          d[size_t(oo * in + i)] += s * double(store[2 * t + 1][size_t(oo * r + k)]) * store[2 * t][size_t(k * in + i)];
    return d;
  };
  struct Case { int layer; const char* m; size_t t; int r; double s; int o; };
  for (const Case& k : {Case{0, "q_proj", 0, 2, 4.0 / 2, out_q}, Case{0, "v_proj", 1, 3, 9.0 / 3, out_v},
                        Case{1, "q_proj", 2, 4, 8.0 / 4, out_q}, Case{1, "v_proj", 3, 4, 8.0 / 4, out_v}}) {
    EXPECT_EQ(ad.tensors.find(peft_lora_key(k.layer, k.m, true))->shape, (std::vector<int64_t>{4, in}));
    const auto got = delta(ad, k.layer, k.m, in, k.o), ref = want(k.t, k.r, k.s, k.o);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5) << k.layer << k.m << i;
  }
}

TEST(PeftRankPattern, RefusesShapesAgainstThePatternAndBadValues) {
  TempDir dir;
  LoraConfig c;
  c.r = 4;
  c.target_modules = {"q_proj"};
  std::vector<float> a(2 * 6, 0.5f), b(6 * 2, 0.5f);
  RankPattern p;
  p.rank["model.layers.0.self_attn.q_proj"] = 3;  // the tensors have rank 2
  save_peft_adapter(dir.path, c, "base", {{peft_lora_key(0, "q_proj", true), {2, 6}, a.data()},
                                          {peft_lora_key(0, "q_proj", false), {6, 2}, b.data()}}, p);
  expect_contains(error_of([&] { load_peft_adapter(dir.path); }), {"lora_A", "r = 3", "rank_pattern"});
  std::string base;
  expect_contains(error_of([&] {
    RankPattern out;
    parse_peft_adapter_config(R"({"peft_type": "LORA", "r": 2, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 0}})",
                              "adapter_config.json", &base, &out);
  }), {"rank_pattern", "q_proj", "> 0"});
  // a caller that reads only the config (no tensors to pad) refuses per-module ranks
  expect_contains(error_of([&] {
    parse_peft_adapter_config(R"({"peft_type": "LORA", "r": 2, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 1}})",
                              "adapter_config.json", &base);
  }), {"rank_pattern", "not supported here"});
}

}  // namespace
}  // namespace lt
