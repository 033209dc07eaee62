// `leantune merge --model BASE --adapter PEFT_DIR --out DIR`: merges a LoRA adapter into the base
// weights (W += s·B·A) and writes a Hugging Face folder: model.safetensors (f32), config.json and
// the tokenizer files copied from the base folder.
#include <fmt/format.h>

#include "commands.h"
#include "leantune/merge.h"

namespace lt::cli {

void add_merge_command(CLI::App& app) {
  struct Args { std::string model, adapter, out; };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("merge", "Merge a PEFT LoRA adapter into its base model; write an HF folder");
  c->add_option("--model,-m", a->model, "base model: HF folder or .safetensors with config.json")->required();
  c->add_option("--adapter", a->adapter, "PEFT adapter folder")->required();
  c->add_option("--out,-o", a->out, "output folder")->required();
  c->callback([a] {
    leantune::merge_adapter(a->model, a->adapter, a->out);
    fmt::print("merged {} into {}: {}\n", a->adapter, a->model, a->out);
  });
}

}  // namespace lt::cli
