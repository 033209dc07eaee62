// `leantune info`: the machine (CPU features, threads), the model's hyperparameters, and the
// inference memory plan as a table, without allocating the model.
#include <cstdio>
#include <fmt/format.h>

#include "commands.h"
#include "core/cpu_features.h"
#include "core/threads.h"
#include "io/model_files.h"
#include "model/llama_model.h"

namespace lt::cli {

void add_info_command(CLI::App& app) {
  struct Args { std::string model; int context = 0; int threads = 0; bool buffers = false; };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("info", "Print the machine, the model and its memory plan");
  c->add_option("--model,-m", a->model, "HF model folder, model.safetensors, or llama2.c .bin");
  c->add_option("--context", a->context, "KV cache positions");
  c->add_option("--threads,-t", a->threads, "threads");
  c->add_flag("--buffers", a->buffers, "list every buffer of the plan");
  c->callback([a] {
    set_num_threads(a->threads);
    fmt::print("cpu: {} (kernels: {}), threads: {}\n", cpu_features_string(), isa_name(cpu_isa()), num_threads());
    if (a->model.empty()) return;
    auto files = load_model_files(a->model);
    const auto& m = files.config;
    validate_config(m, a->model);
    fmt::print("model: {} ({})\n  dim {} layers {} heads {} kv_heads {} head_dim {} ffn {} vocab {} max_seq {}\n"
               "  rope_theta {} rope_scaling {} rope_layout {} norm_eps {} tied {} bias q/k/v {} o {} mlp {}\n",
               a->model, m.arch, m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.head_dim, m.hidden_dim, m.vocab_size,
               m.max_seq_len, m.rope_theta, m.rope_scaling.type.empty() ? "none" : m.rope_scaling.type,
               m.rope_layout == RopeLayout::Halves ? "halves" : "interleaved", m.norm_eps, m.tie_embeddings,
               m.attention_bias, m.o_proj_bias, m.mlp_bias);
    InferenceOptions io;
    io.context = a->context;
    resolve_inference_options(m, io);
    fmt::print("\nmemory plan (inference, context {}, prefill block {}):\n", io.context, io.prefill_block);
    fmt::print("{}", plan_inference(m, io).format_table(a->buffers));
  });
}

}  // namespace lt::cli
