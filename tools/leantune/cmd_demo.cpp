// `leantune demo`: the default main job (leantune::run_demo, include/leantune/trainer.h).
#include <memory>

#include "commands.h"
#include "leantune/trainer.h"

namespace lt::cli {

void add_demo_command(CLI::App& app) {
  auto o = std::make_shared<leantune::DemoOptions>();
  auto* c = app.add_subcommand("demo", "Train a tiny Llama from scratch on a synthetic task, then LoRA-tune it");
  c->add_option("--dir", o->dir, "output folder");
  c->add_option("--pretrain-steps", o->pretrain_steps, "full-training steps (synthetic run)");
  c->add_option("--lora-steps", o->lora_steps, "LoRA steps");
  c->add_option("--threads,-t", o->threads, "threads");
  c->add_option("--model", o->model, "a real model: LoRA on --data instead of the synthetic tasks");
  c->add_option("--tokenizer", o->tokenizer, "tokenizer for --model");
  c->add_option("--data", o->data, "dataset for --model");
  c->add_option("--prompt", o->prompt, "sample prompt for --model");
  c->callback([o] { leantune::run_demo(*o); });
}

}  // namespace lt::cli
