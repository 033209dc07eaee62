// `leantune export --gguf OUT.gguf --type f32|f16|bf16|q8_0|q4_0 --model M [--adapter A]
// [--tokenizer T]`: writes the model (with a PEFT LoRA adapter merged in first) and its tokenizer
// as a llama-architecture GGUF that llama.cpp loads. `--adapter A` without --model writes the
// adapter alone as a llama.cpp LoRA adapter GGUF (base config from --base or the adapter's
// base_model_name_or_path).
#include <filesystem>
#include <fmt/format.h>

#include "commands.h"
#include "core/error.h"
#include "model/gguf_export.h"
#include "io/model_files.h"
#include "io/peft_adapter.h"
#include "kernels/ops.h"
#include "model/llama_model.h"

namespace fs = std::filesystem;

namespace lt::cli {

namespace {

struct ExportArgs {
  std::string gguf, type = "f16", model, adapter, tokenizer, name, base;
};

// HF folder (or a .safetensors inside one): the folder's tokenizer.json; GGUF: its own; llama2.c: none.
std::string default_tokenizer(const std::string& model) {
  if (is_gguf_model_path(model)) return model;  // a GGUF model carries its tokenizer
  const fs::path p(model);
  const fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  return fs::exists(dir / "tokenizer.json") ? dir.string() : std::string();
}

void run_export_lora(const ExportArgs& a, gguf::TensorType type) {
  const LoadedAdapter ad = load_peft_adapter(a.adapter);
  const std::string base = a.base.empty() ? ad.base_model : a.base;
  LT_CHECK(!base.empty() && fs::exists(base), "{}: the adapter's base model '{}' is not a local path; pass --base "
           "with the base model (its config gives the shapes and head counts)", a.adapter, base);
  const ModelConfig c = load_model_config(base);
  const std::string name = a.name.empty() ? fs::path(a.adapter).filename().string() : a.name;
  const size_t n = gguf::write_lora_gguf(a.gguf, c, ad, a.adapter, type, name);
  fmt::print("exported LoRA adapter {} (r {}, scaling {}) as {} ({} tensors): {}\n", a.adapter, ad.config.r,
             ad.config.scaling(), a.type, n, a.gguf);
}

void run_export(const ExportArgs& a) {
  const gguf::TensorType type = gguf::parse_type(a.type);
  LT_CHECK(!a.model.empty() || !a.adapter.empty(), "export needs --model (a model GGUF) or --adapter alone (a "
           "LoRA adapter GGUF)");
  if (a.model.empty()) return run_export_lora(a, type);
  const std::string tok = a.tokenizer.empty() ? default_tokenizer(a.model) : a.tokenizer;
  LT_CHECK(!tok.empty(), "{}: no tokenizer.json beside the model; pass --tokenizer (tokenizer.json, its folder, "
           "or a llama2.c tokenizer .bin such as tok512.bin)", a.model);
  auto files = load_model_files(a.model);
  LT_CHECK(files.config.quantization.empty(), "{}: the model is stored quantized ({}); export its f32/16-bit "
           "source instead", a.model, files.config.quantization);
  const gguf::Vocab vocab = gguf::read_vocab(tok, files.config.vocab_size);
  InferenceOptions io;
  io.context = 1;
  LlamaModel model(files.config, files.tensors, io, ops_cpu());
  if (!a.adapter.empty()) model.merge_adapter(a.adapter);
  const std::string name = a.name.empty() ? fs::path(a.model).filename().replace_extension().string() : a.name;
  const size_t n = gguf::write_model_gguf(
      a.gguf, model.config(), [&](const std::string& t) { return model.arenas().get_as<const float>(t); }, vocab,
      type, name);
  fmt::print("exported {}{} as {} ({} tensors, tokenizer {} from {}): {}\n", a.model,
             a.adapter.empty() ? "" : " + " + a.adapter, a.type, n, vocab.model, tok, a.gguf);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  auto* c = app.add_subcommand("export", "Write a model (and a merged LoRA adapter) as a llama.cpp GGUF file");
  c->add_option("--gguf", a->gguf, "output .gguf file")->required();
  c->add_option("--type", a->type, "tensor type of the linear weights: f32, f16, bf16, q8_0, q4_0 (default f16)");
  c->add_option("--model,-m", a->model, "model: HF folder, .safetensors in one, or llama2.c .bin "
                "(omitted with --adapter: write a LoRA adapter GGUF)");
  c->add_option("--adapter", a->adapter, "PEFT LoRA adapter folder: merged into --model first, or alone written as a LoRA adapter GGUF");
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json, its folder, or llama2.c tokenizer .bin "
                "(default: the model's folder)");
  c->add_option("--base", a->base, "with --adapter alone: the base model whose config the adapter fits "
                "(default: adapter_config.json's base_model_name_or_path)");
  c->add_option("--name", a->name, "general.name (default: the model's file or folder name)");
  c->callback([a] { run_export(*a); });
}

}  // namespace lt::cli
