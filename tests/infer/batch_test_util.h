// Helpers for the batch engine tests: stories260K (../shared) loaded once as shared weights, its
// tokenizer, requests, and running a Scheduler to the end collecting each request's tokens.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "infer/scheduler.h"
#include "core/error.h"
#include "kernels/ops.h"

namespace lt::test {

inline const std::string kDir = std::string(LT_SHARED_DIR) + "/models/stories260K/";

struct Fixture {
  std::shared_ptr<const LlamaModel> model;
  std::unique_ptr<Tokenizer> tok;
  Fixture() {
    InferenceOptions o;
    o.context = 1;
    o.prefill_block = 1;
    model = LlamaModel::load(kDir + "stories260K.bin", o, ops_cpu());
    tok = Tokenizer::load(kDir + "tok512.bin");
  }
};
inline Fixture& fx() {
  static Fixture f;
  return f;
}

inline const std::vector<std::string> kPrompts = {
    "Once upon a time",
    "Lily and Tom went to the park. They saw a big dog and",
    "The sun",
    "One day, a little bird named Blue wanted to fly over the tall, tall mountain near the sea. Blue asked",
    "Sam had a red ball",
    "",
};

inline SchedRequest request(const std::string& prompt, int n, float temperature = 0, uint64_t seed = 0) {
  SchedRequest r;
  r.prompt = fx().tok->encode(prompt, true);
  r.max_new_tokens = n;
  r.stop_at_eos = false;
  r.sampler.temperature = temperature;
  r.sampler.top_p = temperature > 0 ? 0.9f : 1.0f;
  r.sampler.seed = seed;
  return r;
}

struct Outcome {
  std::vector<int> tokens;
  std::string text, reason;
};

// Runs `reqs`, request i added at step join[i] (all at step 0 when join is empty), to the end.
inline std::vector<Outcome> run(std::vector<SchedRequest> reqs, SchedulerOptions so, std::vector<int> join = {},
                         SchedStats* stats = nullptr) {
  Scheduler sch(fx().model, *fx().tok, so);
  std::vector<Outcome> out(reqs.size());
  join.resize(reqs.size(), 0);
  for (size_t i = 0; i < reqs.size(); ++i)
    reqs[i].on_event = [&out, i](const SchedEvent& e) {
      if (e.token >= 0) out[i].tokens.push_back(e.token);
      out[i].text += e.text;
      if (e.finished) out[i].reason = e.reason;
    };
  size_t added = 0;
  for (int step = 0; step < 10000; ++step) {
    for (size_t i = 0; i < reqs.size(); ++i)
      if (join[i] == step) {
        sch.add(std::move(reqs[i]));
        ++added;
      }
    if (!sch.step() && added == reqs.size()) break;
  }
  EXPECT_TRUE(sch.idle());
  EXPECT_EQ(sch.stats().blocks_in_use, 0) << "blocks leaked";
  if (stats) *stats = sch.stats();
  return out;
}

inline std::vector<Outcome> each_alone(const std::vector<SchedRequest>& reqs, SchedulerOptions so) {
  std::vector<Outcome> out;
  for (const auto& r : reqs) out.push_back(run({r}, so)[0]);
  return out;
}

inline void expect_same(const std::vector<Outcome>& a, const std::vector<Outcome>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_EQ(a[i].text, b[i].text) << "request " << i;
    EXPECT_EQ(a[i].reason, b[i].reason) << "request " << i;
  }
}

}  // namespace lt::test
