// Engine: many generation requests over one Model at once, the core of `leantune serve`.
// Requests join and leave one running batch at every step (continuous batching); each runs with
// its own sampling options and seed, and optionally with a LoRA adapter applied unmerged, so one
// base model in memory serves the base and any number of adapters in the same batch. The KV cache
// is paged (fixed-size blocks from one arena planned up front); full blocks are shared between
// requests whose prompts start alike (prefix caching); when blocks run out, the newest request is
// preempted and recomputed later. Every row's arithmetic is independent of the rest of the batch,
// so a request gives the same tokens alone or among many.
//
// Threads: submit, cancel, the adapter calls and stats may be called from any thread. Steps run
// either on a thread of the engine's own (start()) or on the caller's (step(), when not started);
// callbacks are called on the stepping thread and must not block for long.
//
// Usage:
//   leantune::Model model("models/SmolLM2-135M");
//   leantune::Tokenizer tok("models/SmolLM2-135M");
//   leantune::Engine engine(model, tok, {.max_seqs = 32});
//   engine.load_adapter("support-bot", "out/adapter");
//   leantune::EngineRequest r;
//   r.prompt_ids = tok.encode("Hello");
//   r.adapter = "support-bot";            // "" for the base model
//   r.options.max_new_tokens = 64;
//   engine.start();
//   engine.submit(std::move(r), [](const leantune::EngineEvent& e) { ... e.text ... e.finished ... });
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "leantune/error.h"
#include "leantune/generator.h"

namespace leantune {

class Model;
class Tokenizer;

struct EngineOptions {
  int max_seqs = 64;             // requests running at once (the rest wait in the queue)
  int max_queue = 256;           // requests waiting at most; submit() throws QueueFull beyond
  int max_batch_tokens = 256;    // tokens per forward step (decode tokens first, then prompt chunks)
  int context = 0;               // positions per request (prompt + output); 0: the model's, at most 4096
  int block_size = 16;           // positions per KV block
  int kv_blocks = 0;             // blocks in the KV pool; 0: from kv_memory_bytes, else max_seqs full contexts
  size_t kv_memory_bytes = 0;    // the KV pool's size when kv_blocks is 0 (0: max_seqs full contexts, at most
                                 // 1 GiB, one context at least)
  bool prefix_caching = true;
  size_t adapter_memory_bytes = 0;  // resident adapters at most (LRU eviction); 0: no limit
  int max_lora_rank = 64;           // largest adapter rank accepted
  // Speculative decoding: a draft model (same vocabulary; it must outlive the engine) proposes
  // num_speculative_tokens tokens for each request, checked by the model in one forward. Greedy: the
  // output is exactly the greedy output without it. Sampled: rejection sampling (accept a proposal
  // with probability min(1, p/q), else draw from max(0, p - q)), so the output is distributed exactly
  // as without it, and a seed reproduces it (not the same tokens as without the draft, though).
  const Model* draft_model = nullptr;
  int num_speculative_tokens = 4;
};

// Beam search as transformers' generate(num_beams=K, do_sample=False, length_penalty=...,
// early_stopping=...): the same hypotheses and scores. The sampling options are not used.
struct BeamSearchOptions {
  int num_beams = 1;                     // 1: off; at most EngineOptions::max_seqs (each beam is a row)
  int num_return = 1;                    // hypotheses returned, best first (1 to num_beams)
  float length_penalty = 1.0f;           // score = sum of log-probabilities / length ** length_penalty
  std::string early_stopping = "false";  // "false" (HF's heuristic) | "true" (stop at K finished) | "never"
};

// One hypothesis of a beam search.
struct BeamResult {
  std::vector<int> tokens;  // generated tokens, without the final EOS / stop id
  std::string text;         // their text, cut before a stop string
  float score = 0;          // HF's sequences_scores
  StopReason stop_reason = StopReason::MaxNewTokens;
};

struct EngineRequest {
  std::vector<int> prompt_ids;  // BOS included as wanted; at least one id
  std::string adapter;          // a loaded adapter's name; "" for the base model
  GenerateOptions options;      // max_new_tokens, stop strings, stop_at_eos, sampling (add_bos unused)
  std::vector<int> stop_token_ids;  // tokens that end the output as EOS does (e.g. a chat's end of turn)
  bool logprobs = false;        // report each token's log-probability
  BeamSearchOptions beam;       // num_beams > 1: beam search; no token events, the final event has the beams
};

struct EngineEvent {
  int token = -1;          // the generated token; -1 on the final event
  std::string text;        // the text it completed (the final event: text held back until the end)
  float logprob = 0;       // the token's log-probability under the model (EngineRequest::logprobs)
  bool finished = false;   // the last event of the request
  StopReason stop_reason = StopReason::MaxNewTokens;  // when finished (Cancelled also after an error)
  std::string error;       // when finished by an error in the step (non-finite logits ...)
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // when finished
  std::vector<BeamResult> beams;  // beam search, on the final event: the hypotheses, best first (text: the best's)
};
using EventCallback = std::function<void(const EngineEvent&)>;

// submit() beyond max_queue waiting requests.
class QueueFull : public Error {
 public:
  using Error::Error;
};

struct EngineStats {
  uint64_t requests = 0, finished = 0, cancelled = 0, preemptions = 0, steps = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0, computed_tokens = 0;
  uint64_t prefix_lookup_blocks = 0, prefix_hit_blocks = 0;
  uint64_t adapter_loads = 0, adapter_evictions = 0;
  uint64_t spec_proposed = 0, spec_accepted = 0;  // draft tokens proposed / accepted (speculative decoding)
  int waiting = 0, running = 0;
  int kv_blocks = 0, kv_blocks_in_use = 0, kv_blocks_cached = 0, block_size = 0;
  int adapters_resident = 0;
  size_t adapter_bytes = 0, kv_bytes = 0;
  size_t engine_bytes = 0;  // everything the engine allocated: KV pools and batch buffers (plan_serve's engine part)
};

class Engine {
 public:
  // Plans and allocates the KV pool and the batch buffers. `model` and `tok` must outlive the
  // engine. leantune::Error when the model is quantized, the tokenizer does not fit it, or an
  // option is out of range.
  Engine(const Model& model, const Tokenizer& tok, const EngineOptions& options = {});
  ~Engine();  // stops the thread; requests still running end without a final event
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its id; `on_event` receives its tokens and a final event.
  // leantune::Error for an unknown adapter, a prompt longer than the context, an option out of
  // range; QueueFull when max_queue requests are waiting.
  uint64_t submit(EngineRequest request, EventCallback on_event);
  // Ends a request (its final event says Cancelled); no-op for an unknown or finished one.
  void cancel(uint64_t id);

  // One scheduling step on the calling thread (not while started); false when nothing is left.
  bool step();
  // Runs steps on a thread of the engine's own until stop() or destruction.
  void start();
  void stop();

  // PEFT LoRA adapters, applied unmerged. load_adapter reads and checks the folder now
  // (leantune::Error naming it); the name must be new. unload_adapter: false when unknown.
  void load_adapter(const std::string& name, const std::string& dir);
  bool unload_adapter(const std::string& name);
  bool has_adapter(const std::string& name) const;
  std::vector<std::string> adapters() const;

  int context() const;  // positions per request
  EngineStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace leantune
