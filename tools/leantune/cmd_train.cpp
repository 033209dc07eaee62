// `leantune train [CONFIG.yaml] [--key value ...]`: fine-tune (full or LoRA) through leantune::Trainer
// (include/leantune/trainer.h). Every config key can also be given as a flag (--lora-r 16 or
// --lora_r=16); flags override the file.
#include <fmt/format.h>

#include "commands.h"
#include "leantune/trainer.h"

namespace lt::cli {

void add_train_command(CLI::App& app) {
  auto* c = app.add_subcommand("train", "Fine-tune a model (full or LoRA) from a YAML config and/or flags");
  c->prefix_command();  // arguments are parsed here: [CONFIG.yaml] then --key value pairs
  c->footer(
      "Keys (YAML or --flags): base_model tokenizer datasets eval_dataset val_set_size chat_template method "
      "lora_r lora_alpha lora_dropout lora_target_modules use_rslora lora_bias layers_to_transform micro_batch_size "
      "gradient_accumulation_steps sequence_len sample_packing learning_rate lr_scheduler warmup_steps "
      "weight_decay max_grad_norm num_epochs max_steps gradient_checkpointing unfreeze_schedule eval_steps "
      "eval_batches save_steps logging_steps output_dir seed threads resume overwrite_output_dir skip_bad_lines "
      "min_blank_lines. A run into an output_dir holding a previous run's outputs refuses unless given --resume auto "
      "(continue it) or --overwrite-output-dir (replace them). "
      "--profile FILE writes a Chrome trace of every op and prints a per-op table.");
  c->callback([c] {
    // --profile FILE: every op of the run timed; Chrome trace to FILE and a per-op table at the end
    std::vector<std::string> args, rest = c->remaining();
    std::string profile;
    for (size_t i = 0; i < rest.size(); ++i) {
      if (rest[i] == "--profile" && i + 1 < rest.size()) profile = rest[++i];
      else if (rest[i].rfind("--profile=", 0) == 0) profile = rest[i].substr(10);
      else args.push_back(rest[i]);
    }
    leantune::TrainerConfig cfg = leantune::TrainerConfig::from_args(args);
    cfg.profile_trace = profile;
    const leantune::TrainSummary s = leantune::Trainer(cfg).run();
    if (!profile.empty())
      fmt::print("profile (every op of the run, self time):\n{}wrote the Chrome trace {} (open in ui.perfetto.dev)\n",
                 s.profile_table, profile);
  });
}

}  // namespace lt::cli
