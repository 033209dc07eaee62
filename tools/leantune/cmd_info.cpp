// `leantune info`: the machine (CPU features, threads), the model's hyperparameters, and the
// inference memory plan as a table, without allocating the model.
#include <cstdio>
#include <fmt/format.h>

#include "commands.h"
#include "leantune/machine.h"
#include "leantune/model.h"
#include "leantune/plan.h"

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
    const int threads = leantune::resolve_threads(a->threads);
    const leantune::MachineInfo machine = leantune::machine_info();
    fmt::print("cpu: {} (kernels: {}), threads: {}\n", machine.cpu_features, machine.kernels, threads);
    if (a->model.empty()) return;
    const leantune::ModelConfig m = leantune::inspect_model(a->model).config;
    fmt::print("model: {} ({})\n  dim {} layers {} heads {} kv_heads {} head_dim {} ffn {} vocab {} max_seq {}\n"
               "  rope_theta {} rope_scaling {} rope_layout {} norm_eps {} tied {} bias q/k/v {} o {} mlp {}\n",
               a->model, m.arch, m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.head_dim, m.hidden_dim, m.vocab_size,
               m.max_seq_len, m.rope_theta, m.rope_scaling.empty() ? "none" : m.rope_scaling,
               m.rope_layout == leantune::RopeLayout::Halves ? "halves" : "interleaved", m.norm_eps, m.tie_embeddings,
               m.attention_bias, m.o_proj_bias, m.mlp_bias);
    leantune::InferencePlanOptions o;
    o.sequence.context = a->context;
    o.threads = threads;
    o.measure_baseline = false;
    const leantune::InferencePlan p = leantune::plan_inference(a->model, o);
    fmt::print("\nmemory plan (inference, context {}, prefill block {}):\n", p.context, p.prefill_block);
    fmt::print("{}", p.memory.format_table(a->buffers));
  });
}

}  // namespace lt::cli
