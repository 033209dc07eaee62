// Sequence: one token sequence's state over a shared Model: its KV cache, activations and logits.
// Tokens appended run through the model at the next positions; the logits of the last one are
// returned. A server holds one Sequence (or Generator) per request over one Model.
//
// A Sequence is used by one thread at a time; different Sequences over one Model run at once.
//
// Usage:
//   leantune::Model model("stories260K.bin");
//   leantune::Sequence seq(model, {.context = 256});
//   std::span<const float> logits = seq.append(prompt_ids);   // prefill
//   int next = argmax(logits);
//   logits = seq.append(std::span<const int>(&next, 1));       // one decode step
//   seq.truncate(0);                                           // start over (the cache is reused)
#pragma once
#include <cstddef>
#include <memory>
#include <span>

namespace leantune {

class Model;
namespace detail {
struct Access;
}

struct SequenceOptions {
  int context = 0;        // KV cache positions; 0: the model's max_position_embeddings, at most 4096
  int prefill_block = 0;  // tokens per prefill block; 0: min(context, 256)
};

class Sequence {
 public:
  // Allocates the KV cache and activations for options.context positions (leantune::Error when the
  // context is longer than the model's sliding window or less than 1).
  explicit Sequence(const Model& model, const SequenceOptions& options = {});
  ~Sequence();
  Sequence(Sequence&&) noexcept;
  Sequence& operator=(Sequence&&) noexcept;

  // Runs `tokens` (at least one, ids in [0, vocab_size)) at positions size()..size()+n-1 and
  // returns the next-token logits after the last of them (vocab_size floats, valid until the next
  // call). leantune::Error when they do not fit the context or an id is outside the vocabulary.
  std::span<const float> append(std::span<const int> tokens);

  int size() const;     // positions filled
  int context() const;  // positions the cache holds
  // Forgets every position from n on (0: start over); the next append continues at n.
  void truncate(int n);
  // Bytes this sequence allocated (KV cache, activations, workspace, logits); the weights are the Model's.
  size_t memory_bytes() const;

 private:
  friend struct detail::Access;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace leantune
