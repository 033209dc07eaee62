// Scheduler: continuous batching over the paged KV cache. Requests wait in a FIFO queue; at every
// step() the scheduler admits what fits (sequences at most, KV blocks for the prompt), builds one
// batch from every running sequence (decode tokens first, then prefill chunks, up to a token
// budget), runs one BatchForward, samples each sequence that reached its end with its own Sampler,
// streams the text, and retires finished sequences, freeing their blocks at once. Requests join and
// leave the batch at every step.
//
// When blocks run out, the newest running sequence is preempted by recompute: its blocks are
// released and it goes back to the head of the queue with everything it generated; on readmission
// its prompt and output are prefilled again (batch invariance makes that bit-identical) and
// generation continues with the same sampler state.
//
// With prefix caching, every full block is published under the hash of its token prefix (salted by
// the adapter), and admission takes the longest run of published blocks matching the prompt
// instead of computing it.
//
// Beam search (SchedRequest::beam): the prompt is prefilled once; its blocks are then shared by the
// K beams (reference counts), each beam a row of the batch. When beams fork, the new beams retain
// their parent's block table, and a beam about to write into a block it shares copies it first
// (copy on write), so only the partial last block is ever copied. A beam search counts K against
// max_seqs; preempted, it restarts from its prompt (it streams nothing, so nothing is repeated).
//
// Speculative decoding (SchedulerOptions::draft): the draft model has a KV pool of its own with the
// same blocks, so a sequence's block table serves both; each greedy decoding sequence first brings
// the draft up to date (its prompt, chunked, then the last accepted tokens), then the draft runs K
// one-row steps over all of them together, then the model verifies the K proposals as K + 1 rows.
// Rejected positions are simply overwritten later. Greedy sequences keep the longest prefix the
// model agrees with; sampled ones run the rejection-sampling scheme (infer/spec_sample.h): the
// draft draws each proposal from its distribution q (the request's processors and warpers applied
// to the draft's logits, with the same context), the model's p at each position accepts it with
// probability min(1, p/q) or replaces it by a draw from norm(max(0, p - q)), and after K
// acceptances a bonus token is drawn from p; so the output is distributed exactly as without the
// draft. Every processor (repetition penalty, n-gram bans, temperature, top-k/p, min-p) is a
// function of the logits and the context, so p and q are built the same way and no request falls
// back. The draws come from the request's seeded generator; for the output to depend only on the
// seed, a sampled sequence's prompt is prefilled up to its last token (the first token then comes
// from a speculative step, as after a preemption), and a sampled sequence that cannot get its
// K + 1 rows in a step waits for the next rather than decode one row.
//
// Not thread-safe: one thread calls add / cancel / step (api/engine.cpp adds the locking).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "infer/batch_forward.h"
#include "infer/beam_search.h"
#include "infer/kv_pool.h"
#include "infer/lora_weights.h"
#include "infer/sampler.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace lt {

// One hypothesis of a beam search, on its request's final event.
struct SchedBeam {
  std::vector<int> tokens;  // generated, without the final EOS / stop id
  std::string text;         // decoded, cut before a stop string
  float score = 0;          // HF's sequences_scores: sum of log-probabilities / length ** length_penalty
  std::string reason;       // eos | stop_string | max_new_tokens | context
};

struct SchedEvent {
  int token = -1;             // the generated token (-1: the final event)
  std::string text;           // text this token completed (final event: text held back until the end)
  float logprob = 0;          // log-probability of the token under the model (when asked)
  bool finished = false;
  std::string reason;         // finished: eos | stop_string | max_new_tokens | context | cancelled | error
  std::string error;          // reason "error": the message
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // on the final event
  std::vector<SchedBeam> beams;  // beam search: the final event's hypotheses, best first
};
using SchedCallback = std::function<void(const SchedEvent&)>;

struct SchedRequest {
  std::vector<int> prompt;                     // ids, BOS included as wanted; at least one
  std::shared_ptr<const LoraWeights> adapter;  // null: the base model
  uint64_t adapter_salt = 0;                   // separates prefix-cache entries of different adapters
  int max_new_tokens = 256;
  std::vector<std::string> stop;               // stop strings
  bool stop_at_eos = true;
  std::vector<int> stop_ids;                   // tokens that end the output like EOS (not emitted)
  bool logprobs = false;
  SamplerOptions sampler;
  BeamOptions beam;                            // num_beams > 1: beam search (no tokens streamed; the
                                               // final event holds the hypotheses; sampler unused)
  SchedCallback on_event;                      // called on the stepping thread
};

struct SchedulerOptions {
  int block_size = 16;         // positions per KV block
  int num_blocks = 0;          // KV blocks in the pool; 0: max_seqs full contexts, within 1 GiB (one at least)
  int max_seqs = 64;           // running sequences at most
  int max_batch_tokens = 256;  // rows per forward at most
  int max_context = 0;         // positions per sequence; 0: the model's, at most 4096
  int max_lora_rank = 64;
  bool prefix_caching = true;
  // Speculative decoding: a draft model (same vocabulary) proposes num_speculative tokens for each
  // decoding sequence; the model checks them in one forward (a row per position). Greedy: it keeps
  // the longest prefix it agrees with plus its own next token, so the output is the greedy output.
  // Sampled: rejection sampling, so the output is distributed as without the draft (see above).
  std::shared_ptr<const LlamaModel> draft;
  int num_speculative = 4;
};

struct SchedStats {
  uint64_t requests = 0, finished = 0, cancelled = 0, preemptions = 0, steps = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0, prefill_tokens = 0;  // prefill: rows computed
  uint64_t prefix_lookup_blocks = 0, prefix_hit_blocks = 0;
  uint64_t spec_proposed = 0, spec_accepted = 0;  // draft tokens proposed / accepted by the model
  int waiting = 0, running = 0, blocks_total = 0, blocks_in_use = 0, blocks_cached = 0;
};

// The options with their defaults resolved as the scheduler resolves them (the context, the KV
// blocks), checked; `draft`: the draft model's config when there is one.
SchedulerOptions resolve_scheduler_options(const ModelConfig& c, SchedulerOptions o, const ModelConfig* draft);
// Every buffer a scheduler with these resolved options allocates: the KV pool, the batch forward's
// buffers, and the draft model's pool and buffers ("draft." names). Weights are not included.
MemoryPlan plan_scheduler(const ModelConfig& c, const SchedulerOptions& resolved, const ModelConfig* draft);

class Scheduler {
 public:
  Scheduler(std::shared_ptr<const LlamaModel> weights, const Tokenizer& tok, SchedulerOptions o);
  ~Scheduler();

  // Queues a request; returns its id. lt::Error when the prompt is empty or does not fit the
  // context, or the sampler options are out of range (nothing is queued then).
  uint64_t add(SchedRequest r);
  // Ends a waiting or running request with reason "cancelled" at the next step (no-op when unknown).
  void cancel(uint64_t id);
  // add()'s checks of a beam search (beams within max_seqs, its blocks within the pool, the
  // options); reads only the options, so any thread may call it.
  void check_beam(const SchedRequest& r) const;
  // One scheduling step; returns whether work remains (waiting or running requests).
  bool step();
  bool idle() const { return waiting_.empty() && running_.empty(); }

  SchedStats stats() const;
  const SchedulerOptions& options() const { return o_; }
  const KvPool& pool() const { return *pool_; }
  size_t allocated_bytes() const;  // the arenas of the pools and batch buffers (== plan_scheduler's total)

 private:
  struct Seq;
  bool admit(Seq& s);
  void drop_blocks(Seq& s);
  void preempt(size_t index);
  bool ensure_blocks(Seq& s, int upto, size_t self);
  int allocate_block(size_t self);  // -1 when running_[self] had to be preempted
  bool ensure_beam_blocks(Seq& s, size_t self);
  void beam_step(Seq& s, std::span<const float* const> logits);
  void finish_beams(Seq& s);
  int running_width() const;
  void draft_phase(const std::vector<Seq*>& spec);
  void verify(Seq& s, int first_logits);
  void verify_sampled(Seq& s, int first_logits);
  void end_round(Seq& s, int computed_before, int accepted);
  int propose(Seq& s, const float* draft_logits, int j);
  bool speculates(const Seq& s) const;
  bool sampled_spec(const Seq& s) const;
  std::vector<int> beam_eos(const SchedRequest& r) const;
  void publish_blocks(Seq& s);
  void emit_token(Seq& s, float* logits);
  float keep_raw(const Seq& s, const float* logits);  // raw_ = logits, returns their log-sum-exp (logprobs)
  void commit_token(Seq& s, int next, float lse);
  void retire();  // drops finished sequences and their blocks
  void finish(Seq& s, const std::string& reason, const std::string& error = {});
  void reap_cancelled();
  void fail_running(const std::string& message);

  std::shared_ptr<const LlamaModel> w_;
  const Tokenizer& tok_;
  SchedulerOptions o_;
  std::unique_ptr<KvPool> pool_;
  std::unique_ptr<BatchForward> fwd_;
  std::unique_ptr<KvPool> draft_pool_;
  std::unique_ptr<BatchForward> draft_fwd_;
  int eos_ = -1;
  uint64_t next_id_ = 1;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;  // oldest admitted first
  std::vector<uint64_t> cancels_;
  std::vector<float> raw_;                     // (V) logits before sampling, for logprobs
  Arenas spec_arenas_;                         // speculation's planned buffers (plan_spec_buffers)
  float* spec_q_ = nullptr;                    // (max_seqs, K, V) sampled proposals' q, a slot per sequence
  float* p_ = nullptr;                         // (V) sampled speculation: the model's p
  float* scratch_ = nullptr;                   // (V) the draft's logits, processed
  std::vector<int> ctx_;                       // a sequence's tokens and its proposals so far
  SchedStats st_;
};

}  // namespace lt
