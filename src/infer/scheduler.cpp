// Continuous batching (scheduler.h): admission with prefix-cache lookup, batch building with block
// allocation and preemption by recompute, one batched forward per step, then sampling, streaming
// and stop checks per sequence (the same rules as infer/generate.cpp's loop).
#include "infer/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "infer/generate.h"
#include "infer/spec_sample.h"

namespace lt {

constexpr size_t kDefaultPoolBytes = size_t(1) << 30;  // 1 GiB


struct Scheduler::Seq {
  uint64_t id = 0;
  SchedRequest req;
  std::vector<int> tokens;    // prompt + generated
  int computed = 0;           // tokens whose keys and values are in the blocks
  std::vector<int> blocks;    // block table
  int hashed = 0;             // leading blocks published (or taken from the cache)
  uint64_t last_hash = 0;     // hash of block hashed - 1 (0: none)
  int generated = 0, cached_tokens = 0;
  int take = 0;               // rows in this step's batch
  int draft_computed = 0;     // tokens whose draft keys and values are in the draft pool
  std::vector<int> proposal;  // this step's draft tokens (speculative decoding)
  float* q = nullptr;         // sampled speculation, this step: the draft's distribution of each proposal (K x V)
  bool done = false;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<Tokenizer::StreamDecoder> stream;
  std::string text;
  // beam search, after the prompt: the running beams (tokens: prompt + generated; the last one's
  // keys and values not yet computed)
  struct Beam {
    std::vector<int> tokens, blocks;
  };
  std::vector<Beam> beams;
  std::unique_ptr<BeamSearch> search;
  int width() const { return std::max(1, req.beam.num_beams); }  // rows it takes in a batch
};

// The batch forward's options for a scheduler's resolved options (the draft's: K + 1 rows per
// sequence for the model's verification).
static BatchForwardOptions batch_options(const SchedulerOptions& o, bool has_draft, bool draft_side) {
  BatchForwardOptions bo;
  bo.max_rows = o.max_batch_tokens;
  bo.max_seqs = o.max_seqs;
  bo.max_context = (o.max_context + o.block_size - 1) / o.block_size * o.block_size;
  bo.max_lora_rank = draft_side ? 1 : o.max_lora_rank;
  if (has_draft && !draft_side) bo.max_seqs = o.max_seqs * (o.num_speculative + 1);  // a row per verified position
  return bo;
}

SchedulerOptions resolve_scheduler_options(const ModelConfig& c, SchedulerOptions o, const ModelConfig* draft) {
  if (o.max_context <= 0) o.max_context = std::min(c.max_seq_len, 4096);
  LT_CHECK(o.max_context <= c.max_seq_len, "context {} is more than the model's {} positions", o.max_context,
           c.max_seq_len);
  LT_CHECK(o.block_size >= 1 && o.max_seqs >= 1 && o.max_batch_tokens >= 1,
           "scheduler: block_size {}, max_seqs {}, max_batch_tokens {}: each must be at least 1", o.block_size,
           o.max_seqs, o.max_batch_tokens);
  const int per_seq = (o.max_context + o.block_size - 1) / o.block_size;
  if (o.num_blocks <= 0) {  // max_seqs full contexts, at most kDefaultPoolBytes (but one context at least)
    const size_t per_block = kv_block_bytes(c, o.block_size) + (draft ? kv_block_bytes(*draft, o.block_size) : 0);
    const size_t fit = kDefaultPoolBytes / per_block;
    o.num_blocks = int(std::max<size_t>(size_t(per_seq), std::min(size_t(per_seq) * size_t(o.max_seqs), fit)));
  }
  LT_CHECK(o.num_blocks >= per_seq, "scheduler: {} KV blocks of {} positions do not hold one full context of {}; give "
           "at least {} blocks (or a shorter context)", o.num_blocks, o.block_size, o.max_context, per_seq);
  if (draft) {
    LT_CHECK(draft->vocab_size == c.vocab_size, "the draft model's vocabulary ({}) differs from the model's ({}); give "
             "a draft model of the same tokenizer", draft->vocab_size, c.vocab_size);
    LT_CHECK(o.num_speculative >= 1 && o.num_speculative <= 32, "num_speculative_tokens is {}; give 1 to 32",
             o.num_speculative);
    LT_CHECK(draft->max_seq_len >= o.max_context, "the draft model holds {} positions; the context is {}",
             draft->max_seq_len, o.max_context);
  }
  return o;
}

// Speculative decoding's own buffers: the draft's distribution q of each of the K proposals of every
// running sequence (sampled requests), the model's p and the draft's processed logits.
static MemoryPlan plan_spec_buffers(const ModelConfig& c, const SchedulerOptions& o) {
  const size_t V = size_t(c.vocab_size), f = sizeof(float);
  MemoryPlan p;
  p.add("spec.q", Category::Workspace, size_t(o.max_seqs) * size_t(o.num_speculative) * V * f, Lifetime::Step);
  p.add("spec.p", Category::Workspace, V * f, Lifetime::Step);
  p.add("spec.scratch", Category::Workspace, V * f, Lifetime::Step);
  return p;
}

MemoryPlan plan_scheduler(const ModelConfig& c, const SchedulerOptions& o, const ModelConfig* draft) {
  MemoryPlan p = plan_kv_pool(c, o.block_size, o.num_blocks);
  for (auto& b : plan_batch_forward(c, batch_options(o, draft != nullptr, false)).buffers) p.add(b.name, b.cat, b.bytes, b.life);
  if (draft) {
    for (auto& b : plan_kv_pool(*draft, o.block_size, o.num_blocks).buffers) p.add("draft." + b.name, b.cat, b.bytes);
    for (auto& b : plan_batch_forward(*draft, batch_options(o, true, true)).buffers)
      p.add("draft." + b.name, b.cat, b.bytes, b.life);
    for (auto& b : plan_spec_buffers(c, o).buffers) p.add(b.name, b.cat, b.bytes, b.life);
  }
  return p;
}

Scheduler::Scheduler(std::shared_ptr<const LlamaModel> weights, const Tokenizer& tok, SchedulerOptions o)
    : w_(std::move(weights)), tok_(tok) {
  const ModelConfig& c = w_->config();
  check_tokenizer_fits_model(tok_, c.vocab_size, "");
  o_ = resolve_scheduler_options(c, o, o.draft ? &o.draft->config() : nullptr);
  pool_ = std::make_unique<KvPool>(c, o_.block_size, o_.num_blocks);
  fwd_ = std::make_unique<BatchForward>(w_, *pool_, batch_options(o_, bool(o_.draft), false));
  if (o_.draft) {  // the draft's pool mirrors the model's block for block
    draft_pool_ = std::make_unique<KvPool>(o_.draft->config(), o_.block_size, o_.num_blocks);
    draft_fwd_ = std::make_unique<BatchForward>(o_.draft, *draft_pool_, batch_options(o_, true, true));
  }
  eos_ = tok_.eos_id() >= 0 ? tok_.eos_id() : c.eos_token_id;
  raw_.resize(size_t(c.vocab_size));
  if (o_.draft) {
    spec_arenas_.allocate(plan_spec_buffers(c, o_));
    spec_q_ = spec_arenas_.get_as<float>("spec.q");
    p_ = spec_arenas_.get_as<float>("spec.p");
    scratch_ = spec_arenas_.get_as<float>("spec.scratch");
  }
  st_.blocks_total = o_.num_blocks;
}

size_t Scheduler::allocated_bytes() const {
  size_t n = pool_->arenas().allocated_total() + fwd_->arenas().allocated_total();
  if (draft_pool_)
    n += draft_pool_->arenas().allocated_total() + draft_fwd_->arenas().allocated_total() +
         spec_arenas_.allocated_total();
  return n;
}

Scheduler::~Scheduler() = default;

uint64_t Scheduler::add(SchedRequest r) {
  LT_CHECK(!r.prompt.empty(), "the prompt encodes to no tokens; give a prompt or keep BOS");
  LT_CHECK(int(r.prompt.size()) < o_.max_context, "the prompt has {} tokens; the context holds {}", r.prompt.size(),
           o_.max_context);
  LT_CHECK(r.max_new_tokens >= 0, "max_new_tokens is {}; it must be 0 or more", r.max_new_tokens);
  const int V = w_->config().vocab_size;
  for (int t : r.prompt) LT_CHECK(t >= 0 && t < V, "prompt token id {} outside the vocabulary (size {})", t, V);
  LT_CHECK(!r.adapter || r.adapter->rank() <= o_.max_lora_rank, "{}: adapter rank {} is above the server's {}",
           r.adapter ? r.adapter->dir() : "", r.adapter ? r.adapter->rank() : 0, o_.max_lora_rank);
  const int need = (int(r.prompt.size()) + o_.block_size) / o_.block_size;
  LT_CHECK(need <= o_.num_blocks, "the prompt of {} tokens needs {} KV blocks; the pool holds {}", r.prompt.size(),
           need, o_.num_blocks);
  check_beam(r);
  auto s = std::make_unique<Seq>();
  s->id = next_id_++;
  s->sampler = std::make_unique<Sampler>(r.sampler, V);  // checks the options
  s->stream = std::make_unique<Tokenizer::StreamDecoder>(tok_);
  s->stream->prime(r.prompt);
  s->tokens = r.prompt;
  s->req = std::move(r);
  ++st_.requests;
  st_.prompt_tokens += s->tokens.size();
  const uint64_t id = s->id;
  waiting_.push_back(std::move(s));
  return id;
}

void Scheduler::cancel(uint64_t id) { cancels_.push_back(id); }

void Scheduler::drop_blocks(Seq& s) {
  for (auto& beam : s.beams)
    for (int b : beam.blocks) pool_->release(b);
  if (s.search) s.generated = 0;  // a beam search restarts from its prompt
  s.beams.clear();
  s.search.reset();
  for (int b : s.blocks) pool_->release(b);
  s.blocks.clear();
  s.computed = 0;
  s.draft_computed = 0;
  s.hashed = 0;
  s.last_hash = 0;
}

// Prefix lookup, then whether the blocks for the rest of the prompt (and one more token) are free.
bool Scheduler::admit(Seq& s) {
  const int BS = o_.block_size, n = int(s.tokens.size());
  if (o_.prefix_caching && s.blocks.empty()) {
    // full blocks only, and always leave at least one token to compute (its logits are needed)
    const int full = (n - 1) / BS;
    for (int b = 0; b < full; ++b) {
      std::span<const int> blk(s.tokens.data() + size_t(b) * BS, size_t(BS));
      const uint64_t h = kv_block_hash(s.last_hash, blk, s.req.adapter_salt);
      ++st_.prefix_lookup_blocks;
      const int got = pool_->lookup(h, blk);
      if (got < 0) break;
      ++st_.prefix_hit_blocks;
      s.blocks.push_back(got);
      s.last_hash = h;
      s.hashed = b + 1;
    }
    s.computed = int(s.blocks.size()) * BS;
    s.cached_tokens = std::max(s.cached_tokens, s.computed);
  }
  const int need = (n + BS) / BS - int(s.blocks.size());
  if (need > pool_->available()) {
    drop_blocks(s);
    return false;
  }
  return true;
}

void Scheduler::preempt(size_t index) {
  std::unique_ptr<Seq> s = std::move(running_[index]);
  running_.erase(running_.begin() + long(index));
  drop_blocks(*s);
  s->take = 0;
  ++st_.preemptions;
  waiting_.push_front(std::move(s));
}

// Blocks for positions < upto; preempts the newest other running sequence while none is free.
// false when `self` (running_[self]) had to be preempted itself.
bool Scheduler::ensure_blocks(Seq& s, int upto, size_t self) {
  while (int(s.blocks.size()) * o_.block_size < upto) {
    const int b = allocate_block(self);
    if (b < 0) return false;
    s.blocks.push_back(b);
  }
  return true;
}

int Scheduler::allocate_block(size_t self) {
  for (;;) {
    const int b = pool_->allocate();
    if (b >= 0) return b;
    const size_t victim = running_.size() - 1;
    preempt(victim);
    if (victim == self) return -1;
  }
}

// Each beam's block for its next position: a fresh one at a block boundary, else its own copy of
// a block it shares with other beams (copy on write). false when running_[self] was preempted.
bool Scheduler::ensure_beam_blocks(Seq& s, size_t self) {
  const int BS = o_.block_size;
  for (size_t i = 0; i < s.beams.size(); ++i) {
    const int pos = int(s.beams[i].tokens.size()) - 1, at = pos / BS;
    if (at < int(s.beams[i].blocks.size()) && pool_->refs(s.beams[i].blocks[size_t(at)]) == 1) continue;
    const int b = allocate_block(self);
    if (b < 0) return false;  // s.beams were dropped with the preemption
    std::vector<int>& table = s.beams[i].blocks;
    if (at < int(table.size())) {
      pool_->copy_rows(b, table[size_t(at)], pos % BS);
      pool_->release(table[size_t(at)]);
      table[size_t(at)] = b;
    } else {
      table.push_back(b);
    }
  }
  return true;
}

// Whether s runs speculatively this step: decoding (greedy or sampled), with room for K more positions.
bool Scheduler::speculates(const Seq& s) const {
  return o_.draft && s.beams.empty() && s.req.beam.num_beams <= 1 && o_.max_batch_tokens > o_.num_speculative &&
         int(s.tokens.size()) - s.computed == 1 && s.computed + o_.num_speculative < o_.max_context;
}

// Whether s is a sampled request that decodes speculatively whenever its position allows: its
// prompt is prefilled up to the last token, and it waits for a step with K + 1 rows rather than
// decode one (so its draws, and thus its output, depend only on its seed).
bool Scheduler::sampled_spec(const Seq& s) const {
  return o_.draft && s.req.beam.num_beams <= 1 && s.req.sampler.temperature > 0 &&
         o_.max_batch_tokens > o_.num_speculative;
}

// The draft catches up with each sequence (rows draft_computed .. last token - 1, in forwards of at
// most max_batch_tokens rows), then proposes K tokens by K one-row greedy steps over all of them.
void Scheduler::draft_phase(const std::vector<Seq*>& spec) {
  const int K = o_.num_speculative;
  std::vector<int> tokens;
  std::vector<BatchSeq> seqs;
  for (;;) {  // catch-up, chunked
    tokens.clear();
    seqs.clear();
    int cap = o_.max_batch_tokens;
    for (Seq* s : spec) {
      const int n = std::min(s->computed - s->draft_computed, cap);
      if (n <= 0) continue;
      tokens.insert(tokens.end(), s->tokens.begin() + s->draft_computed, s->tokens.begin() + s->draft_computed + n);
      seqs.push_back({s->blocks.data(), s->draft_computed, n, nullptr, false});
      s->draft_computed += n;
      cap -= n;
    }
    if (seqs.empty()) break;
    draft_fwd_->forward(tokens, seqs);
  }
  for (size_t i = 0; i < spec.size(); ++i) {  // spec holds at most max_seqs sequences: a q slot each
    spec[i]->proposal.clear();
    spec[i]->q = spec_q_ + i * size_t(K) * size_t(w_->config().vocab_size);
  }
  for (int j = 0; j < K; ++j) {
    tokens.clear();
    seqs.clear();
    for (Seq* s : spec) {
      tokens.push_back(j == 0 ? s->tokens.back() : s->proposal.back());
      seqs.push_back({s->blocks.data(), s->computed + j, 1, nullptr, true});
    }
    draft_fwd_->forward(tokens, seqs);
    for (size_t i = 0; i < spec.size(); ++i) spec[i]->proposal.push_back(propose(*spec[i], draft_fwd_->logits(int(i)), j));
  }
  for (Seq* s : spec) s->draft_computed = s->computed + K;
}

// The draft's j-th proposal for s from its logits: greedy, the argmax; sampled, a draw from q (the
// request's processors and warpers over the tokens and the proposals so far), kept in s.q.
int Scheduler::propose(Seq& s, const float* l, int j) {
  const int V = w_->config().vocab_size;
  if (s.req.sampler.temperature == 0) return int(std::max_element(l, l + V) - l);
  float* q = s.q + size_t(j) * size_t(V);
  std::copy(l, l + V, scratch_);
  ctx_.assign(s.tokens.begin(), s.tokens.end());
  ctx_.insert(ctx_.end(), s.proposal.begin(), s.proposal.end());
  s.sampler->distribution(scratch_, ctx_, q);
  const int x = draw_weighted({q, size_t(V)}, s.sampler->uniform());
  LT_CHECK(x >= 0, "speculative decoding: the draft's distribution is empty");
  return x;
}

// The model's K + 1 rows of logits for s (from logits index `first`): its own choice at each
// position is emitted while it equals the draft's; the first that differs (or the K + 1-th) is the
// last one. The keys and values of the accepted positions stay; the rest are overwritten later.
void Scheduler::verify(Seq& s, int first) {
  if (s.req.sampler.temperature > 0) return verify_sampled(s, first);
  const int K = o_.num_speculative, c = s.computed;
  int m = 0;  // proposals accepted
  for (int j = 0; j <= K; ++j) {
    const size_t before = s.tokens.size();
    emit_token(s, fwd_->logits(first + j));
    if (s.done || s.tokens.size() == before) break;
    if (j == K || s.tokens.back() != s.proposal[size_t(j)]) break;
    ++m;
  }
  end_round(s, c, m);
}

// A verification round's end: m of the K proposals accepted plus one emitted token, counted in
// the acceptance statistics; the draft's cache is valid up to the accepted prefix.
void Scheduler::end_round(Seq& s, int computed_before, int m) {
  st_.spec_proposed += uint64_t(o_.num_speculative);
  st_.spec_accepted += uint64_t(m);
  s.computed = computed_before + m + 1;
  s.draft_computed = std::min(s.draft_computed, s.computed);
  s.take = 0;
}

// Sampled verification (spec_sample.h): at each position j the model's p (the request's
// processors over the tokens so far, which include the proposals accepted) accepts proposal j with
// probability min(1, p/q); the first rejection is replaced by a draw from norm(max(0, p - q)) and
// ends the round; after K acceptances the K + 1-th row gives a bonus draw from p.
void Scheduler::verify_sampled(Seq& s, int first) {
  const int K = o_.num_speculative, c = s.computed, V = w_->config().vocab_size;
  const std::span<const float> p(p_, size_t(V));
  int m = 0;  // proposals accepted
  for (int j = 0; j <= K; ++j) {
    float* l = fwd_->logits(first + j);
    const float lse = keep_raw(s, l);
    s.sampler->distribution(l, s.tokens, p_);
    bool accepted = false;
    int next;
    if (j < K) {
      const int x = s.proposal[size_t(j)];
      const std::span<const float> q(s.q + size_t(j) * size_t(V), size_t(V));
      accepted = spec_accept(p[size_t(x)], q[size_t(x)], s.sampler->uniform());
      next = accepted ? x : draw_residual(p, q, s.sampler->uniform());
    } else {
      next = draw_weighted(p, s.sampler->uniform());
    }
    LT_CHECK(next >= 0, "speculative decoding: the model's distribution is empty");
    const size_t before = s.tokens.size();
    commit_token(s, next, lse);
    if (s.done || s.tokens.size() == before || !accepted) break;
    ++m;
  }
  end_round(s, c, m);
}

void Scheduler::check_beam(const SchedRequest& r) const {
  const int K = r.beam.num_beams;
  LT_CHECK(K >= 1 && K <= o_.max_seqs, "num_beams is {}; it must be 1 to the server's max_seqs ({})", K, o_.max_seqs);
  if (K == 1) return;
  // K beams of the whole output, the prompt shared, must fit the pool alone
  const int n = int(r.prompt.size());
  const int gen = std::min(r.max_new_tokens, o_.max_context - n);
  const int need = (n + o_.block_size) / o_.block_size + K * ((gen + o_.block_size - 1) / o_.block_size + 1);
  LT_CHECK(need <= o_.num_blocks, "beam search with {} beams over {} + {} tokens needs up to {} KV blocks; the pool "
           "holds {}; use fewer beams or tokens", K, n, gen, need, o_.num_blocks);
  BeamSearch check(r.beam, n, n + 1, beam_eos(r), w_->config().vocab_size);  // checks the options
}

// The ids that end a beam: the stop ids, and EOS when the request stops there.
std::vector<int> Scheduler::beam_eos(const SchedRequest& r) const {
  std::vector<int> eos = r.stop_ids;
  if (r.stop_at_eos && eos_ >= 0 && std::find(eos.begin(), eos.end(), eos_) == eos.end()) eos.push_back(eos_);
  return eos;
}

int Scheduler::running_width() const {
  int w = 0;
  for (const auto& s : running_) w += s->width();
  return w;
}

// One beam search step: the next beams continue their parents (block tables retained), the old
// tables are released; the first step forks the prompt's blocks into K beams.
void Scheduler::beam_step(Seq& s, std::span<const float* const> logits) {
  const int K = s.req.beam.num_beams;
  if (!s.search) {
    const int max_len = std::min(int(s.tokens.size()) + s.req.max_new_tokens, o_.max_context);
    s.search = std::make_unique<BeamSearch>(s.req.beam, int(s.tokens.size()), max_len, beam_eos(s.req),
                                            w_->config().vocab_size);
    s.beams.assign(size_t(K), {s.tokens, s.blocks});
    for (int i = 0; i < K; ++i)
      for (int b : s.blocks) pool_->retain(b);
    for (int b : s.blocks) pool_->release(b);
    s.blocks.clear();
  }
  const auto& next = s.search->advance(logits);
  std::vector<Seq::Beam> beams(static_cast<size_t>(K));
  for (int i = 0; i < K; ++i) {
    beams[size_t(i)] = s.beams[size_t(next[size_t(i)].parent)];
    beams[size_t(i)].tokens.push_back(next[size_t(i)].token);
    for (int b : beams[size_t(i)].blocks) pool_->retain(b);
  }
  for (auto& beam : s.beams)
    for (int b : beam.blocks) pool_->release(b);
  s.beams.swap(beams);
  s.generated = s.search->generated();
  ++st_.generated_tokens;
  if (s.search->done()) finish_beams(s);
}

// The final event with the hypotheses (tokens without the stop id, text cut before a stop string).
void Scheduler::finish_beams(Seq& s) {
  SchedEvent e;
  e.finished = true;
  const int P = int(s.req.prompt.size());
  for (BeamHypothesis& h : s.search->results()) {
    SchedBeam b;
    b.score = h.score;
    b.reason = h.eos ? "eos" : P + s.req.max_new_tokens > o_.max_context ? "context" : "max_new_tokens";
    if (h.eos) h.tokens.pop_back();
    Tokenizer::StreamDecoder d(tok_);
    d.prime(s.req.prompt);
    for (int t : h.tokens) b.text += d.push(t);
    b.text += d.flush();
    if (const size_t at = find_stop(s.req.stop, b.text); at != std::string::npos) {
      b.text.resize(at);
      b.reason = "stop_string";
    }
    b.tokens = std::move(h.tokens);
    e.beams.push_back(std::move(b));
  }
  e.reason = e.beams.empty() ? "max_new_tokens" : e.beams[0].reason;
  e.text = e.beams.empty() ? "" : e.beams[0].text;
  e.prompt_tokens = P;
  e.completion_tokens = e.beams.empty() ? 0 : int(e.beams[0].tokens.size());
  e.cached_tokens = s.cached_tokens;
  s.done = true;
  ++st_.finished;
  if (s.req.on_event) s.req.on_event(e);
}

void Scheduler::publish_blocks(Seq& s) {
  if (!o_.prefix_caching) return;
  const int BS = o_.block_size;
  for (; s.hashed < s.computed / BS; ++s.hashed) {
    std::span<const int> blk(s.tokens.data() + size_t(s.hashed) * BS, size_t(BS));
    s.last_hash = kv_block_hash(s.last_hash, blk, s.req.adapter_salt);
    pool_->publish(s.blocks[size_t(s.hashed)], s.last_hash, blk);
  }
}

void Scheduler::finish(Seq& s, const std::string& reason, const std::string& error) {
  if (s.done) return;
  s.done = true;
  SchedEvent e;
  e.finished = true;
  e.reason = reason;
  e.error = error;
  if (reason != "stop_string" && reason != "error") {
    e.text = s.stream->flush();
    s.text += e.text;
  }
  e.prompt_tokens = int(s.req.prompt.size());
  e.completion_tokens = s.generated;
  e.cached_tokens = s.cached_tokens;
  ++st_.finished;
  if (reason == "cancelled") ++st_.cancelled;
  if (s.req.on_event) s.req.on_event(e);
}

void Scheduler::emit_token(Seq& s, float* logits) {
  if (s.req.beam.num_beams > 1) {  // the prompt is in: the beams start
    const std::vector<const float*> rows(size_t(s.req.beam.num_beams), logits);
    return beam_step(s, rows);
  }
  const float lse = keep_raw(s, logits);
  commit_token(s, s.sampler->sample(logits, s.tokens), lse);
}

float Scheduler::keep_raw(const Seq& s, const float* logits) {
  if (!s.req.logprobs) return 0;
  const int V = w_->config().vocab_size;
  std::copy(logits, logits + V, raw_.begin());
  float mx = *std::max_element(raw_.begin(), raw_.end());
  double sum = 0;
  for (float x : raw_) sum += std::exp(double(x - mx));
  return mx + float(std::log(sum));
}

// Appends `next` to s and streams it (its logprob from raw_ and lse), or ends s at EOS, a stop
// id, a stop string, max_new_tokens or the context.
void Scheduler::commit_token(Seq& s, int next, float lse) {
  if ((s.req.stop_at_eos && next == eos_) ||
      std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), next) != s.req.stop_ids.end())
    return finish(s, "eos");
  s.tokens.push_back(next);
  ++s.generated;
  ++st_.generated_tokens;
  SchedEvent e;
  e.token = next;
  e.logprob = s.req.logprobs ? raw_[size_t(next)] - lse : 0.0f;
  e.text = s.stream->push(next);
  const size_t before = s.text.size();
  s.text += e.text;
  if (const size_t at = find_stop(s.req.stop, s.text); at != std::string::npos) {
    e.text = at > before ? s.text.substr(before, at - before) : std::string();
    s.text.resize(at);
    if (s.req.on_event) s.req.on_event(e);
    return finish(s, "stop_string");
  }
  if (s.req.on_event) s.req.on_event(e);
  if (s.generated >= s.req.max_new_tokens) return finish(s, "max_new_tokens");
  if (int(s.tokens.size()) - 1 >= o_.max_context) return finish(s, "context");
}

void Scheduler::reap_cancelled() {
  if (cancels_.empty()) return;
  auto cancelled = [&](const Seq& s) { return std::find(cancels_.begin(), cancels_.end(), s.id) != cancels_.end(); };
  for (auto& s : running_)
    if (cancelled(*s)) finish(*s, "cancelled");
  for (auto& s : waiting_)
    if (cancelled(*s)) finish(*s, "cancelled");
  cancels_.clear();
}

void Scheduler::fail_running(const std::string& message) {
  for (auto& s : running_) finish(*s, "error", message);
}

void Scheduler::retire() {
  for (size_t i = 0; i < running_.size();)
    if (running_[i]->done) {
      drop_blocks(*running_[i]);
      running_.erase(running_.begin() + long(i));
    } else {
      ++i;
    }
  std::erase_if(waiting_, [](const auto& s) { return s->done; });
}

bool Scheduler::step() {
  reap_cancelled();
  retire();
  // admit in FIFO order (max_new_tokens 0 finishes without running)
  while (!waiting_.empty()) {
    Seq& s = *waiting_.front();
    if (running_width() + s.width() > o_.max_seqs) break;
    if (s.req.max_new_tokens == 0) {
      finish(s, "max_new_tokens");
      waiting_.pop_front();
      continue;
    }
    if (!admit(s)) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  if (running_.empty()) return !waiting_.empty();
  ++st_.steps;
  // decode rows first, then prefill chunks, within the token budget
  int budget = o_.max_batch_tokens;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Seq& s = *running_[i];
      if (!s.beams.empty()) {  // a beam search: one decode row per beam
        if (pass != 0 || s.take > 0 || s.width() > budget) continue;
        if (!ensure_beam_blocks(s, i)) break;
        s.take = s.width();
        budget -= s.take;
        continue;
      }
      const int pending = int(s.tokens.size()) - s.computed;
      if ((pass == 0) != (pending == 1) || s.take > 0 || pending == 0) continue;
      int take = std::min(pending, budget);
      if (pass == 0 && speculates(s)) {
        if (budget >= o_.num_speculative + 1) take = o_.num_speculative + 1;
        else if (sampled_spec(s)) continue;  // waits for a step with its K + 1 rows
      }
      if (pass == 1 && sampled_spec(s)) take = std::min(pending - 1, budget);  // the last token decodes
      if (!ensure_blocks(s, s.computed + take, i)) break;  // it preempted itself: the rest wait too
      s.take = take;
      budget -= take;
    }
  // the batch: sequences grouped by adapter (stable), each with its rows
  std::vector<Seq*> batch;
  for (auto& s : running_)
    if (s->take > 0) batch.push_back(s.get());
  std::stable_sort(batch.begin(), batch.end(), [](const Seq* a, const Seq* b) {
    return std::less<const void*>()(a->req.adapter.get(), b->req.adapter.get());
  });
  std::vector<Seq*> spec;
  for (Seq* s : batch)
    if (s->take > 1 && int(s->tokens.size()) - s->computed == 1) spec.push_back(s);
  std::vector<int> tokens;
  std::vector<BatchSeq> seqs;
  if (!spec.empty()) {
    try {
      draft_phase(spec);
    } catch (const std::exception& e) {
      for (Seq* s : batch) s->take = 0;
      fail_running(e.what());
      retire();
      return !idle();
    }
  }
  for (Seq* s : batch) {
    if (!s->proposal.empty() && s->take > 1) {  // the last token and the K proposals, a row each
      for (int j = 0; j < s->take; ++j) {
        tokens.push_back(j == 0 ? s->tokens.back() : s->proposal[size_t(j - 1)]);
        seqs.push_back({s->blocks.data(), s->computed + j, 1, s->req.adapter.get(), true});
      }
      continue;
    }
    if (!s->beams.empty()) {
      for (const auto& b : s->beams) {
        tokens.push_back(b.tokens.back());
        seqs.push_back({b.blocks.data(), int(b.tokens.size()) - 1, 1, s->req.adapter.get(), true});
      }
      continue;
    }
    tokens.insert(tokens.end(), s->tokens.begin() + s->computed, s->tokens.begin() + s->computed + s->take);
    const bool last = s->computed + s->take == int(s->tokens.size());
    seqs.push_back({s->blocks.data(), s->computed, s->take, s->req.adapter.get(), last});
  }
  if (batch.empty()) return true;
  try {
    fwd_->forward(tokens, seqs);
    st_.prefill_tokens += tokens.size();
    int li = 0;
    for (Seq* s : batch) {
      if (!s->proposal.empty() && s->take > 1) {
        verify(*s, li);
        li += o_.num_speculative + 1;
        s->proposal.clear();
        publish_blocks(*s);
        continue;
      }
      if (!s->beams.empty()) {
        std::vector<const float*> rows;
        for (int k = 0; k < s->take; ++k) rows.push_back(fwd_->logits(li++));
        s->take = 0;
        beam_step(*s, rows);
        continue;
      }
      const bool last = s->computed + s->take == int(s->tokens.size());
      s->computed += s->take;
      s->take = 0;
      publish_blocks(*s);
      if (last) emit_token(*s, fwd_->logits(li++));
    }
  } catch (const std::exception& e) {
    for (Seq* s : batch) s->take = 0;
    fail_running(e.what());
  }
  retire();
  return !idle();
}

SchedStats Scheduler::stats() const {
  SchedStats s = st_;
  s.waiting = int(waiting_.size());
  s.running = int(running_.size());
  s.blocks_in_use = pool_->in_use();
  s.blocks_cached = pool_->cached();
  return s;
}

}  // namespace lt
