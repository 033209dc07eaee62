// The batch engine with the model-family features of ModelConfig, on stories260K given them: a
// sliding window of 8 (its blocks before a query's window are not gathered), the yarn attention
// factor on the queries. Greedy tokens equal the single-sequence generate loop's (LlamaModel, whose
// features the parity tests check against transformers). RoPE types whose frequencies follow each
// call's length (dynamic, longrope) are refused by name. Qwen3's per-head norms: the python parity
// tests (tests/python/test_qwen3_parity.py) go through LlamaModel; the batch engine applies the
// same two rmsnorm calls.
#include <gtest/gtest.h>

#include "batch_test_util.h"
#include "core/rope_freqs.h"
#include "infer/generate.h"
#include "io/model_files.h"

namespace lt::test {
namespace {

std::shared_ptr<const LlamaModel> stories_with(const ModelConfig& c) {
  static const ModelFiles files = load_model_files(kDir + "stories260K.bin");
  InferenceOptions o;
  o.context = 1;
  o.prefill_block = 1;
  return std::make_shared<LlamaModel>(c, files.tensors, o, ops_cpu());
}

// Runs the prompts batched over stories260K with config c; returns their tokens.
std::vector<Outcome> expect_batched_equals_generate(const ModelConfig& c, const char* what) {
  auto model = stories_with(c);
  SchedulerOptions so;
  so.max_context = 128;
  so.max_seqs = 4;
  so.block_size = 4;
  so.max_batch_tokens = 16;  // prompts chunked across steps
  std::vector<SchedRequest> reqs;
  for (const auto& p : kPrompts) reqs.push_back(request(p, 40));
  const auto batched = run(reqs, so, {}, nullptr, model);
  for (size_t i = 0; i < reqs.size(); ++i) {
    InferenceOptions io;
    io.context = 128;
    io.prefill_block = 5;
    LlamaModel seq(model, io);
    GenerateOptions g;
    g.max_new_tokens = 40;
    g.stop_at_eos = false;
    g.sampler.temperature = 0;
    const auto ref = generate_ids(seq, *fx().tok, reqs[i].prompt, g, [](int, const std::string&) { return true; });
    EXPECT_EQ(batched[i].tokens, ref.output_ids) << what << ", request " << i;
  }
  return batched;
}

// Whether any request's tokens differ from stories260K's own (the feature is not a no-op here).
bool changes_tokens(const std::vector<Outcome>& got) {
  const auto plain = expect_batched_equals_generate(fx().model->config(), "plain");
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i].tokens != plain[i].tokens) return true;
  return false;
}

TEST(BatchFamilies, SlidingWindowEqualsTheGenerateLoop) {
  ModelConfig c = fx().model->config();
  c.sliding_window = 8;
  EXPECT_TRUE(changes_tokens(expect_batched_equals_generate(c, "window 8")));
}

TEST(BatchFamilies, YarnAttentionFactorEqualsTheGenerateLoop) {
  ModelConfig c = fx().model->config();
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_attention_factor = rope_attention_factor(c.rope_scaling);
  ASSERT_GT(c.rope_attention_factor, 1.1f);
  EXPECT_TRUE(changes_tokens(expect_batched_equals_generate(c, "yarn")));
}

TEST(BatchFamilies, LengthDependentRopeIsRefusedByName) {
  ModelConfig c = fx().model->config();
  c.rope_scaling.type = "dynamic";
  c.rope_scaling.factor = 2.0f;
  SchedulerOptions so;
  so.max_context = 64;
  try {
    Scheduler sch(stories_with(c), *fx().tok, so);
    ADD_FAILURE() << "dynamic RoPE accepted by the batch engine";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'dynamic'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lt::test
