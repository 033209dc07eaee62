// The public API on the real stories260K (llama2.c format, ../shared): greedy generation from BOS
// tells the reference story; Generators and Sequences over one shared Model give in two threads at
// once exactly what they give one after the other; a Sequence's logits equal a fresh prefill's; a
// callback can stop generation; the tokenizer round-trips.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "leantune/leantune.h"

namespace {

const std::string kDir = std::string(LT_SHARED_DIR) + "/models/stories260K/";
const std::string kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high.";

leantune::GenerateOptions sampling(float temperature, uint64_t seed, int n) {
  leantune::GenerateOptions o;
  o.max_new_tokens = n;
  o.stop_at_eos = false;
  o.sampling.temperature = temperature;
  o.sampling.top_p = 0.95f;
  o.sampling.seed = seed;
  return o;
}

TEST(ApiGenerate, GreedyFromBosTellsTheReferenceStory) {
  leantune::Model model(kDir + "stories260K.bin");
  leantune::Tokenizer tok(kDir + "tok512.bin");
  leantune::Generator gen(model);
  std::string streamed;
  int calls = 0;
  const leantune::GenerateResult r = gen.generate(tok, "", sampling(0, 0, 80), [&](int token, std::string_view text) {
    streamed += text;
    ++calls;
    return true;
  });
  EXPECT_EQ(r.text.substr(0, kStory.size()), kStory) << r.text;
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.prompt_ids, std::vector<int>{1});  // BOS alone
  EXPECT_EQ(r.output_ids.size(), 80u);
  EXPECT_GE(calls, 80);  // once per token (and once more for held-back text)
  EXPECT_EQ(r.stop_reason, leantune::StopReason::MaxNewTokens);
  EXPECT_EQ(r.decode_tokens, 79);
  EXPECT_EQ(model.config().vocab_size, 512);
  EXPECT_EQ(model.config().n_layers, 5);
}

TEST(ApiGenerate, ReferenceKernelsAndPromptIdsTellTheSameStory) {
  leantune::ModelOptions o;
  o.kernels = leantune::Kernels::Reference;
  leantune::Model model(kDir + "stories260K.bin", o);
  leantune::Tokenizer tok(kDir + "tok512.bin");
  leantune::Generator gen(model, {.context = 128});
  EXPECT_EQ(gen.context(), 128);
  const std::vector<int> bos = {tok.bos_id()};
  const leantune::GenerateResult r = gen.generate(tok, std::span<const int>(bos), sampling(0, 0, 60));
  EXPECT_EQ(kStory.substr(0, r.text.size()), r.text);
  EXPECT_GT(r.text.size(), 150u);
  EXPECT_EQ(model.kernels_name(), "reference kernels");
}

TEST(ApiGenerate, TwoGeneratorsInTwoThreadsMatchSequentialRuns) {
  leantune::ModelOptions mo;
  mo.threads = 1;
  const leantune::Model model(kDir + "stories260K.bin", mo);
  const leantune::Tokenizer tok(kDir + "tok512.bin");
  // sampled (not greedy) with different seeds and prompts, so the two requests differ
  const std::string prompts[2] = {"Once upon a time", "The cat"};
  auto run = [&](int i) {
    leantune::Generator gen(model, {.context = 300});
    return gen.generate(tok, prompts[i], sampling(0.9f, 7 + i, 250));
  };
  const leantune::GenerateResult seq0 = run(0), seq1 = run(1);
  ASSERT_NE(seq0.output_ids, seq1.output_ids);
  for (int round = 0; round < 3; ++round) {
    leantune::GenerateResult par[2];
    std::thread t0([&] { par[0] = run(0); });
    std::thread t1([&] { par[1] = run(1); });
    t0.join();
    t1.join();
    EXPECT_EQ(par[0].output_ids, seq0.output_ids) << "round " << round;
    EXPECT_EQ(par[1].output_ids, seq1.output_ids) << "round " << round;
    EXPECT_EQ(par[0].text, seq0.text);
    EXPECT_EQ(par[1].text, seq1.text);
  }
}

TEST(ApiGenerate, QuantizedModelSharedByTwoThreads) {
  leantune::ModelOptions mo;
  mo.quantization = leantune::Quantization::NF4;
  mo.threads = 1;
  const leantune::Model model(kDir + "stories260K.bin", mo);
  const leantune::Tokenizer tok(kDir + "tok512.bin");
  auto run = [&](uint64_t seed) {
    leantune::Generator gen(model, {.context = 200, .prefill_block = 4});
    return gen.generate(tok, "Once upon a time", sampling(0.8f, seed, 150)).output_ids;
  };
  const std::vector<int> a = run(1), b = run(2);
  std::vector<int> pa, pb;
  std::thread t0([&] { pa = run(1); });
  std::thread t1([&] { pb = run(2); });
  t0.join();
  t1.join();
  EXPECT_EQ(pa, a);
  EXPECT_EQ(pb, b);
  EXPECT_EQ(model.config().quantization, leantune::Quantization::None);  // quantized on load, not stored
}

TEST(ApiGenerate, SequenceDecodeStepsMatchOnePrefill) {
  const leantune::Model model(kDir + "stories260K.bin");
  const leantune::Tokenizer tok(kDir + "tok512.bin");
  const std::vector<int> ids = tok.encode("Once upon a time, there was a little girl named Lily.");
  leantune::Sequence seq(model, {.context = 64, .prefill_block = 5});
  std::span<const float> last;
  const size_t split = 7;
  last = seq.append(std::span<const int>(ids).first(split));  // a prefill of several blocks
  for (size_t i = split; i < ids.size(); ++i) last = seq.append(std::span<const int>(&ids[i], 1));
  EXPECT_EQ(seq.size(), int(ids.size()));
  const std::vector<float> decoded(last.begin(), last.end());
  const std::vector<float> whole = model.logits(ids);
  ASSERT_EQ(whole.size(), 512u);
  // the same sums over other row blocks: GEMM summation order differs, f32 rounding only (logits ~10)
  for (size_t v = 0; v < whole.size(); ++v) EXPECT_NEAR(decoded[v], whole[v], 1e-4f) << v;
  // truncating to the prompt's first half and appending the rest again gives the same logits
  seq.truncate(int(split));
  last = seq.append(std::span<const int>(ids).subspan(split));
  for (size_t v = 0; v < whole.size(); ++v) EXPECT_NEAR(last[v], whole[v], 1e-4f) << v;
  EXPECT_GT(seq.memory_bytes(), 0u);
  EXPECT_LT(seq.memory_bytes(), model.memory_bytes());  // weights stay the Model's
}

TEST(ApiGenerate, CallbackStopsGeneration) {
  const leantune::Model model(kDir + "stories260K.bin");
  const leantune::Tokenizer tok(kDir + "tok512.bin");
  leantune::Generator gen(model, {.context = 128});
  int n = 0;
  const leantune::GenerateResult r = gen.generate(tok, "", sampling(0, 0, 50), [&](int, std::string_view) {
    return ++n < 3;
  });
  EXPECT_EQ(r.stop_reason, leantune::StopReason::Cancelled);
  EXPECT_EQ(r.output_ids.size(), 3u);
  EXPECT_EQ(std::string(leantune::stop_reason_name(r.stop_reason)), "cancelled");
  // the generator is reusable: the next request starts from an empty cache
  const leantune::GenerateResult again = gen.generate(tok, "", sampling(0, 0, 40));
  EXPECT_EQ(again.text, kStory.substr(0, again.text.size()));
  // a stop string ends the text before it
  leantune::GenerateOptions o = sampling(0, 0, 80);
  o.stop = {"Lily"};
  const leantune::GenerateResult s = gen.generate(tok, "", o);
  EXPECT_EQ(s.stop_reason, leantune::StopReason::StopString);
  EXPECT_EQ(s.text, "Once upon a time, there was a little girl named ");
}

TEST(ApiTokenizer, RoundTripAndSpecialTokens) {
  const leantune::Tokenizer tok(kDir + "tok512.bin");
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(403));
  for (const std::string text : {"Once upon a time, there was a little girl named Lily.", "h\xC3\xA9llo world!"}) {
    const std::vector<int> with = tok.encode(text), without = tok.encode(text, false);
    ASSERT_FALSE(without.empty());
    EXPECT_EQ(with.front(), 1);
    EXPECT_EQ(std::vector<int>(with.begin() + 1, with.end()), without);
    EXPECT_EQ(tok.decode(without), text);
    EXPECT_EQ(tok.decode(with, true), text);
  }
  EXPECT_EQ(tok.encode("Once upon a time"), (std::vector<int>{1, 403, 407, 261, 378}));
  const leantune::Model model(kDir + "stories260K.bin");
  EXPECT_NO_THROW(tok.check_fits(model));
}

}  // namespace
