// The batch engine (infer/scheduler.h) on the real stories260K: sequences batched together give
// exactly the tokens each gives alone (greedy and seeded sampling), whatever the step they join
// at, the token budget (prompts chunked), preemption by recompute when blocks run out, or prefix
// caching; greedy output also equals the single-sequence generate loop's. Cancellation ends a
// request and frees its blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "batch_test_util.h"
#include "infer/generate.h"

namespace lt::test {
namespace {

std::vector<SchedRequest> greedy_requests(int n) {
  std::vector<SchedRequest> r;
  for (const auto& p : kPrompts) r.push_back(request(p, n));
  return r;
}

TEST(BatchScheduler, GreedyBatchedEqualsAloneAndTheGenerateLoop) {
  SchedulerOptions so;
  so.max_context = 256;
  so.max_seqs = 8;
  const auto reqs = greedy_requests(60);
  const auto batched = run(reqs, so);
  expect_same(batched, each_alone(reqs, so));
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(batched[i].tokens.size(), 60u);
    InferenceOptions io;
    io.context = 256;
    LlamaModel seq(fx().model, io);
    GenerateOptions g;
    g.max_new_tokens = 60;
    g.stop_at_eos = false;
    g.sampler.temperature = 0;
    const auto ref = generate_ids(seq, *fx().tok, reqs[i].prompt, g, [](int, const std::string&) { return true; });
    EXPECT_EQ(batched[i].tokens, ref.output_ids) << "request " << i;
    EXPECT_EQ(batched[i].text, ref.text) << "request " << i;
  }
}

TEST(BatchScheduler, JoiningAtAnyStepAndChunkedPrefillChangeNothing) {
  SchedulerOptions so;
  so.max_context = 256;
  so.max_seqs = 4;           // two of the six wait for a slot
  so.max_batch_tokens = 7;   // prompts prefilled in chunks, sharing steps with decodes
  const auto reqs = greedy_requests(40);
  SchedulerOptions wide = so;
  wide.max_batch_tokens = 256;
  wide.max_seqs = 8;
  expect_same(run(reqs, so, {0, 3, 3, 10, 11, 25}), each_alone(reqs, wide));
}

TEST(BatchScheduler, PreemptionByRecomputeKeepsTheTokens) {
  SchedulerOptions so;
  so.max_context = 128;
  so.block_size = 8;
  so.num_blocks = 20;  // 160 positions for six sequences of up to ~90: some must be preempted
  so.max_seqs = 6;
  const auto reqs = greedy_requests(60);
  SchedStats st;
  const auto batched = run(reqs, so, {}, &st);
  EXPECT_GT(st.preemptions, 0u);
  SchedulerOptions roomy = so;
  roomy.num_blocks = 0;
  expect_same(batched, each_alone(reqs, roomy));
}

TEST(BatchScheduler, SeededSamplingPerRequestEqualsAlone) {
  SchedulerOptions so;
  so.max_context = 256;
  std::vector<SchedRequest> reqs;
  for (size_t i = 0; i < kPrompts.size(); ++i) reqs.push_back(request(kPrompts[i], 50, 0.8f + 0.1f * float(i), 7 + i));
  reqs.push_back(request(kPrompts[0], 50, 1.0f, 99));  // same prompt as request 0, another seed
  const auto batched = run(reqs, so);
  expect_same(batched, each_alone(reqs, so));
  EXPECT_NE(batched[0].tokens, batched.back().tokens);
}

TEST(BatchScheduler, PrefixCachingHitsAndChangesNothing) {
  const std::string shared =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. ";
  std::vector<SchedRequest> reqs;
  for (const char* end : {"One day", "She saw", "Her mom said", "The dog"}) reqs.push_back(request(shared + end, 30));
  SchedulerOptions on;
  on.max_context = 256;
  on.block_size = 8;
  SchedulerOptions off = on;
  off.prefix_caching = false;
  SchedStats st;
  // joined one after the other, so the later ones find the first one's blocks published
  const auto cached = run(reqs, on, {0, 40, 41, 80}, &st);
  // request j finds every full block (but the one holding its last token) that an earlier one shares
  uint64_t want = 0;
  for (size_t j = 1; j < reqs.size(); ++j) {
    size_t common = 0;
    for (size_t i = 0; i < j; ++i) {
      size_t c = 0;
      while (c < reqs[i].prompt.size() && c < reqs[j].prompt.size() && reqs[i].prompt[c] == reqs[j].prompt[c]) ++c;
      common = std::max(common, c);
    }
    want += std::min(common / 8, (reqs[j].prompt.size() - 1) / 8);
  }
  EXPECT_GE(want, 9u);
  EXPECT_EQ(st.prefix_hit_blocks, want);
  expect_same(cached, run(reqs, off, {0, 40, 41, 80}));
  expect_same(cached, each_alone(reqs, off));
}

TEST(BatchScheduler, CancelEndsTheRequestAndFreesItsBlocks) {
  Scheduler sch(fx().model, *fx().tok, {.max_context = 128});
  std::string reason;
  int tokens = 0;
  SchedRequest r = request(kPrompts[1], 100);
  r.on_event = [&](const SchedEvent& e) {
    tokens += e.token >= 0;
    if (e.finished) reason = e.reason;
  };
  const uint64_t id = sch.add(std::move(r));
  for (int i = 0; i < 5; ++i) sch.step();
  EXPECT_GT(sch.stats().blocks_in_use, 0);
  sch.cancel(id);
  sch.step();
  EXPECT_EQ(reason, "cancelled");
  EXPECT_EQ(tokens, 5);
  EXPECT_TRUE(sch.idle());
  EXPECT_EQ(sch.stats().blocks_in_use, 0);
}

TEST(BatchScheduler, RejectsPromptsThatDoNotFit) {
  Scheduler sch(fx().model, *fx().tok, {.max_context = 16});
  SchedRequest r = request(kPrompts[3], 4);
  EXPECT_THROW(sch.add(r), Error);
  r.prompt.clear();
  EXPECT_THROW(sch.add(r), Error);
  r = request(kPrompts[0], -1);
  EXPECT_THROW(sch.add(r), Error);
  EXPECT_TRUE(sch.idle());
}

}  // namespace
}  // namespace lt::test
