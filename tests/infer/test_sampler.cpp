// Tests for the token sampler: each stage against the Hugging Face formula it copies, on small
// hand-made logits where the right answer can be worked out by hand (repetition penalty, n-gram
// bans, top-k ties), and sampled frequencies against the renormalised probabilities of the
// nucleus / min-p set (2000 draws, 4.5 sigma). Also seeding, option checks and a 128k vocabulary
// top-p run against a brute-force nucleus.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "infer/sampler.h"

namespace lt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Draws `N` tokens from fresh copies of `logits`; returns counts per token.
std::vector<int> draw_counts(Sampler& s, const std::vector<float>& logits, int N,
                             std::span<const int> context = {}) {
  std::vector<int> counts(logits.size(), 0);
  std::vector<float> work(logits.size());
  for (int i = 0; i < N; ++i) {
    work = logits;
    const int t = s.sample(work.data(), context);
    EXPECT_GE(t, 0);
    EXPECT_LT(t, int(logits.size()));
    counts[t]++;
  }
  return counts;
}

// Support must equal {i : expected[i] > 0}; each count within 4.5 binomial sigma of N * p.
void expect_frequencies(const std::vector<int>& counts, const std::vector<double>& expected, int N) {
  for (size_t i = 0; i < counts.size(); ++i) {
    const double p = expected[i];
    if (p == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the kept set but was sampled";
      continue;
    }
    const double mean = N * p, sigma = std::sqrt(N * p * (1 - p));
    EXPECT_NEAR(counts[i], mean, 4.5 * sigma) << "token " << i << " p=" << p;
    EXPECT_GT(counts[i], 0) << "token " << i << " is in the kept set but never sampled";
  }
}

// The HF nucleus by brute force (full sort, double sums): 1 for each id top-p keeps.
std::vector<uint8_t> brute_force_nucleus(const std::vector<float>& l, double top_p, int* size) {
  const int V = int(l.size());
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  const double mx = l[order[0]];
  double Z = 0.0;
  for (int i = 0; i < V; ++i) Z += std::exp(double(l[i]) - mx);
  std::vector<uint8_t> in(V, 0);
  double cum = 0.0;
  *size = 0;
  for (int id : order) {
    in[id] = 1;
    ++*size;
    cum += std::exp(double(l[id]) - mx) / Z;
    if (cum >= top_p) break;
  }
  return in;
}

TEST(SamplerGreedy, PicksArgmaxLowestIdOnTies) {
  Sampler s({.temperature = 0.0f}, 6);
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f, 1.5f, -kInf};
  EXPECT_EQ(s.sample(l.data(), {}), 1);
  std::vector<float> l2 = {-3.0f, -2.0f, -7.0f, -0.5f, -0.6f, -1.0f};
  EXPECT_EQ(s.sample(l2.data(), {}), 3);
}

TEST(SamplerRepetitionPenalty, MatchesHfFormula) {
  // Positive logit of a seen token is divided, negative one multiplied; each id counted once.
  Sampler s({.temperature = 0.0f, .repetition_penalty = 2.0f}, 5);
  std::vector<float> l = {3.0f, 2.0f, 1.0f, -0.5f, -0.6f};
  const std::vector<int> ctx = {0, 3, 0, 0};
  EXPECT_EQ(s.sample(l.data(), ctx), 1);  // 3.0 -> 1.5 falls below 2.0
  EXPECT_FLOAT_EQ(l[0], 1.5f);            // not 3 / 2^3: repeats do not compound
  EXPECT_FLOAT_EQ(l[1], 2.0f);
  EXPECT_FLOAT_EQ(l[2], 1.0f);
  EXPECT_FLOAT_EQ(l[3], -1.0f);
  EXPECT_FLOAT_EQ(l[4], -0.6f);

  // All negative: the seen argmax -0.5 becomes -1.0, below unseen -0.8.
  std::vector<float> neg = {-0.5f, -0.8f, -2.0f, -3.0f, -0.9f};
  const std::vector<int> ctx2 = {0, 2};
  EXPECT_EQ(s.sample(neg.data(), ctx2), 1);
  EXPECT_FLOAT_EQ(neg[0], -1.0f);
  EXPECT_FLOAT_EQ(neg[2], -4.0f);

  // A penalty below 1 rewards repeats: 1.0 / 0.5 = 2.0 beats 1.8.
  Sampler r({.temperature = 0.0f, .repetition_penalty = 0.5f}, 3);
  std::vector<float> l3 = {1.8f, 1.0f, 0.0f};
  const std::vector<int> ctx3 = {1, 2};
  EXPECT_EQ(r.sample(l3.data(), ctx3), 1);
  EXPECT_FLOAT_EQ(l3[1], 2.0f);
  EXPECT_FLOAT_EQ(l3[2], 0.0f);
}

TEST(SamplerNoRepeatNgram, BansBigram) {
  Sampler s({.temperature = 0.0f, .no_repeat_ngram_size = 2}, 8);
  // Context ends in 5; the bigram (5, 1) already occurred, so 1 is banned; (2, 5) does not
  // start with 5 and bans nothing.
  const std::vector<int> ctx = {5, 1, 2, 5};
  std::vector<float> l = {0.0f, 9.0f, 1.0f, 0.5f, 0.0f, 0.0f, 3.0f, 0.0f};
  EXPECT_EQ(s.sample(l.data(), ctx), 6);
  EXPECT_EQ(l[1], -kInf);
  for (int i : {0, 2, 3, 4, 5, 6, 7}) EXPECT_TRUE(std::isfinite(l[i])) << i;
}

TEST(SamplerNoRepeatNgram, BansTrigram) {
  Sampler s({.temperature = 0.0f, .no_repeat_ngram_size = 3}, 8);
  // Prefix (1, 2): trigrams (1,2,3) and (1,2,4) exist, so 3 and 4 are banned; (2,3,4) is not
  // a match and 7 (after (3,4)) stays allowed.
  const std::vector<int> ctx = {1, 2, 3, 4, 7, 1, 2, 4, 1, 2};
  std::vector<float> l = {0.0f, 0.0f, 0.0f, 9.0f, 8.0f, 0.0f, 0.0f, 5.0f};
  EXPECT_EQ(s.sample(l.data(), ctx), 7);
  EXPECT_EQ(l[3], -kInf);
  EXPECT_EQ(l[4], -kInf);
  int banned = 0;
  for (float v : l) banned += v == -kInf;
  EXPECT_EQ(banned, 2);

  // A context shorter than n-1 bans nothing.
  std::vector<float> l2 = {0.0f, 0.0f, 0.0f, 9.0f, 8.0f, 0.0f, 0.0f, 5.0f};
  const std::vector<int> short_ctx = {3};
  EXPECT_EQ(s.sample(l2.data(), short_ctx), 3);
}

TEST(SamplerTopK, OneEqualsGreedyAtAnyTemperature) {
  const int V = 1000;
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float T : {0.05f, 0.7f, 1.0f, 5.0f, 100.0f}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> l(V);
      for (auto& v : l) v = nd(gen);
      std::vector<float> lg = l;
      Sampler greedy({.temperature = 0.0f}, V);
      Sampler k1({.temperature = T, .top_k = 1, .seed = uint64_t(trial)}, V);
      EXPECT_EQ(k1.sample(l.data(), {}), greedy.sample(lg.data(), {})) << "T=" << T;
    }
  }
}

TEST(SamplerTopK, KeepsTiesWithKthLikeHf) {
  // HF keeps every score >= the k-th largest: with top_k=1 and a tie, both tied tokens stay.
  Sampler s({.top_k = 1, .seed = 3}, 4);
  const int N = 2000;
  auto counts = draw_counts(s, {1.0f, 3.0f, 3.0f, 2.0f}, N);
  expect_frequencies(counts, {0.0, 0.5, 0.5, 0.0}, N);

  // top_k=2 over distinct logits: renormalised softmax of the best two.
  Sampler s2({.top_k = 2, .seed = 4}, 4);
  auto c2 = draw_counts(s2, {0.0f, 1.0f, std::log(3.0f) + 1.0f, -1.0f}, N);
  expect_frequencies(c2, {0.0, 0.25, 0.75, 0.0}, N);
}

TEST(SamplerTopP, SamplesOnlyFromNucleus) {
  // Probabilities (shuffled over ids): 0.4, 0.25, 0.15, 0.1, 0.06, 0.04. top_p = 0.75: the
  // descending cumulative sums are .4, .65, .80 -> nucleus {0.4, 0.25, 0.15}, renormalised by 0.8.
  // Logits are 2 log p with temperature 2, so temperature must be applied before top-p.
  const std::vector<double> p = {0.06, 0.25, 0.04, 0.4, 0.1, 0.15};
  std::vector<float> l(p.size());
  for (size_t i = 0; i < p.size(); ++i) l[i] = float(2.0 * std::log(p[i])) + 4.0f;
  Sampler s({.temperature = 2.0f, .top_p = 0.75f, .seed = 11}, int(p.size()));
  const int N = 2000;
  auto counts = draw_counts(s, l, N);
  expect_frequencies(counts, {0.0, 0.25 / 0.8, 0.0, 0.4 / 0.8, 0.0, 0.15 / 0.8}, N);

  // top_p below the largest prob keeps exactly the argmax.
  Sampler one({.top_p = 0.3f, .seed = 12}, int(p.size()));
  std::vector<float> lp(p.size());
  for (size_t i = 0; i < p.size(); ++i) lp[i] = float(std::log(p[i]));
  auto c1 = draw_counts(one, lp, 200);
  EXPECT_EQ(c1[3], 200);
}

TEST(SamplerMinP, KeepsTokensAboveScaledMax) {
  // Probabilities 0.5, 0.2, 0.12, 0.09, 0.05, 0.04 (shuffled); min_p = 0.2 -> threshold 0.1:
  // keep {0.5, 0.2, 0.12}, renormalised by 0.82.
  const std::vector<double> p = {0.09, 0.5, 0.04, 0.12, 0.05, 0.2};
  std::vector<float> l(p.size());
  for (size_t i = 0; i < p.size(); ++i) l[i] = float(std::log(p[i])) - 1.5f;
  Sampler s({.min_p = 0.2f, .seed = 21}, int(p.size()));
  const int N = 2000;
  auto counts = draw_counts(s, l, N);
  expect_frequencies(counts, {0.0, 0.5 / 0.82, 0.0, 0.12 / 0.82, 0.0, 0.2 / 0.82}, N);
}

TEST(SamplerMinP, AppliesAfterTopP) {
  // top_p = 0.9 keeps {0.5, 0.2, 0.12, 0.09} (cum .91); min_p = 0.2 then drops 0.09 (< 0.1).
  const std::vector<double> p = {0.09, 0.5, 0.04, 0.12, 0.05, 0.2};
  std::vector<float> l(p.size());
  for (size_t i = 0; i < p.size(); ++i) l[i] = float(std::log(p[i]));
  Sampler s({.top_p = 0.9f, .min_p = 0.2f, .seed = 22}, int(p.size()));
  const int N = 2000;
  auto counts = draw_counts(s, l, N);
  expect_frequencies(counts, {0.0, 0.5 / 0.82, 0.0, 0.12 / 0.82, 0.0, 0.2 / 0.82}, N);
}

TEST(SamplerSeed, SameSeedSameSequenceDifferentSeedDifferent) {
  const int V = 50, N = 200;
  std::vector<float> l(V);
  for (int i = 0; i < V; ++i) l[i] = 0.1f * float((i * 37) % 23);
  auto run = [&](uint64_t seed) {
    Sampler s({.temperature = 1.3f, .top_k = 40, .top_p = 0.95f, .seed = seed}, V);
    std::vector<int> seq;
    std::vector<float> w(V);
    for (int i = 0; i < N; ++i) {
      w = l;
      seq.push_back(s.sample(w.data(), {}));
    }
    return seq;
  };
  const auto a = run(1234), b = run(1234), c = run(1235);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(SamplerSeed, ReseedRestartsSequence) {
  const int V = 20;
  std::vector<float> l(V, 0.0f), w(V);
  Sampler s({.seed = 5}, V);
  std::vector<int> first, second;
  for (int i = 0; i < 50; ++i) { w = l; first.push_back(s.sample(w.data(), {})); }
  s.reseed(5);
  for (int i = 0; i < 50; ++i) { w = l; second.push_back(s.sample(w.data(), {})); }
  EXPECT_EQ(first, second);
}

TEST(SamplerBans, AllButOneBannedGivesThatTokenWithoutNaN) {
  // no_repeat_ngram_size = 1 bans every id already in the context: only 2 is left.
  const int V = 4;
  const std::vector<int> ctx = {0, 1, 3, 1};
  for (float T : {0.0f, 0.5f, 1.0f, 3.0f}) {
    Sampler s({.temperature = T, .top_k = 3, .top_p = 0.5f, .min_p = 0.3f,
               .repetition_penalty = 1.3f, .no_repeat_ngram_size = 1, .seed = 9}, V);
    for (int i = 0; i < 20; ++i) {
      std::vector<float> l = {5.0f, 4.0f, -20.0f, 6.0f};
      EXPECT_EQ(s.sample(l.data(), ctx), 2) << "T=" << T;
      for (float v : l) EXPECT_FALSE(std::isnan(v));
    }
  }
  // Same with -inf coming in the logits themselves.
  Sampler s({.temperature = 0.8f, .top_p = 0.9f, .min_p = 0.5f, .seed = 1}, V);
  std::vector<float> l = {-kInf, -kInf, -kInf, -100.0f};
  EXPECT_EQ(s.sample(l.data(), {}), 3);
}

TEST(SamplerBans, EverythingBannedThrows) {
  const std::vector<int> ctx = {0, 1, 2};
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  Sampler s({.no_repeat_ngram_size = 1}, 3);
  EXPECT_THROW(s.sample(l.data(), ctx), Error);
  Sampler g({.temperature = 0.0f, .no_repeat_ngram_size = 1}, 3);
  l = {1.0f, 2.0f, 3.0f};
  EXPECT_THROW(g.sample(l.data(), ctx), Error);
}

TEST(SamplerOptions, RejectsBadValues) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}, 10), Error);
  EXPECT_THROW(Sampler({.top_k = -1}, 10), Error);
  EXPECT_THROW(Sampler({.top_p = 0.0f}, 10), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}, 10), Error);
  EXPECT_THROW(Sampler({.min_p = 1.5f}, 10), Error);
  EXPECT_THROW(Sampler({.repetition_penalty = 0.0f}, 10), Error);
  EXPECT_THROW(Sampler({.no_repeat_ngram_size = -2}, 10), Error);
  EXPECT_THROW(Sampler({}, 0), Error);
  Sampler ok({.repetition_penalty = 1.2f}, 10);
  std::vector<float> l(10, 0.0f);
  const std::vector<int> bad_ctx = {3, 10};
  EXPECT_THROW(ok.sample(l.data(), bad_ctx), Error);
}

TEST(SamplerTopP, LargeVocabMatchesBruteForceNucleus) {
  // V = 128k with a flat distribution: a nucleus of thousands, found by the quickselect bisection.
  const int V = 128256;
  std::mt19937 gen(99);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> l(V);
  for (auto& v : l) v = nd(gen);
  const float top_p = 0.9f;
  int nucleus = 0;
  const auto in_nucleus = brute_force_nucleus(l, top_p, &nucleus);
  ASSERT_GT(nucleus, 1000);
  ASSERT_LT(nucleus, V);

  Sampler s({.top_p = top_p, .seed = 77}, V);
  std::vector<float> w(V);
  for (int i = 0; i < 50; ++i) {
    w = l;
    const int t = s.sample(w.data(), {});
    EXPECT_TRUE(in_nucleus[t]) << "token " << t << " sampled outside the nucleus";
  }
  // Top-k on the same vocabulary: only the k best.
  std::vector<float> sorted = l;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  Sampler k({.top_k = 50, .seed = 78}, V);
  for (int i = 0; i < 50; ++i) {
    w = l;
    const int t = k.sample(w.data(), {});
    EXPECT_GE(l[t], sorted[49]);
  }
}

TEST(SamplerTopP, MidSizeNucleusSupportIsExact) {
  // 99 head tokens of ~0.008 each (mass ~0.79) over a long tail: top_p = 0.78 keeps ~98 of them,
  // past the 64-token fast path. 3000 draws give each kept token ~30 hits, so the sampled support
  // must be exactly the brute-force nucleus: nothing missing, nothing extra.
  const int V = 8192, H = 99;
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
  std::vector<float> l(V);
  for (int r = 0; r < V; ++r) {
    const double p = r < H ? 0.008 * (1.0 - 0.001 * r) : 0.21 / (V - H);
    l[ids[r]] = float(std::log(p));
  }
  int nucleus = 0;
  const auto in_nucleus = brute_force_nucleus(l, 0.78, &nucleus);
  ASSERT_GT(nucleus, 64);
  ASSERT_LE(nucleus, H);

  Sampler s({.top_p = 0.78f, .seed = 31}, V);
  const auto counts = draw_counts(s, l, 3000);
  for (int i = 0; i < V; ++i) EXPECT_EQ(counts[i] > 0, bool(in_nucleus[i])) << "token " << i;
}

}  // namespace
}  // namespace lt
