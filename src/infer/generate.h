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
  std::string stop_reason;              // "eos", "stop_string", "max_new_tokens", "context"
  double prefill_seconds = 0, decode_seconds = 0;
  int decode_tokens = 0;                // forward passes of one token
};

// Runs generation; `on_text` receives each newly completed piece of text (may be empty: none).
GenerateResult generate(LlamaModel& model, const Tokenizer& tok, const std::string& prompt,
                        const GenerateOptions& opts, const std::function<void(const std::string&)>& on_text);

}  // namespace lt
