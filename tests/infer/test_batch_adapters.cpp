// LoRA adapters applied unmerged by the batch engine, on stories260K with two random PEFT adapters
// (different ranks and target modules): a batch mixing the base and both adapters gives each
// request exactly its tokens alone; the unmerged logits equal the merged model's (LlamaModel::
// merge_adapter) within float tolerance, and greedy generation gives the merged model's tokens;
// adapters evicted by the LRU byte budget and loaded again give the same outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "batch_test_util.h"
#include "infer/adapter_cache.h"
#include "infer/generate.h"
#include "io/peft_adapter.h"
#include "../io/io_test_util.h"

namespace lt::test {
namespace {

// A PEFT adapter for stories260K with random A and B (B nonzero, so the adapter changes outputs).
void write_adapter(const std::string& dir, int r, float alpha, std::vector<std::string> targets, uint32_t seed) {
  const ModelConfig& c = fx().model->config();
  LoraConfig lc;
  lc.r = r;
  lc.alpha = alpha;
  lc.target_modules = targets;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.15f);
  std::vector<std::vector<float>> store;
  std::vector<AdapterTensor> ts;
  const auto& mods = llama_linear_modules();
  for (int l = 0; l < c.n_layers; ++l)
    for (int m = 0; m < 7; ++m) {
      if (!lora_targets(lc, Proj(m))) continue;
      auto [in, out] = c.linear_shape(m);
      for (bool is_a : {true, false}) {
        const std::vector<int64_t> shape = is_a ? std::vector<int64_t>{r, in} : std::vector<int64_t>{out, r};
        store.emplace_back(size_t(shape[0] * shape[1]));
        for (float& x : store.back()) x = nd(rng);
        ts.push_back({peft_lora_key(l, mods[size_t(m)], is_a), shape, store.back().data()});
      }
    }
  save_peft_adapter(dir, lc, "stories260K", ts);
}

struct Adapters {
  TempDir d1, d2;
  std::shared_ptr<const LoraWeights> a1, a2;
  Adapters() {
    write_adapter(d1.path, 4, 8.0f, {"q_proj", "v_proj", "down_proj"}, 1);
    write_adapter(d2.path, 8, 4.0f, {"all-linear"}, 2);
    a1 = std::make_shared<LoraWeights>(d1.path, fx().model->config());
    a2 = std::make_shared<LoraWeights>(d2.path, fx().model->config());
  }
};

SchedRequest with(SchedRequest r, std::shared_ptr<const LoraWeights> a, uint64_t salt) {
  r.adapter = std::move(a);
  r.adapter_salt = salt;
  return r;
}

TEST(BatchAdapters, MixedBatchEqualsEachAlone) {
  Adapters ad;
  std::vector<SchedRequest> reqs;
  for (const auto& p : kPrompts) {
    reqs.push_back(request(p, 40));
    reqs.push_back(with(request(p, 40), ad.a1, 1));
    reqs.push_back(with(request(p, 40), ad.a2, 2));
  }
  SchedulerOptions so;
  so.max_context = 256;
  so.max_seqs = 32;
  so.max_batch_tokens = 64;
  const auto batched = run(reqs, so);
  expect_same(batched, each_alone(reqs, so));
  // the adapters change the output
  EXPECT_NE(batched[0].tokens, batched[1].tokens);
  EXPECT_NE(batched[0].tokens, batched[2].tokens);
  EXPECT_NE(batched[1].tokens, batched[2].tokens);
}

// The merged model computes x·(W + s·B·A)ᵀ with W + s·B·A rounded to f32 once; the engine computes
// x·Wᵀ + s·(x·Aᵀ)·Bᵀ. Same arithmetic in exact math, different rounding: the logits agree to a few
// ulps of their size, not bit for bit, hence the tolerance.
TEST(BatchAdapters, UnmergedEqualsMergedWithinFloatTolerance) {
  Adapters ad;
  const ModelConfig& c = fx().model->config();
  KvPool pool(c, 16, 32);
  BatchForwardOptions bo;
  bo.max_context = 256;
  BatchForward fwd(fx().model, pool, bo);
  for (const auto& [dir, w] : {std::pair{ad.d1.path, ad.a1}, std::pair{ad.d2.path, ad.a2}}) {
    InferenceOptions io;
    io.context = 256;
    auto merged = LlamaModel::load(kDir + "stories260K.bin", io, ops_cpu());
    merged->merge_adapter(dir);
    for (const auto& p : kPrompts) {
      const std::vector<int> ids = fx().tok->encode(p, true);
      std::vector<int> blocks = {0, 1, 2, 3, 4, 5, 6, 7};
      const BatchSeq s{blocks.data(), 0, int(ids.size()), w.get(), true};
      fwd.forward(ids, std::span<const BatchSeq>(&s, 1));
      merged->forward(ids.data(), int(ids.size()), 0);
      float worst = 0, scale = 1;
      for (int v = 0; v < c.vocab_size; ++v) {
        worst = std::max(worst, std::fabs(fwd.logits(0)[v] - merged->logits()[v]));
        scale = std::max(scale, std::fabs(merged->logits()[v]));
      }
      EXPECT_LT(worst, 2e-5f * scale) << dir << " prompt '" << p << "'";
    }
    // greedy generation: the merged model's tokens
    for (const auto& p : kPrompts) {
      SchedulerOptions so;
      so.max_context = 256;
      const auto got = run({with(request(p, 40), w, 1)}, so)[0];
      GenerateOptions g;
      g.max_new_tokens = 40;
      g.stop_at_eos = false;
      g.sampler.temperature = 0;
      const auto ref = generate_ids(*merged, *fx().tok, fx().tok->encode(p, true), g,
                                    [](int, const std::string&) { return true; });
      EXPECT_EQ(got.tokens, ref.output_ids) << dir << " prompt '" << p << "'";
    }
  }
}

TEST(BatchAdapters, EvictedAndReloadedGivesTheSameOutputs) {
  Adapters ad;
  AdapterCache cache(fx().model->config(), ad.a2->bytes());  // room for one adapter at a time
  cache.add("one", ad.d1.path);
  cache.add("two", ad.d2.path);  // evicts "one"
  SchedulerOptions so;
  so.max_context = 256;
  auto out = [&](const std::string& name) {
    uint64_t salt = 0;
    auto w = cache.get(name, &salt);
    return run({with(request(kPrompts[1], 30), w, salt)}, so)[0].tokens;
  };
  const auto first1 = out("one"), first2 = out("two"), again1 = out("one"), again2 = out("two");
  EXPECT_EQ(first1, again1);
  EXPECT_EQ(first2, again2);
  EXPECT_NE(first1, first2);
  const AdapterStats st = cache.stats();
  EXPECT_GE(st.evictions, 4u);
  EXPECT_GE(st.loads, 5u);
  EXPECT_EQ(st.resident, 1);
  EXPECT_LE(st.resident_bytes, ad.a2->bytes());
  EXPECT_TRUE(cache.remove("one"));
  EXPECT_FALSE(cache.remove("one"));
  EXPECT_THROW(cache.get("one", nullptr), Error);
  EXPECT_THROW(cache.add("two", ad.d1.path), Error);  // the name is taken
}

}  // namespace
}  // namespace lt::test
