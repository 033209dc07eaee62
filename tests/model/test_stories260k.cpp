// The real pretrained stories260K (llama2.c format, ../shared): greedy decoding from BOS prints the
// reference story token for token, with the fast and the reference kernels, and the plan's
// arenas are exactly what was allocated.
#include <gtest/gtest.h>

#include "core/error.h"
#include "infer/generate.h"
#include "kernels/ops.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

using namespace lt;

static const std::string kDir = std::string(LT_SHARED_DIR) + "/models/stories260K/";
static const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high.";

static std::string greedy(const Ops& ops, int prefill_block) {
  auto tok = Tokenizer::load(kDir + "tok512.bin");
  InferenceOptions io;
  io.prefill_block = prefill_block;
  auto model = LlamaModel::load(kDir + "stories260K.bin", io, ops);
  GenerateOptions g;
  g.max_new_tokens = 80;
  g.sampler.temperature = 0;
  std::string streamed;
  auto r = generate(*model, *tok, "", g, [&](const std::string& s) { streamed += s; });
  EXPECT_EQ(streamed, r.text);
  return r.text;
}

TEST(ModelStories260K, GreedyStoryMatchesReference) {
  std::string text = greedy(ops_cpu(), 0);
  EXPECT_EQ(text.substr(0, std::string(kStory).size()), kStory) << text;
}

TEST(ModelStories260K, ReferenceKernelsGiveTheSameStory) {
  std::string text = greedy(ops_ref(), 0);
  EXPECT_EQ(text.substr(0, std::string(kStory).size()), kStory) << text;
}

TEST(ModelStories260K, ContinuationKeepsItsLeadingSpace) {
  auto tok = Tokenizer::load(kDir + "tok512.bin");
  auto model = LlamaModel::load(kDir + "stories260K.bin", {}, ops_cpu());
  GenerateOptions g;
  g.max_new_tokens = 8;
  g.sampler.temperature = 0;
  auto r = generate(*model, *tok, "Once upon a time, there was a little girl named", g, [](const std::string&) {});
  EXPECT_EQ(r.text.substr(0, 5), " Lily") << r.text;
}

TEST(ModelStories260K, PlanMatchesAllocation) {
  InferenceOptions io;
  io.context = 100;
  auto model = LlamaModel::load(kDir + "stories260K.bin", io, ops_cpu());
  const auto& plan = model->plan();
  for (size_t c = 0; c < kNumCategories; ++c) {
    if (Category(c) == Category::MappedWeights) continue;
    EXPECT_EQ(plan.arena_bytes(Category(c)), model->arenas().allocated_bytes(Category(c)));
  }
  // KV cache: L * 2 * P * NKV * HS floats = 5 * 2 * 100 * 4 * 8 * 4 bytes
  EXPECT_EQ(plan.arena_bytes(Category::KVCache), 5u * 2 * 100 * 4 * 8 * 4);
  // the prompt continuation from a prompt with a prefill split over several blocks matches one block
  auto tok = Tokenizer::load(kDir + "tok512.bin");
  std::vector<int> ids = tok->encode("Once upon a time, there was a little girl named Lily.", true);
  model->forward(ids.data(), int(ids.size()), 0);
  std::vector<float> a(model->logits(), model->logits() + 512);
  InferenceOptions small = io;
  small.prefill_block = 3;
  auto model2 = LlamaModel::load(kDir + "stories260K.bin", small, ops_cpu());
  model2->forward(ids.data(), int(ids.size()), 0);
  for (int i = 0; i < 512; ++i) EXPECT_NEAR(a[i], model2->logits()[i], 1e-4f);
}

// A sequence over another model's weights (its own KV cache and activations) computes exactly
// what a model loaded on its own does, and allocates no weights.
TEST(ModelStories260K, SharedWeightsGiveIdenticalLogits) {
  InferenceOptions io;
  io.context = 64;
  io.prefill_block = 5;
  auto alone = LlamaModel::load(kDir + "stories260K.bin", io, ops_cpu());
  InferenceOptions one;
  one.context = 1;
  std::shared_ptr<const LlamaModel> weights = LlamaModel::load(kDir + "stories260K.bin", one, ops_cpu());
  LlamaModel shared(weights, io);
  EXPECT_EQ(shared.arenas().allocated_bytes(Category::FrozenWeights), 0u);
  EXPECT_EQ(shared.arenas().allocated_bytes(Category::KVCache), alone->arenas().allocated_bytes(Category::KVCache));
  const std::vector<int> ids = {1, 403, 407, 261, 378, 263, 300, 285};
  alone->forward(ids.data(), int(ids.size()), 0);
  shared.forward(ids.data(), int(ids.size()), 0);
  for (int i = 0; i < 512; ++i) ASSERT_EQ(alone->logits()[i], shared.logits()[i]) << i;
  const int next = 290;
  alone->forward(&next, 1, int(ids.size()));
  shared.forward(&next, 1, int(ids.size()));
  for (int i = 0; i < 512; ++i) ASSERT_EQ(alone->logits()[i], shared.logits()[i]) << i;
  // the shared weights are read-only through it
  EXPECT_THROW(shared.merge_adapter("some_adapter"), Error);
}
