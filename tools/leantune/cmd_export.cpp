// `leantune export --gguf OUT.gguf --type f32|f16|bf16|q8_0|q4_0 --model M [--adapter A]
// [--tokenizer T]`: writes the model (with a PEFT LoRA adapter merged in first) and its tokenizer
// as a llama-architecture GGUF that llama.cpp loads. `--adapter A` without --model writes the
// adapter alone as a llama.cpp LoRA adapter GGUF (base config from --base or the adapter's
// base_model_name_or_path).
#include <fmt/format.h>

#include "commands.h"
#include "leantune/gguf.h"

namespace lt::cli {

namespace {

struct ExportArgs {
  std::string gguf, type = "f16";
  leantune::GgufExportOptions o;
};

void run_export(const ExportArgs& a) {
  leantune::GgufExportOptions o = a.o;
  o.type = leantune::parse_gguf_type(a.type);
  const leantune::GgufExportResult r = leantune::export_gguf(a.gguf, o);
  if (r.adapter_only)
    fmt::print("exported LoRA adapter {} (r {}, scaling {}) as {} ({} tensors): {}\n", o.adapter, r.lora_r,
               r.lora_scaling, a.type, r.tensors, a.gguf);
  else
    fmt::print("exported {}{} as {} ({} tensors, tokenizer {} from {}): {}\n", o.model,
               o.adapter.empty() ? "" : " + " + o.adapter, a.type, r.tensors, r.tokenizer_model, r.tokenizer_path,
               a.gguf);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  auto* c = app.add_subcommand("export", "Write a model (and a merged LoRA adapter) as a llama.cpp GGUF file");
  c->add_option("--gguf", a->gguf, "output .gguf file")->required();
  c->add_option("--type", a->type, "tensor type of the linear weights: f32, f16, bf16, q8_0, q4_0 (default f16)");
  c->add_option("--model,-m", a->o.model, "model: HF folder, .safetensors in one, a llama GGUF, or llama2.c .bin "
                "(omitted with --adapter: write a LoRA adapter GGUF)");
  c->add_option("--adapter", a->o.adapter, "PEFT LoRA adapter folder: merged into --model first, or alone written as a LoRA adapter GGUF");
  c->add_option("--tokenizer", a->o.tokenizer, "tokenizer.json, its folder, llama2.c tokenizer .bin, or a GGUF "
                "(default: the model's folder; a GGUF model's own)");
  c->add_option("--base", a->o.base, "with --adapter alone: the base model whose config the adapter fits "
                "(default: adapter_config.json's base_model_name_or_path)");
  c->add_option("--name", a->o.name, "general.name (default: the model's file or folder name)");
  c->callback([a] { run_export(*a); });
}

}  // namespace lt::cli
