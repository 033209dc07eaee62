// `leantune train [CONFIG.yaml] [--key value ...]`: fine-tune (full or LoRA). Every config key can
// also be given as a flag (--lora-r 16 or --lora_r=16); flags override the file.
#include <fmt/format.h>

#include "commands.h"
#include "core/error.h"
#include "train/trainer.h"

namespace lt::cli {

void add_train_command(CLI::App& app) {
  struct Args { std::string config; };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("train", "Fine-tune a model (full or LoRA) from a YAML config and/or flags");
  c->prefix_command();  // arguments are parsed here: [CONFIG.yaml] then --key value pairs
  c->footer(
      "Keys (YAML or --flags): base_model tokenizer datasets eval_dataset val_set_size chat_template method "
      "lora_r lora_alpha lora_dropout lora_target_modules use_rslora lora_bias layers_to_transform micro_batch_size "
      "gradient_accumulation_steps sequence_len sample_packing learning_rate lr_scheduler warmup_steps "
      "weight_decay max_grad_norm num_epochs max_steps gradient_checkpointing unfreeze_schedule eval_steps "
      "eval_batches save_steps logging_steps output_dir seed threads resume skip_bad_lines min_blank_lines");
  c->callback([a, c] {
    auto extras = c->remaining();
    size_t first = 0;
    if (!extras.empty() && extras[0].rfind("--", 0) != 0) a->config = extras[first++];
    TrainConfig cfg = load_train_config(a->config);
    for (size_t i = first; i < extras.size(); ++i) {
      std::string arg = extras[i];
      LT_CHECK(arg.rfind("--", 0) == 0, "unexpected argument '{}' (keys are given as --key value)", arg);
      arg = arg.substr(2);
      std::string key = arg, value;
      auto eq = arg.find('=');
      if (eq != std::string::npos) {
        key = arg.substr(0, eq);
        value = arg.substr(eq + 1);
      } else {
        LT_CHECK(i + 1 < extras.size(), "--{} needs a value", key);
        value = extras[++i];
      }
      for (auto& ch : key)
        if (ch == '-') ch = '_';
      set_train_config_key(cfg, key, value);
    }
    run_training(cfg);
  });
}

}  // namespace lt::cli
