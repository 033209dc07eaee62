// `leantune generate`: load a model and tokenizer, stream a completion of the prompt to stdout,
// then print prefill and decode speed to stderr. With --chat the prompt is a user message,
// formatted by the model's chat template (or --chat-template), and only the reply is printed.
// With --num-beams K: beam search through the batch engine (transformers' num_beams), the best
// hypothesis printed (--num-return-sequences: that many, one per line).
#include <chrono>
#include <cmath>
#include <memory>
#include <cstdio>
#include <span>
#include <string>
#include <vector>
#include <fmt/format.h>

#include "commands.h"
#include "flag_check.h"
#include "leantune/engine.h"
#include "leantune/files.h"
#include "leantune/generator.h"
#include "leantune/memory.h"
#include "leantune/model.h"
#include "leantune/tokenizer.h"

namespace lt::cli {

namespace {
struct GenerateArgs {
  std::string model, tokenizer, prompt, adapter, system, chat_template, prompt_ids, ids_out, draft_model;
  int num_speculative = 4;
  bool chat = false;
  int threads = 0, context = 0, max_new_tokens = 256;
  bool no_bos = false, ignore_eos = false, reference = false, llama_cpp = false, quiet = false;
  std::vector<std::string> stop;
  std::string quantize, weights, kv_cache;
  bool double_quant = false;
  leantune::SamplingOptions s;
  leantune::BeamSearchOptions beam;
};

std::string default_tokenizer(const std::string& model) {
  // HF folder: the folder itself; a GGUF: the file (its metadata holds the tokenizer); llama2.c: no
  // default (must be given)
  auto slash = model.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : model.substr(0, slash);
  if (model.size() >= 4 && model.compare(model.size() - 4, 4, ".bin") == 0) return "";
  return model.size() >= 12 && model.compare(model.size() - 12, 12, ".safetensors") == 0 ? dir : model;
}

// The ranges of the numeric flags; --context against the model's max_position_embeddings.
void check_generate_flags(const GenerateArgs& a) {
  const double inf = INFINITY;
  check_flag_range("--max-new-tokens", a.max_new_tokens, 0, 1 << 30, "tokens to generate at most");
  check_flag_range("--temperature", a.s.temperature, 0, 1e6, "0 is greedy");
  check_flag_range("--top-k", a.s.top_k, 0, inf, "keep the k most likely tokens; 0 is off");
  check_flag_range("--top-p", a.s.top_p, 0, 1, "the nucleus probability mass; 1 is off");
  check_flag_range("--min-p", a.s.min_p, 0, 1, "a fraction of the top probability; 0 is off");
  if (!(a.s.repetition_penalty > 0 && a.s.repetition_penalty <= 1e6))
    fail("--repetition-penalty: {} is out of range: it must be > 0 and <= 1e6 (1 is off)", a.s.repetition_penalty);
  check_flag_range("--no-repeat-ngram-size", a.s.no_repeat_ngram_size, 0, 1 << 20, "n-gram length; 0 is off");
  check_flag_range("--context", a.context, 0, 1 << 30, "KV cache positions; 0: the model's, at most 4096");
  if (a.context > 0) {
    // dynamic (NTK) RoPE exists to run past max_position_embeddings: its frequencies grow with the length
    const auto mc = leantune::read_model_config(a.model);
    if (a.context > mc.max_seq_len && mc.rope_scaling != "dynamic")
      fail("--context: {} is more than the model's context of {} positions (max_position_embeddings of {}); use "
           "--context {} or less", a.context, mc.max_seq_len, a.model, mc.max_seq_len);
  }
  if (!a.prompt_ids.empty() && !a.prompt.empty()) fail("--prompt-ids: give either --prompt or --prompt-ids, not both");
}

// Beam search or speculative decoding, over the engine. Beam search prints the num_return best
// hypotheses (one per line; --ids-out: one line of ids each); speculative decoding streams its one
// output and reports the draft's acceptance rate.
void run_beam_search(const GenerateArgs& a, const leantune::Model& model, const leantune::Tokenizer& tok,
                     std::vector<int> prompt, const leantune::GenerateOptions& g) {
  leantune::EngineOptions eo;
  eo.max_seqs = a.beam.num_beams;
  eo.context = a.context;
  eo.prefix_caching = false;
  std::unique_ptr<leantune::Model> draft;
  if (!a.draft_model.empty()) {
    leantune::ModelOptions mo;
    mo.threads = a.threads;
    draft = std::make_unique<leantune::Model>(a.draft_model, mo);
    eo.draft_model = draft.get();
    eo.num_speculative_tokens = a.num_speculative;
  }
  leantune::Engine engine(model, tok, eo);
  const auto t0 = std::chrono::steady_clock::now();
  leantune::EngineRequest r;
  r.prompt_ids = std::move(prompt);
  r.options = g;
  r.beam = a.beam;
  leantune::EngineEvent last;
  std::string ids_text;
  engine.submit(std::move(r), [&](const leantune::EngineEvent& e) {
    if (e.token >= 0) ids_text += (ids_text.empty() ? "" : ",") + std::to_string(e.token);
    if (!e.text.empty()) {
      std::fwrite(e.text.data(), 1, e.text.size(), stdout);
      std::fflush(stdout);
    }
    if (e.finished) last = e;
  });
  while (engine.step()) {
  }
  if (!last.error.empty()) fail("generate: {}", last.error);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (last.beams.empty()) {  // speculative decoding: one output, streamed by the callback
    std::fputc('\n', stdout);
    const leantune::EngineStats st = engine.stats();
    if (!a.ids_out.empty()) leantune::write_text_file(a.ids_out, ids_text + "\n");
    if (!a.quiet)
      std::fprintf(stderr, "%s", fmt::format("[{} tokens in {:.3f} s: {:.1f} tok/s | speculative: {} of {} draft tokens "
                                             "accepted ({:.1f}%) | stop: {}]\n", last.completion_tokens, secs,
                                             last.completion_tokens / std::max(secs, 1e-9), st.spec_accepted,
                                             st.spec_proposed, 100.0 * double(st.spec_accepted) /
                                             double(std::max<uint64_t>(st.spec_proposed, 1)),
                                             leantune::stop_reason_name(last.stop_reason)).c_str());
    return;
  }
  ids_text.clear();
  for (const leantune::BeamResult& b : last.beams) {
    std::fwrite(b.text.data(), 1, b.text.size(), stdout);
    std::fputc('\n', stdout);
    std::string line;
    for (int id : b.tokens) line += (line.empty() ? "" : ",") + std::to_string(id);
    ids_text += line + "\n";
    if (!a.quiet)
      std::fprintf(stderr, "%s", fmt::format("[beam score {:.6f} | {} tokens | stop: {}]\n", b.score, b.tokens.size(),
                                             leantune::stop_reason_name(b.stop_reason)).c_str());
  }
  if (!a.ids_out.empty()) leantune::write_text_file(a.ids_out, ids_text);
}

void run_generate(const GenerateArgs& a) {
  check_generate_flags(a);
  std::string tok_path = a.tokenizer.empty() ? default_tokenizer(a.model) : a.tokenizer;
  if (tok_path.empty()) fail("{}: a llama2.c checkpoint needs --tokenizer (e.g. tok512.bin)", a.model);
  leantune::Tokenizer tok(tok_path);
  leantune::ModelOptions mo;
  mo.threads = a.threads;
  mo.adapter = a.adapter;
  mo.quantization = leantune::parse_quantization(a.quantize);
  mo.double_quant = a.double_quant;
  if (!a.weights.empty()) mo.weights = leantune::parse_weights(a.weights);
  if (a.kv_cache == "bf16") mo.kv_cache = leantune::KvCache::BF16;
  else if (!a.kv_cache.empty() && a.kv_cache != "f32") fail("--kv-cache '{}': expected f32 or bf16", a.kv_cache);
  if (a.reference && a.llama_cpp)
    fail("generate: --reference and --llama-cpp-numerics choose different kernels; give one");
  if (a.llama_cpp && (a.beam.num_beams > 1 || !a.draft_model.empty()))
    fail("generate: --llama-cpp-numerics runs one sequence on its own; it does not go with --num-beams / --draft-model");
  mo.kernels = a.reference   ? leantune::Kernels::Reference
               : a.llama_cpp ? leantune::Kernels::LlamaCpp
                             : leantune::Kernels::Fast;
  leantune::Model model(a.model, mo);
  tok.check_fits(model);
  leantune::Generator gen(model, {.context = a.context});
  leantune::GenerateOptions g;
  g.max_new_tokens = a.max_new_tokens;
  g.stop = a.stop;
  g.stop_at_eos = !a.ignore_eos;
  g.add_bos = !a.no_bos;
  g.sampling = a.s;
  if (a.beam.num_beams > 1 || !a.draft_model.empty()) {
    std::vector<int> ids = parse_ids(a.prompt_ids, "--prompt-ids");
    if (a.chat) fail("--num-beams / --draft-model: not with --chat; give --prompt or --prompt-ids");
    if (ids.empty()) {
      ids = tok.encode(a.prompt, g.add_bos);
      if (a.beam.num_beams <= 1) std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);  // as plain generate
    }
    return run_beam_search(a, model, tok, std::move(ids), g);
  }
  auto print = [](int, std::string_view piece) {
    if (!piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  leantune::GenerateResult r;
  const std::vector<int> ids = parse_ids(a.prompt_ids, "--prompt-ids");
  if (a.chat) {  // the reply to one user message, formatted as the model's template says
    std::vector<leantune::ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", a.prompt});
    leantune::ChatOptions co;
    co.chat_template = a.chat_template;
    r = gen.generate(tok, tok.encode_chat(msgs, co), g, print);
  } else if (!ids.empty()) {
    r = gen.generate(tok, std::span<const int>(ids), g, print);
  } else {
    std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);  // the prompt, then the continuation
    r = gen.generate(tok, a.prompt, g, print);
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!a.ids_out.empty()) {
    std::string line;
    for (int id : r.output_ids) line += (line.empty() ? "" : ",") + std::to_string(id);
    leantune::write_text_file(a.ids_out, line + "\n");
  }
  if (!a.quiet) {
    size_t np = r.prompt_ids.size();
    std::fprintf(stderr, "%s", fmt::format(
        "[prefill {} tokens: {:.1f} tok/s | decode {} tokens: {:.1f} tok/s | stop: {} | threads {} | {} | "
        "memory: arenas {}, peak RSS {}]\n", np,
        np / std::max(r.prefill_seconds, 1e-9), r.decode_tokens,
        r.decode_tokens / std::max(r.decode_seconds, 1e-9), leantune::stop_reason_name(r.stop_reason),
        model.threads(), model.kernels_name(), leantune::format_bytes(model.memory_bytes() + gen.memory_bytes()),
        leantune::format_bytes(leantune::peak_rss_bytes())).c_str());
  }
}
}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* c = app.add_subcommand("generate", "Generate text from a prompt");
  c->add_option("--model,-m", a->model, "HF model folder, model.safetensors, a llama GGUF, llama2.c .bin, or an HF "
                "repo id in the local cache (org/name[@revision])")->required();
  c->add_option("--adapter", a->adapter, "PEFT LoRA adapter folder, merged into the weights");
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json, its folder, llama2.c tokenizer .bin, or a GGUF "
                "(default: the model's folder; a GGUF model's own)");
  c->add_option("--prompt,-p", a->prompt, "prompt text (default: empty, BOS only); with --chat, the user message");
  c->add_flag("--chat", a->chat, "format the prompt as a user message with the model's chat template; print the reply");
  c->add_option("--system", a->system, "with --chat: a system message first");
  c->add_option("--chat-template", a->chat_template,
                "with --chat: chatml | llama3 | llama2 | alpaca | FILE.jinja | one of the model's named templates");
  c->add_option("--prompt-ids", a->prompt_ids, "the prompt as comma-separated token ids instead of text (no BOS added)");
  c->add_option("--ids-out", a->ids_out, "also write the generated token ids, comma-separated, to this file");
  c->add_option("--max-new-tokens,-n", a->max_new_tokens, "tokens to generate at most");
  c->add_option("--temperature", a->s.temperature, "0 = greedy");
  c->add_option("--top-k", a->s.top_k, "keep the k most likely tokens (0 = off)");
  c->add_option("--top-p", a->s.top_p, "nucleus sampling mass (1 = off)");
  c->add_option("--min-p", a->s.min_p, "drop tokens below min_p * max prob (0 = off)");
  c->add_option("--repetition-penalty", a->s.repetition_penalty, "HF repetition penalty (1 = off)");
  c->add_option("--no-repeat-ngram-size", a->s.no_repeat_ngram_size, "ban repeated n-grams (0 = off)");
  c->add_option("--seed", a->s.seed, "sampling seed");
  c->add_option("--draft-model", a->draft_model, "speculative decoding: a small model of the same vocabulary "
                "proposing tokens the model checks in one pass; greedy: the greedy output; sampled: the same "
                "distribution (rejection sampling)");
  c->add_option("--num-speculative-tokens", a->num_speculative, "draft tokens per step (default 4)");
  c->add_option("--num-beams", a->beam.num_beams, "beam search with this many beams (1 = off; transformers' num_beams)");
  c->add_option("--num-return-sequences", a->beam.num_return, "beam search: hypotheses printed, best first");
  c->add_option("--length-penalty", a->beam.length_penalty, "beam search: score = logprob sum / length^this");
  c->add_option("--early-stopping", a->beam.early_stopping, "beam search: false (HF's heuristic) | true | never");
  c->add_option("--stop", a->stop, "stop string (repeatable)");
  c->add_option("--context", a->context, "KV cache positions (default: model max, at most 4096)");
  c->add_option("--quantize", a->quantize, "quantize the linear weights on load: nf4 | fp4 | int8 (LLM.int8)");
  c->add_flag("--double-quant", a->double_quant, "nf4 / fp4: double quantization of the block scales");
  c->add_option("--weights", a->weights, "inference weights (and lm_head) in memory: f32 | bf16 | f16 | int8 | q4 | nf4 | q8_0 "
                "| q4_0 (16-bit as stored; q4 = llama.cpp's q4_0 grid with f32 scales; q8_0 / q4_0 = llama.cpp's "
                "formats and products, a GGUF's as stored)");
  c->add_option("--kv-cache", a->kv_cache, "the KV cache's element type: f32 (default) | bf16 (half the bytes)");
  c->add_option("--threads,-t", a->threads, "threads (default: all cores)");
  c->add_flag("--no-bos", a->no_bos, "do not add BOS to the prompt");
  c->add_flag("--ignore-eos", a->ignore_eos, "keep generating past EOS");
  c->add_flag("--reference", a->reference, "use the scalar reference kernels");
  c->add_flag("--llama-cpp-numerics", a->llama_cpp, "compute as llama.cpp's CPU backend does, op for op: its tokens "
              "bit for bit on q8_0 / q4_0 weights (--weights q8_0 | q4_0; the prompt in batches of 512 tokens, "
              "llama.cpp's default; slow)");
  c->add_flag("--quiet,-q", a->quiet, "do not print speed");
  c->callback([a] {
    if (!a->chat && (!a->system.empty() || !a->chat_template.empty()))
      fail("generate: --system and --chat-template apply to --chat; add --chat");
    run_generate(*a);
  });
}

}  // namespace lt::cli
