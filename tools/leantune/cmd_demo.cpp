// `leantune demo`: the default main job (leantune::run_demo, include/leantune/trainer.h): a real
// LoRA fine-tune judged by its held-out loss and one prompt before and after, or --synthetic.
#include <memory>

#include "commands.h"
#include "flag_check.h"
#include "leantune/trainer.h"

namespace lt::cli {

void add_demo_command(CLI::App& app) {
  auto o = std::make_shared<leantune::DemoOptions>();
  auto* c = app.add_subcommand("demo", "LoRA-tune stories260K on Aesop's fables and show what changed "
                                       "(--synthetic: a tiny Llama trained from scratch)");
  c->add_option("--dir", o->dir, "output folder");
  c->add_flag("--synthetic", o->synthetic, "train a tiny random Llama from scratch on synthetic sums, then LoRA-tune it");
  c->add_option("--pretrain-steps", o->pretrain_steps, "full-training steps (--synthetic)");
  c->add_option("--lora-steps", o->lora_steps, "LoRA steps (default: 40, or 80 with --synthetic)");
  c->add_option("--threads,-t", o->threads, "threads");
  c->add_option("--model", o->model, "another model to fine-tune on --data (default: stories260K from the shared folder)");
  c->add_option("--tokenizer", o->tokenizer, "tokenizer for --model");
  c->add_option("--data", o->data, "text file for --model (default: Aesop's fables)");
  c->add_option("--prompt", o->prompt, "the prompt answered before and after");
  c->callback([o] {
    if (o->synthetic && (!o->model.empty() || !o->data.empty()))
      fail("demo: --synthetic makes its own model and data; leave out --model and --data");
    leantune::run_demo(*o);
  });
}

}  // namespace lt::cli
