// Sampled speculative decoding (infer/spec_sample.h, Scheduler with a draft model):
//  - the accept / resample step against a scalar reference with fixed uniforms, and its exactness:
//    integrating over a fine grid of uniforms, proposal ~ q then accept-or-resample gives p exactly;
//  - Sampler::distribution() is the distribution sample() draws from (processors and warpers);
//  - on stories260K with a perturbed copy of itself as the draft, the first token's distribution over
//    2000 seeds, and the second token's given the commonest first tokens, match the model's exact
//    distribution by a chi-square test (and the draft's distribution is rejected by the same test,
//    so the test can fail); with plain sampling and with every processor and warper on;
//  - seeded determinism: batched, joining late, chunked, preempted, a sampled request gives the
//    tokens it gives alone, and the same on every run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "batch_test_util.h"
#include "infer/spec_sample.h"
#include "io/llama2c.h"

namespace lt::test {
namespace {

// --- the accept / resample step ---------------------------------------------------------------

const std::vector<float> kP = {0.05f, 0.40f, 0.00f, 0.25f, 0.30f, 0.00f};
const std::vector<float> kQ = {0.30f, 0.10f, 0.20f, 0.25f, 0.05f, 0.10f};

// The scalar reference: accept iff u < p/q; residual r = max(0, p - q) / sum, drawn by inverse CDF.
int reference_step(int x, double u1, double u2) {
  if (u1 < double(kP[size_t(x)]) / double(kQ[size_t(x)])) return x;
  std::vector<double> r(kP.size());
  double sum = 0;
  for (size_t i = 0; i < r.size(); ++i) sum += r[i] = std::max(0.0, double(kP[i]) - double(kQ[i]));
  double cum = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    cum += r[i] / sum;
    if (r[i] > 0 && u2 < cum) return int(i);
  }
  return -1;
}

int step(int x, double u1, double u2) {
  return spec_accept(kP[size_t(x)], kQ[size_t(x)], u1) ? x : draw_residual(kP, kQ, u2);
}

TEST(SpecSample, AcceptAndResampleMatchTheScalarReference) {
  const double us[] = {0.0, 0.01, 0.1, 0.16, 0.24, 0.26, 0.5, 0.74, 0.76, 0.99, 0.999999};
  for (int x = 0; x < int(kQ.size()); ++x)
    for (double u1 : us)
      for (double u2 : us) EXPECT_EQ(step(x, u1, u2), reference_step(x, u1, u2)) << x << " " << u1 << " " << u2;
  // worked by hand: residual = {0, .30, 0, 0, .25, 0} / .55
  EXPECT_TRUE(spec_accept(0.4f, 0.1f, 0.999));   // p > q: always kept
  EXPECT_TRUE(spec_accept(0.05f, 0.3f, 0.16));   // 0.16 < 1/6
  EXPECT_FALSE(spec_accept(0.05f, 0.3f, 0.17));
  EXPECT_FALSE(spec_accept(0.0f, 0.2f, 0.0));    // p = 0: never kept
  EXPECT_EQ(draw_residual(kP, kQ, 0.0), 1);
  EXPECT_EQ(draw_residual(kP, kQ, 0.30 / 0.55 - 1e-6), 1);
  EXPECT_EQ(draw_residual(kP, kQ, 0.30 / 0.55 + 1e-6), 4);
  EXPECT_EQ(draw_residual(kP, kQ, 0.9999999999), 4);
  EXPECT_EQ(draw_residual(kP, kP, 0.5), 3);  // empty residual: a draw from p (.05 .40 | .25)
  EXPECT_EQ(draw_weighted(std::vector<float>{0, 0, 0}, 0.5), -1);
  EXPECT_EQ(draw_weighted(std::vector<float>{0, 2, 0, 1, 0}, 0.9999999999), 3);  // never a weight-0 token
}

// Proposal x ~ q, then accept or resample: integrated over an M x M midpoint grid of the two
// uniforms, the output's distribution is p to within the grid's resolution (2/M per token).
TEST(SpecSample, TheStepOutputsExactlyTheTargetDistribution) {
  const int M = 2000;
  std::vector<double> out(kP.size(), 0.0);
  for (int x = 0; x < int(kQ.size()); ++x) {
    if (kQ[size_t(x)] == 0) continue;
    double accept = 0;
    std::vector<double> resample(kP.size(), 0.0);
    for (int i = 0; i < M; ++i) {
      const double u = (i + 0.5) / M;
      accept += spec_accept(kP[size_t(x)], kQ[size_t(x)], u) ? 1.0 / M : 0.0;
      resample[size_t(draw_residual(kP, kQ, u))] += 1.0 / M;
    }
    out[size_t(x)] += kQ[size_t(x)] * accept;
    for (size_t y = 0; y < kP.size(); ++y) out[y] += kQ[size_t(x)] * (1 - accept) * resample[y];
  }
  for (size_t y = 0; y < kP.size(); ++y) EXPECT_NEAR(out[y], kP[y], 2.0 / M) << "token " << y;
}

TEST(SpecSample, DistributionIsWhatSampleDrawsFrom) {
  // logits 0..4 = {2, 1, 0.5, 3, -1}; context {3, 0}: penalty 2 -> {1, 1, .5, 1.5, -1}; T = .5 ->
  // {2, 2, 1, 3, -2}; top-k 3 keeps {0, 1, 3}: softmax of {2, 2, 3}.
  Sampler s({.temperature = 0.5f, .top_k = 3, .repetition_penalty = 2.0f, .seed = 1}, 5);
  std::vector<float> l = {2, 1, 0.5f, 3, -1}, p(5);
  const std::vector<int> ctx = {3, 0};
  s.distribution(l.data(), ctx, p.data());
  const double e = std::exp(1.0), z = 2 + e;
  const std::vector<double> want = {1 / z, 1 / z, 0, e / z, 0};
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(p[i], want[i], 1e-6) << i;
  Sampler greedy({.temperature = 0}, 5);
  EXPECT_THROW(greedy.distribution(l.data(), ctx, p.data()), Error);
}

// --- on stories260K -----------------------------------------------------------------------------

// stories260K with its final norm weights perturbed (x (1 + 0.5 N(0, 1)), fixed seed): a draft whose
// distributions overlap the model's but differ, so proposals are both accepted and rejected.
std::shared_ptr<const LlamaModel> perturbed_draft() {
  static std::shared_ptr<const LlamaModel> draft = [] {
    Llama2cModel m = load_llama2c(kDir + "stories260K.bin");
    const TensorInfo norm = *m.tensors.find("model.norm.weight");
    auto* data = reinterpret_cast<float*>(m.tensors.allocate(norm.nbytes));
    std::copy_n(static_cast<const float*>(norm.data), norm.numel(), data);
    std::mt19937 rng(11);
    std::normal_distribution<float> noise(0.0f, 0.5f);
    for (int64_t i = 0; i < norm.numel(); ++i) data[i] *= 1.0f + noise(rng);
    TensorInfo t = norm;
    t.data = data;
    m.tensors.erase(norm.name);
    m.tensors.add(t);
    InferenceOptions o;
    o.context = 1;
    o.prefill_block = 1;
    return std::make_shared<const LlamaModel>(m.config, m.tensors, o, ops_cpu());
  }();
  return draft;
}

// The exact distribution (V) `model` gives the token after `ids` under `opts` (its processors).
std::vector<float> exact(const std::shared_ptr<const LlamaModel>& model, const std::vector<int>& ids,
                         const SamplerOptions& opts) {
  InferenceOptions io;
  io.context = 128;
  LlamaModel seq(model, io);
  seq.forward(ids.data(), int(ids.size()), 0);
  const int V = model->config().vocab_size;
  std::vector<float> l(seq.logits(), seq.logits() + V), p(static_cast<size_t>(V));
  Sampler(opts, V).distribution(l.data(), ids, p.data());
  return p;
}

// Pearson's chi-square of `counts` (N draws) against p, over the tokens expected at least 5 times
// each, the rest pooled into one cell (folded into the smallest cell when that pool is under 5):
// the regime where the statistic follows chi-square(cells - 1) under the null hypothesis.
struct ChiSquare {
  double stat = 0;
  int df = 0;
};
ChiSquare chi_square(const std::map<int, int>& counts, const std::vector<float>& p, int N) {
  std::vector<double> expected, observed;
  double pool_e = 0, pool_o = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    const double e = double(p[t]) * N;
    const double o = counts.count(int(t)) ? counts.at(int(t)) : 0;
    if (e >= 5) {
      expected.push_back(e);
      observed.push_back(o);
    } else {
      pool_e += e;
      pool_o += o;
    }
  }
  if (pool_e >= 5 || expected.empty()) {
    expected.push_back(pool_e);
    observed.push_back(pool_o);
  } else {
    const size_t at = size_t(std::min_element(expected.begin(), expected.end()) - expected.begin());
    expected[at] += pool_e;
    observed[at] += pool_o;
  }
  ChiSquare c;
  for (size_t i = 0; i < expected.size(); ++i) c.stat += (observed[i] - expected[i]) * (observed[i] - expected[i]) / expected[i];
  c.df = int(expected.size()) - 1;
  return c;
}

// The chi-square(df) quantile with upper tail 1e-5 (z = 4.265), by Wilson and Hilferty's cube-root
// normal approximation (accurate to a few percent for df >= 3, which is all this test needs).
// A correct sampler exceeds it with probability 1e-5; the seeds are fixed, so the run is repeatable.
double chi_square_limit(int df) {
  const double a = 2.0 / (9.0 * df), z = 4.265;
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

struct SpecRun {
  std::vector<std::vector<int>> tokens;
  SchedStats stats;
};

SpecRun run_spec(const std::vector<int>& prompt, const SamplerOptions& opts, int N, int n_tokens) {
  std::vector<SchedRequest> reqs;
  for (int i = 0; i < N; ++i) {
    SchedRequest r;
    r.prompt = prompt;
    r.max_new_tokens = n_tokens;
    r.stop_at_eos = false;
    r.sampler = opts;
    r.sampler.seed = uint64_t(1000 + i);
    reqs.push_back(std::move(r));
  }
  SchedulerOptions so;
  so.max_context = 128;
  so.max_seqs = 64;
  so.max_batch_tokens = 256;
  so.draft = perturbed_draft();
  so.num_speculative = 3;
  SpecRun out;
  for (const Outcome& o : run(std::move(reqs), so, {}, &out.stats)) out.tokens.push_back(o.tokens);
  return out;
}

// Of kPrompts, the one whose next token is least predictable under opts (the most tokens expected at
// least 5 times in N draws), so the chi-square test has cells to compare.
std::vector<int> spread_prompt(const SamplerOptions& opts, int N) {
  std::vector<int> best;
  long best_cells = -1;
  for (const std::string& text : kPrompts) {
    const std::vector<int> ids = fx().tok->encode(text, true);
    const std::vector<float> p = exact(fx().model, ids, opts);
    const long cells = std::count_if(p.begin(), p.end(), [N](float x) { return double(x) * N >= 5; });
    if (cells > best_cells) {
      best_cells = cells;
      best = ids;
    }
  }
  return best;
}

void expect_target_distribution(const SamplerOptions& opts) {
  const int N = 2000;
  const std::vector<int> prompt = spread_prompt(opts, N);
  const SpecRun r = run_spec(prompt, opts, N, 2);
  EXPECT_GT(r.stats.spec_accepted, 0u);
  EXPECT_LT(r.stats.spec_accepted, r.stats.spec_proposed);  // rejections happened too
  std::map<int, int> first;
  for (const auto& t : r.tokens) {
    ASSERT_EQ(t.size(), 2u);
    ++first[t[0]];
  }
  const ChiSquare c = chi_square(first, exact(fx().model, prompt, opts), N);
  ASSERT_GE(c.df, 3) << "too few tokens with 5 expected draws: the test would have no power";
  EXPECT_LT(c.stat, chi_square_limit(c.df)) << "first token: chi-square " << c.stat << " on " << c.df << " df";
  // the draft's own distribution is far outside the limit: the test tells them apart
  const ChiSquare d = chi_square(first, exact(perturbed_draft(), prompt, opts), N);
  EXPECT_GT(d.stat, chi_square_limit(d.df)) << "the draft's distribution passes too: the test has no power";
  // the second token, given each of the three commonest first tokens drawn at least 100 times
  std::vector<std::pair<int, int>> by_count;
  for (const auto& [x1, n] : first) by_count.push_back({n, x1});
  std::sort(by_count.rbegin(), by_count.rend());
  by_count.resize(std::min<size_t>(by_count.size(), 3));
  int checked = 0;
  for (const auto& [n, x1] : by_count) {
    if (n < 100) continue;
    std::map<int, int> second;
    for (const auto& t : r.tokens)
      if (t[0] == x1) ++second[t[1]];
    std::vector<int> ctx = prompt;
    ctx.push_back(x1);
    const ChiSquare c2 = chi_square(second, exact(fx().model, ctx, opts), n);
    EXPECT_LT(c2.stat, chi_square_limit(std::max(c2.df, 1))) << "second token after " << x1 << ": chi-square "
                                                             << c2.stat << " on " << c2.df << " df";
    ++checked;
  }
  EXPECT_GE(checked, 1);
  std::printf("acceptance %.3f; first token chi-square %.1f on %d df (limit %.1f; the draft's: %.1f); %d second-token "
              "checks\n", double(r.stats.spec_accepted) / double(r.stats.spec_proposed), c.stat, c.df,
              chi_square_limit(c.df), d.stat, checked);
}

TEST(SpecSampling, OutputIsDistributedAsTheModelPlainSampling) { expect_target_distribution({.temperature = 1.0f}); }

TEST(SpecSampling, OutputIsDistributedAsTheModelWithEveryProcessor) {
  expect_target_distribution({.temperature = 1.2f, .top_k = 60, .top_p = 0.95f, .min_p = 0.01f,
                              .repetition_penalty = 1.3f, .no_repeat_ngram_size = 2});
}

TEST(SpecSampling, SeededOutputDependsOnlyOnTheSeed) {
  std::vector<SchedRequest> reqs;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    SchedRequest r = request(kPrompts[i], 40, 0.9f, 21 + i);
    r.sampler.repetition_penalty = 1.1f;
    reqs.push_back(std::move(r));
  }
  reqs.push_back(request(kPrompts[0], 40, 1.0f, 5));
  reqs.push_back(request(kPrompts[0], 40, 0));  // greedy, in the same batch
  SchedulerOptions tight;
  tight.max_context = 96;
  tight.block_size = 8;
  tight.num_blocks = 12;       // 96 positions for five sequences of up to ~85: preemption
  tight.max_seqs = 5;          // some wait for a slot
  tight.max_batch_tokens = 14; // chunked prefill; sampled sequences wait for their 4 rows
  tight.draft = perturbed_draft();
  tight.num_speculative = 3;
  SchedStats st;
  const auto batched = run(reqs, tight, {0, 0, 1, 1, 2, 3, 3, 5}, &st);
  EXPECT_GT(st.preemptions, 0u);
  EXPECT_GT(st.spec_accepted, 0u);
  SchedulerOptions roomy = tight;
  roomy.num_blocks = 0;
  roomy.max_seqs = 16;
  roomy.max_batch_tokens = 256;
  roomy.prefix_caching = false;
  expect_same(batched, each_alone(reqs, roomy));
  expect_same(batched, run(reqs, tight, {0, 0, 1, 1, 2, 3, 3, 5}));
  EXPECT_NE(batched[0].tokens, batched[6].tokens);  // same prompt, other seed
  for (const auto& o : batched) EXPECT_EQ(o.tokens.size(), 40u);
  // greedy with the draft is the greedy output without it
  SchedulerOptions plain = roomy;
  plain.draft = nullptr;
  EXPECT_EQ(batched.back().tokens, run({reqs.back()}, plain)[0].tokens);
}

}  // namespace
}  // namespace lt::test
