// Generator: text generation over a shared Model. Each Generator owns one request's state (a KV
// cache, a sampler), so a server runs one Generator per request, on as many threads as it likes,
// over one Model and one Tokenizer. A Generator is used by one thread at a time.
//
// Sampling follows Hugging Face transformers' generate(): repetition penalty, no-repeat n-gram
// ban, temperature (0: greedy), top-k, top-p, min-p, then a draw seeded by `seed`.
//
// Usage:
//   leantune::Model model("stories260K.bin");
//   leantune::Tokenizer tok("tok512.bin");
//   leantune::Generator gen(model, {.context = 512});
//   leantune::GenerateOptions o;
//   o.max_new_tokens = 64;
//   o.sampling.temperature = 0;  // greedy
//   leantune::GenerateResult r = gen.generate(tok, "Once upon a time", o,
//       [](int token, std::string_view text) {
//         std::fwrite(text.data(), 1, text.size(), stdout);
//         return true;  // false stops (StopReason::Cancelled)
//       });
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leantune/sequence.h"

namespace leantune {

class Model;
class Tokenizer;

// Each default turns its stage off (plain softmax sampling at temperature 1).
struct SamplingOptions {
  float temperature = 1.0f;         // logits / temperature; 0: greedy (argmax, lowest id on ties)
  int top_k = 0;                    // keep the k most likely tokens; 0: off
  float top_p = 1.0f;               // keep the smallest set holding this probability mass; 1: off
  float min_p = 0.0f;               // drop tokens below min_p × the top probability; 0: off
  float repetition_penalty = 1.0f;  // HF's penalty on tokens already in the context; 1: off
  int no_repeat_ngram_size = 0;     // ban tokens that would repeat an n-gram; 0: off
  uint64_t seed = 0;                // the random draw's seed
};

struct GenerateOptions {
  int max_new_tokens = 256;       // generated tokens at most
  std::vector<std::string> stop;  // stop strings: the text ends before the first one that appears
  bool stop_at_eos = true;        // end at the tokenizer's (else the model's) EOS token
  bool add_bos = true;            // encode a text prompt with BOS (as the tokenizer says)
  SamplingOptions sampling;
};

enum class StopReason {
  Eos,           // the model produced EOS
  StopString,    // one of GenerateOptions::stop appeared
  MaxNewTokens,  // max_new_tokens were generated
  Context,       // the KV cache is full
  Cancelled,     // the callback returned false
};
// "eos", "stop_string", "max_new_tokens", "context", "cancelled".
const char* stop_reason_name(StopReason r);

struct GenerateResult {
  std::vector<int> prompt_ids;  // the prompt as encoded (BOS included)
  std::vector<int> output_ids;  // the generated tokens (EOS not included)
  std::string text;             // the generated text, without the prompt, cut before a stop string
  StopReason stop_reason = StopReason::MaxNewTokens;
  double prefill_seconds = 0, decode_seconds = 0;
  int decode_tokens = 0;        // one-token forward passes
};

// Called once per generated token with its id and the text it completed: empty while a UTF-8
// character is incomplete, cut before a stop string; and once more at the end with token -1 for
// text held back until then. Concatenated, the texts are GenerateResult::text. Return false to
// stop after this token.
using TokenCallback = std::function<bool(int token, std::string_view text)>;

class Generator {
 public:
  // Allocates this generator's KV cache (options.context positions) over `model`'s weights.
  explicit Generator(const Model& model, const SequenceOptions& options = {});
  ~Generator();
  Generator(Generator&&) noexcept;
  Generator& operator=(Generator&&) noexcept;

  // Encodes `prompt` with `tok` and generates its continuation from an empty cache. leantune::Error
  // when the prompt does not fit the context, the tokenizer does not fit the model, an option is
  // out of range, or the logits turn non-finite.
  GenerateResult generate(const Tokenizer& tok, std::string_view prompt, const GenerateOptions& options = {},
                          const TokenCallback& on_token = {});
  // The same from prompt ids already encoded (e.g. a chat template's); options.add_bos is unused.
  GenerateResult generate(const Tokenizer& tok, std::span<const int> prompt_ids, const GenerateOptions& options = {},
                          const TokenCallback& on_token = {});

  int context() const;          // positions the cache holds
  size_t memory_bytes() const;  // bytes this generator allocated (the weights are the Model's)

 private:
  friend struct detail::Access;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace leantune
