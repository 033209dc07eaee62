// generator.h: a Generator is a sequence state over a Model's shared weights, run by the engine's
// generate loop (infer/generate.h) with the sampler options of each call.
#include "leantune/generator.h"

#include "api/access.h"
#include "api/guard.h"

namespace leantune {

struct Generator::Impl {
  std::unique_ptr<lt::LlamaModel> state;
  int threads = 1;
};

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Eos: return "eos";
    case StopReason::StopString: return "stop_string";
    case StopReason::MaxNewTokens: return "max_new_tokens";
    case StopReason::Context: return "context";
    case StopReason::Cancelled: return "cancelled";
  }
  return "max_new_tokens";
}

namespace {

lt::GenerateOptions engine_options(const GenerateOptions& o) {
  lt::GenerateOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.stop = o.stop;
  g.stop_at_eos = o.stop_at_eos;
  g.add_bos = o.add_bos;
  const SamplingOptions& s = o.sampling;
  g.sampler = {s.temperature, s.top_k, s.top_p, s.min_p, s.repetition_penalty, s.no_repeat_ngram_size, s.seed};
  return g;
}

StopReason parse_stop_reason(const std::string& s) {
  for (StopReason r : {StopReason::Eos, StopReason::StopString, StopReason::MaxNewTokens, StopReason::Context,
                       StopReason::Cancelled})
    if (s == stop_reason_name(r)) return r;
  throw Error("internal error: the generate loop stopped for an unknown reason '" + s + "'");
}

GenerateResult public_result(lt::GenerateResult r) {
  GenerateResult p;
  p.prompt_ids = std::move(r.prompt_ids);
  p.output_ids = std::move(r.output_ids);
  p.text = std::move(r.text);
  p.stop_reason = parse_stop_reason(r.stop_reason);
  p.prefill_seconds = r.prefill_seconds;
  p.decode_seconds = r.decode_seconds;
  p.decode_tokens = r.decode_tokens;
  return p;
}

lt::TokenFn engine_callback(const TokenCallback& on_token) {
  return [&on_token](int id, const std::string& text) { return on_token ? on_token(id, text) : true; };
}

}  // namespace

Generator::Generator(const Model& model, const SequenceOptions& options) {
  impl_ = detail::guard([&] {
    const detail::ModelImpl& m = detail::Access::model(model);
    auto g = std::make_unique<Impl>();
    g->threads = m.threads;
    g->state = detail::new_sequence_state(m, options);
    return g;
  });
}

Generator::~Generator() = default;
Generator::Generator(Generator&&) noexcept = default;
Generator& Generator::operator=(Generator&&) noexcept = default;

GenerateResult Generator::generate(const Tokenizer& tok, std::string_view prompt, const GenerateOptions& options,
                                   const TokenCallback& on_token) {
  return detail::guard([&] {
    detail::ThreadScope threads(impl_->threads);
    return public_result(lt::generate(*impl_->state, detail::Access::tokenizer(tok), std::string(prompt),
                                      engine_options(options), engine_callback(on_token)));
  });
}

GenerateResult Generator::generate(const Tokenizer& tok, std::span<const int> prompt_ids,
                                   const GenerateOptions& options, const TokenCallback& on_token) {
  return detail::guard([&] {
    detail::ThreadScope threads(impl_->threads);
    return public_result(lt::generate_ids(*impl_->state, detail::Access::tokenizer(tok),
                                          std::vector<int>(prompt_ids.begin(), prompt_ids.end()),
                                          engine_options(options), engine_callback(on_token)));
  });
}

int Generator::context() const { return impl_->state->context(); }
size_t Generator::memory_bytes() const { return impl_->state->arenas().allocated_total(); }

}  // namespace leantune
