// `leantune demo`: the first run on a fresh machine. By default a real fine-tune a person can judge
// at a glance: stories260K (a 260K-parameter Llama trained on children's stories) LoRA-tuned on
// Aesop's fables, found in LEANTUNE_SHARED, ./shared or ../shared — the memory plan, the progress
// bar, the held-out loss before and after, one prompt answered before and after, and the path of
// report.html. --model/--data run the same job on another model and text. --synthetic needs no
// files: it writes a synthetic corpus (two-digit additions), a byte-level tokenizer and a tiny
// random Llama, trains it from scratch on additions (full fine-tuning), then LoRA-tunes it on a
// shifted task (the same sums in words), printing the plans, progress and greedy samples.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace lt {

struct DemoOptions {
  std::string dir = "demo-out";  // everything is written here
  bool synthetic = false;        // the synthetic job (no files needed) instead of the fine-tune
  int pretrain_steps = 200;      // synthetic: full training steps on additions
  int lora_steps = 0;            // LoRA steps; 0: 40 for the fine-tune, 80 for the synthetic job
  int threads = 0;
  // The fine-tune's model, tokenizer and data ("": stories260K and Aesop's fables from the shared folder).
  std::string model, tokenizer, data;
  std::string prompt;            // the fine-tune's sample prompt ("": one that suits the data)
};

void run_demo(const DemoOptions& o);
void run_synthetic_demo(const DemoOptions& o);

// Shared by both jobs: a training config over one text file, 5% held out, writing to `out`
// (replacing an earlier demo's run there).
TrainConfig demo_train_config(const std::string& model, const std::string& tokenizer, const std::string& data,
                              const std::filesystem::path& out, int threads);
// Greedy continuations of each prompt (the prompt not included), the adapter merged when given.
std::vector<std::string> demo_samples(const std::string& model, const std::string& tokenizer, const std::string& adapter,
                                      const std::vector<std::string>& prompts, int max_new,
                                      const std::vector<std::string>& stop, float repetition_penalty);

}  // namespace lt
