// The generate loop (infer/generate.h): prefill, then sample / stop checks / one-token decode
// steps, streaming each token's completed text to the caller.
#include "infer/generate.h"

#include <chrono>

#include "core/error.h"

namespace lt {

using Clock = std::chrono::steady_clock;
static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

size_t find_stop(const std::vector<std::string>& stop, const std::string& text) {
  for (const auto& s : stop) {
    const size_t at = s.empty() ? std::string::npos : text.find(s);
    if (at != std::string::npos) return at;
  }
  return std::string::npos;
}

GenerateResult generate_ids(LlamaModel& model, const Tokenizer& tok, std::vector<int> prompt_ids,
                            const GenerateOptions& opts, const TokenFn& on_token) {
  GenerateResult r;
  const ModelConfig& cfg = model.config();
  r.prompt_ids = std::move(prompt_ids);
  LT_CHECK(!r.prompt_ids.empty(), "the prompt encodes to no tokens; give a prompt or keep BOS");
  LT_CHECK(int(r.prompt_ids.size()) < model.context(), "the prompt has {} tokens; the context holds {}",
           r.prompt_ids.size(), model.context());
  check_tokenizer_fits_model(tok, cfg.vocab_size, "");
  int eos = tok.eos_id() >= 0 ? tok.eos_id() : cfg.eos_token_id;

  Sampler sampler(opts.sampler, cfg.vocab_size);
  std::vector<int> context = r.prompt_ids;
  context.reserve(context.size() + size_t(std::max(opts.max_new_tokens, 0)));
  Tokenizer::StreamDecoder stream(tok);
  stream.prime(r.prompt_ids);

  auto t0 = Clock::now();
  model.forward(r.prompt_ids.data(), int(r.prompt_ids.size()), 0);
  r.prefill_seconds = seconds_since(t0);

  auto t1 = Clock::now();
  int pos = int(r.prompt_ids.size());
  r.stop_reason = "max_new_tokens";
  for (int i = 0; i < opts.max_new_tokens; ++i) {
    int next = sampler.sample(model.logits(), context);
    if (opts.stop_at_eos && next == eos) { r.stop_reason = "eos"; break; }
    r.output_ids.push_back(next);
    context.push_back(next);
    std::string piece = stream.push(next);
    const size_t before = r.text.size();
    r.text += piece;
    if (const size_t at = find_stop(opts.stop, r.text); at != std::string::npos) {
      // emit only up to the stop string
      on_token(next, at > before ? r.text.substr(before, at - before) : std::string());
      r.text.resize(at);
      r.stop_reason = "stop_string";
      break;
    }
    if (!on_token(next, piece)) { r.stop_reason = "cancelled"; break; }
    if (i + 1 == opts.max_new_tokens) break;
    if (pos >= model.context()) { r.stop_reason = "context"; break; }
    model.forward(&next, 1, pos);
    ++pos;
    ++r.decode_tokens;
  }
  if (r.stop_reason != "stop_string") {
    std::string rest = stream.flush();
    r.text += rest;
    if (!rest.empty()) on_token(-1, rest);
  }
  r.decode_seconds = seconds_since(t1);
  return r;
}

GenerateResult generate(LlamaModel& model, const Tokenizer& tok, const std::string& prompt,
                        const GenerateOptions& opts, const TokenFn& on_token) {
  return generate_ids(model, tok, tok.encode(prompt, opts.add_bos), opts, on_token);
}

GenerateResult generate(LlamaModel& model, const Tokenizer& tok, const std::string& prompt,
                        const GenerateOptions& opts, const std::function<void(const std::string&)>& on_text) {
  return generate(model, tok, prompt, opts, TokenFn([&](int, const std::string& text) {
                    if (!text.empty()) on_text(text);
                    return true;
                  }));
}

}  // namespace lt
