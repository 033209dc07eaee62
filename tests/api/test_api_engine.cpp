// The public Engine (leantune/engine.h) on stories260K: requests submitted from many threads to the
// engine's own thread give exactly what a Generator gives alone (greedy); a full queue throws
// QueueFull; cancel ends a request with Cancelled; bad requests are refused at submit; stats count.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "leantune/leantune.h"

namespace {

const std::string kDir = std::string(LT_SHARED_DIR) + "/models/stories260K/";

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int>> tokens;
  std::vector<std::string> text;
  std::vector<leantune::StopReason> reason;
  int finished = 0;
  explicit Collected(size_t n) : tokens(n), text(n), reason(n) {}
  leantune::EventCallback callback(size_t i) {
    return [this, i](const leantune::EngineEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (e.token >= 0) tokens[i].push_back(e.token);
      text[i] += e.text;
      if (e.finished) {
        reason[i] = e.stop_reason;
        ++finished;
        cv.notify_all();
      }
    };
  }
  void wait(int n) {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return finished >= n; }));
  }
};

leantune::EngineRequest greedy(const leantune::Tokenizer& tok, const std::string& prompt, int n) {
  leantune::EngineRequest r;
  r.prompt_ids = tok.encode(prompt);
  r.options.max_new_tokens = n;
  r.options.stop_at_eos = false;
  r.options.sampling.temperature = 0;
  return r;
}

TEST(ApiEngine, ThreadedSubmitsEqualAGeneratorAlone) {
  leantune::Model model(kDir + "stories260K.bin");
  leantune::Tokenizer tok(kDir + "tok512.bin");
  leantune::Engine engine(model, tok, {.max_seqs = 8, .context = 256});
  engine.start();
  const std::vector<std::string> prompts = {"Once upon a time", "The cat", "Tom had a big red", "She said", "One day"};
  const size_t N = 20;
  Collected got(N);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < N; ++i)
    threads.emplace_back([&, i] { engine.submit(greedy(tok, prompts[i % prompts.size()], 30 + int(i)), got.callback(i)); });
  for (auto& t : threads) t.join();
  got.wait(int(N));
  leantune::Generator gen(model, {.context = 256});
  for (size_t i = 0; i < N; ++i) {
    leantune::GenerateOptions o;
    o.max_new_tokens = 30 + int(i);
    o.stop_at_eos = false;
    o.sampling.temperature = 0;
    const auto ref = gen.generate(tok, prompts[i % prompts.size()], o);
    EXPECT_EQ(got.tokens[i], ref.output_ids) << i;
    EXPECT_EQ(got.text[i], ref.text) << i;
    EXPECT_EQ(got.reason[i], leantune::StopReason::MaxNewTokens);
  }
  const leantune::EngineStats s = engine.stats();
  EXPECT_EQ(s.requests, N);
  EXPECT_EQ(s.finished, N);
  EXPECT_EQ(s.kv_blocks_in_use, 0);
  EXPECT_GT(s.steps, 0u);
}

TEST(ApiEngine, QueueFullCancelAndBadRequests) {
  leantune::Model model(kDir + "stories260K.bin");
  leantune::Tokenizer tok(kDir + "tok512.bin");
  leantune::Engine engine(model, tok, {.max_seqs = 1, .max_queue = 2, .context = 128});
  Collected got(3);
  // not started: nothing runs until step(), so the queue fills
  const uint64_t a = engine.submit(greedy(tok, "Once", 50), got.callback(0));
  engine.submit(greedy(tok, "Once", 5), got.callback(1));
  EXPECT_THROW(engine.submit(greedy(tok, "Once", 5), got.callback(2)), leantune::QueueFull);
  engine.step();  // a runs, b waits
  engine.cancel(a);
  for (int i = 0; i < 100 && engine.step(); ++i) {
  }
  got.wait(2);
  EXPECT_EQ(got.reason[0], leantune::StopReason::Cancelled);
  EXPECT_LT(got.tokens[0].size(), 50u);
  EXPECT_EQ(got.tokens[1].size(), 5u);
  EXPECT_EQ(engine.stats().cancelled, 1u);
  auto bad = greedy(tok, "Once", 5);
  bad.adapter = "nope";
  EXPECT_THROW(engine.submit(bad, {}), leantune::Error);
  bad = greedy(tok, std::string(400, 'a'), 5);
  EXPECT_THROW(engine.submit(bad, {}), leantune::Error);
  bad = greedy(tok, "Once", -1);
  EXPECT_THROW(engine.submit(bad, {}), leantune::Error);
  bad = greedy(tok, "Once", 5);
  bad.options.sampling.top_p = 2;
  EXPECT_THROW(engine.submit(bad, {}), leantune::Error);
  EXPECT_THROW(engine.load_adapter("x", kDir + "no-such-adapter"), leantune::Error);
  EXPECT_TRUE(engine.adapters().empty());
}

}  // namespace
