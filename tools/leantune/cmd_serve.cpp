// `leantune serve`: one base model and any number of LoRA adapters behind an OpenAI-compatible HTTP
// server (server/http_server.h) over the batching engine (leantune/engine.h). Prints
// "leantune serve: listening on http://HOST:PORT" once it accepts requests; SIGINT / SIGTERM stop it.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fmt/format.h>
#include <thread>

#include "commands.h"
#include "flag_check.h"
#include "leantune/engine.h"
#include "leantune/memory.h"
#include "leantune/model.h"
#include "leantune/tokenizer.h"
#include "server/http_server.h"

namespace lt::cli {

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop = true; }

struct ServeArgs {
  std::string model, tokenizer, name, draft_model;
  std::vector<std::string> adapters;  // NAME=DIR
  lt::serve::ServerOptions server;
  leantune::EngineOptions engine;
  double kv_memory_mib = 0, adapter_memory_mib = 0, max_body_mib = 8;
  int threads = 0;
  bool no_prefix_cache = false;
};

std::string default_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  for (const std::string ext : {".bin", ".safetensors"})
    if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
      name.resize(name.size() - ext.size());
  return name;
}

std::string default_tokenizer(const std::string& model) {
  if (model.size() >= 4 && model.compare(model.size() - 4, 4, ".bin") == 0) return "";
  if (model.size() >= 12 && model.compare(model.size() - 12, 12, ".safetensors") == 0) {
    const size_t slash = model.find_last_of('/');
    return slash == std::string::npos ? "." : model.substr(0, slash);
  }
  return model;
}

void check_serve_flags(const ServeArgs& a) {
  const double inf = INFINITY;
  check_flag_range("--port", a.server.port, 0, 65535, "0 picks a free port");
  check_flag_range("--max-seqs", a.engine.max_seqs, 1, 1 << 16, "requests running at once");
  check_flag_range("--max-queue", a.engine.max_queue, 0, 1 << 24, "requests waiting; beyond it 429");
  check_flag_range("--max-batch-tokens", a.engine.max_batch_tokens, 1, 1 << 20, "tokens per forward step");
  check_flag_range("--context", a.engine.context, 0, 1 << 24, "positions per request; 0: the model's, at most 4096");
  check_flag_range("--block-size", a.engine.block_size, 1, 4096, "positions per KV block");
  check_flag_range("--kv-memory", a.kv_memory_mib, 0, inf, "MiB of KV cache; 0: max-seqs full contexts");
  check_flag_range("--adapter-memory", a.adapter_memory_mib, 0, inf, "MiB of resident adapters; 0: no limit");
  check_flag_range("--max-body", a.max_body_mib, 0.001, 1 << 20, "MiB per request body");
  check_flag_range("--http-threads", a.server.http_threads, 4, 1 << 16, "requests handled at once");
  check_flag_range("--max-lora-rank", a.engine.max_lora_rank, 1, 1 << 16, "largest adapter rank");
}

void run_serve(ServeArgs a) {
  check_serve_flags(a);
  const std::string tok_path = a.tokenizer.empty() ? default_tokenizer(a.model) : a.tokenizer;
  if (tok_path.empty()) fail("{}: a llama2.c checkpoint needs --tokenizer (e.g. tok512.bin)", a.model);
  leantune::Tokenizer tok(tok_path);
  leantune::ModelOptions mo;
  mo.threads = a.threads;
  leantune::Model model(a.model, mo);
  tok.check_fits(model);
  std::unique_ptr<leantune::Model> draft;
  if (!a.draft_model.empty()) {
    draft = std::make_unique<leantune::Model>(a.draft_model, mo);
    a.engine.draft_model = draft.get();
  }
  a.engine.kv_memory_bytes = size_t(a.kv_memory_mib * 1024 * 1024);
  a.engine.adapter_memory_bytes = size_t(a.adapter_memory_mib * 1024 * 1024);
  a.engine.prefix_caching = !a.no_prefix_cache;
  leantune::Engine engine(model, tok, a.engine);
  for (const std::string& spec : a.adapters) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      fail("--adapter: '{}' is not NAME=DIR", leantune::excerpt(spec, 80));
    engine.load_adapter(spec.substr(0, eq), spec.substr(eq + 1));
  }
  a.server.model_name = a.name.empty() ? default_name(a.model) : a.name;
  a.server.max_body_bytes = size_t(a.max_body_mib * 1024 * 1024);
  lt::serve::HttpServer server(engine, tok, a.server);
  const int port = server.bind();
  engine.start();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  std::thread watcher([&server] {
    while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server.stop();
  });
  const leantune::EngineStats s = engine.stats();
  std::fprintf(stderr, "%s", fmt::format("[model {} | context {} | KV pool {} blocks of {} ({}) | {} adapters | "
                                         "weights {}]\n", a.server.model_name, engine.context(), s.kv_blocks,
                                         s.block_size, leantune::format_bytes(s.kv_bytes), engine.adapters().size(),
                                         leantune::format_bytes(model.memory_bytes())).c_str());
  std::printf("leantune serve: listening on http://%s:%d\n", a.server.host.c_str(), port);
  std::fflush(stdout);
  server.run();
  g_stop = true;
  watcher.join();
  engine.stop();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* c = app.add_subcommand("serve", "Serve a model and LoRA adapters over an OpenAI-compatible HTTP API");
  c->add_option("--model,-m", a->model, "HF model folder, model.safetensors, or llama2.c .bin")->required();
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json, its folder, or llama2.c tokenizer .bin");
  c->add_option("--adapter", a->adapters, "NAME=DIR: a PEFT LoRA adapter served as model NAME (repeatable)");
  c->add_option("--served-model-name", a->name, "the base model's id in the API (default: the model's file name)");
  c->add_option("--host", a->server.host, "address to listen on (default 127.0.0.1)");
  c->add_option("--port", a->server.port, "port (default 8080; 0: any free port)");
  c->add_option("--max-seqs", a->engine.max_seqs, "requests running at once (default 64)");
  c->add_option("--max-queue", a->engine.max_queue, "requests waiting at most; beyond it 429 (default 256)");
  c->add_option("--max-batch-tokens", a->engine.max_batch_tokens, "tokens per forward step (default 256)");
  c->add_option("--context", a->engine.context, "positions per request (default: the model's, at most 4096)");
  c->add_option("--block-size", a->engine.block_size, "positions per KV block (default 16)");
  c->add_option("--kv-memory,--memory-budget", a->kv_memory_mib, "MiB of KV cache (default: max-seqs contexts, at most 1 GiB)");
  c->add_option("--adapter-memory", a->adapter_memory_mib, "MiB of resident adapters, LRU beyond (0: no limit)");
  c->add_option("--max-lora-rank", a->engine.max_lora_rank, "largest adapter rank accepted (default 64)");
  c->add_option("--draft-model", a->draft_model, "speculative decoding: a smaller model of the same vocabulary that "
                "proposes tokens for every request (greedy: the same output; sampled: the same distribution, by "
                "rejection sampling)");
  c->add_option("--num-speculative-tokens", a->engine.num_speculative_tokens, "draft tokens per step (default 4)");
  c->add_flag("--no-prefix-cache", a->no_prefix_cache, "do not share KV blocks between prompts");
  c->add_option("--chat-template", a->server.chat_template, "auto (the model's own, else by its tokens) | model | chatml | llama3 | llama2 | plain | FILE.jinja | "
                "a named template of the model (default auto)");
  c->add_option("--max-body", a->max_body_mib, "MiB per request body; larger get 413 (default 8)");
  c->add_option("--http-threads", a->server.http_threads, "requests handled at once (default 128)");
  c->add_option("--threads,-t", a->threads, "compute threads (default: all cores)");
  c->callback([a] { run_serve(*a); });
}

}  // namespace lt::cli
