// `leantune demo`: the whole job on a fresh machine with nothing downloaded. It writes a
// synthetic corpus (two-digit additions), a byte-level tokenizer and a tiny random Llama as a
// Hugging Face folder, trains the model from scratch on additions (full fine-tuning), then
// LoRA-fine-tunes it on a shifted task (the same sums written in words), printing the memory plans, the progress
// and greedy samples before and after each phase.
#pragma once
#include <string>

namespace lt {

struct DemoOptions {
  std::string dir = "demo-out";  // everything is written here
  int pretrain_steps = 200;      // full training steps on additions
  int lora_steps = 80;           // LoRA steps on the shifted task
  int threads = 0;
  // With a real model and data: LoRA on them instead of the synthetic tasks.
  std::string model, tokenizer, data;
  std::string prompt;            // sample prompt for --model runs
};

void run_demo(const DemoOptions& o);

}  // namespace lt
