// The OpenAI request shapes the server accepts, parsed and checked: /v1/completions (model, prompt
// as a string, strings, token ids or lists of them, max_tokens, temperature, top_p, stop, seed, n,
// logprobs, stream) and /v1/chat/completions (messages instead of prompt, max_completion_tokens,
// logprobs as a bool), plus leantune's other sampling parameters (top_k, min_p,
// repetition_penalty, no_repeat_ngram_size, stop_token_ids, ignore_eos) and beam search as vLLM's
// extra parameters name it (use_beam_search with best_of beams, or num_beams; length_penalty,
// early_stopping: true, false or "never"; n hypotheses returned). A bad request throws ApiError with the HTTP status and
// the OpenAI error body's fields.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "leantune/engine.h"
#include "leantune/generator.h"

namespace leantune {
class Tokenizer;
}

namespace lt::serve {

struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error",
           std::string code = {})
      : std::runtime_error(std::move(message)), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
};

// {"error": {"message", "type", "param", "code"}} (null param / code when empty).
std::string error_body(const ApiError& e);

struct ParsedRequest {
  bool chat = false;
  std::string model;
  std::vector<std::vector<int>> prompts;  // encoded prompts (chat: one)
  int max_tokens = -1;                    // -1: until the context is full
  int n = 1;                              // choices per prompt
  bool stream = false, include_usage = false;
  bool logprobs = false;
  std::optional<uint64_t> seed;
  leantune::GenerateOptions options;      // stop strings, sampling (max_new_tokens set per prompt later)
  std::vector<int> stop_token_ids;        // chat: end-of-turn tokens; and the request's stop_token_ids
  leantune::BeamSearchOptions beam;       // use_beam_search (vLLM) / num_beams: num_return = n
};

// A request body as JSON (nlohmann::json), nested at most kMaxRequestDepth deep: a deeper body would
// overflow the stack where the chat path serializes the messages for the model's template.
// ApiError 400 for malformed or too deeply nested JSON.
inline constexpr int kMaxRequestDepth = 64;
nlohmann::json parse_body(const std::string& body);

// Parses a request body. `chat_template` is the resolved template name (chat_format.h).
// ApiError 400 for malformed JSON, a field of the wrong type or out of range, a negative max_tokens.
ParsedRequest parse_request(const std::string& body, bool chat, const leantune::Tokenizer& tok,
                            const std::string& chat_template);

}  // namespace lt::serve
