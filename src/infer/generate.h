// The generate loop: prefill the prompt, then decode one token at a time through the KV cache,
// sampling each next token and streaming its text as soon as it is valid UTF-8.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "infer/sampler.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace lt {

struct GenerateOptions {
  int max_new_tokens = 256;             // stop after this many generated tokens
  std::vector<std::string> stop;        // stop strings: generation ends when the text contains one
  bool stop_at_eos = true;              // end at the tokenizer's / model's EOS token
  bool add_bos = true;                  // encode the prompt with BOS (as the tokenizer says)
  SamplerOptions sampler;
};

struct GenerateResult {
  std::vector<int> prompt_ids, output_ids;
  std::string text;                     // the generated text (without the prompt)
  std::string stop_reason;              // "eos", "stop_string", "max_new_tokens", "context", "cancelled"
  double prefill_seconds = 0, decode_seconds = 0;
  int decode_tokens = 0;                // forward passes of one token
};

// Called once per generated token with its id and the text it completed (empty while a UTF-8
// character is still incomplete; cut before a stop string), and once more with id -1 for text
// held back until the end. Returning false stops generation (stop_reason "cancelled").
using TokenFn = std::function<bool(int id, const std::string& text)>;

// Runs generation from prompt ids (already encoded, BOS included as wanted); the model's KV cache
// is filled from position 0.
GenerateResult generate_ids(LlamaModel& model, const Tokenizer& tok, std::vector<int> prompt_ids,
                            const GenerateOptions& opts, const TokenFn& on_token);

// Encodes `prompt` (with BOS when opts.add_bos), then generate_ids.
GenerateResult generate(LlamaModel& model, const Tokenizer& tok, const std::string& prompt,
                        const GenerateOptions& opts, const TokenFn& on_token);

// Runs generation; `on_text` receives each newly completed piece of text (never empty).
GenerateResult generate(LlamaModel& model, const Tokenizer& tok, const std::string& prompt,
                        const GenerateOptions& opts, const std::function<void(const std::string&)>& on_text);

// Where the first of the stop strings (in their order) occurs in `text`; npos when none does
// (generate and the scheduler's sequences stop there).
size_t find_stop(const std::vector<std::string>& stop, const std::string& text);

}  // namespace lt
