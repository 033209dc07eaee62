// A testing aid for training parity with PyTorch / PEFT: one forward + backward of a model (LoRA
// or full fine-tuning) over B rows of T token ids, each row its own document, writing the loss
// and the gradient of every trainable tensor under its PEFT / Hugging Face name, and optionally
// the parameters after AdamW steps (LoRA+ groups as the training run's).
//
// Usage:
//   leantune::GradCheckOptions o;
//   o.model = "stories260K.bin";
//   o.batch = 2;
//   o.seq = 16;
//   o.tokens = ids;  // 32 ids
//   leantune::GradCheckResult r = leantune::run_grad_check(o, "out");  // out/grads.safetensors, out/loss.txt
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace leantune {

struct GradCheckOptions {
  std::string model;                 // HF folder, .safetensors in one, or llama2.c .bin
  std::string adapter;               // a PEFT adapter folder whose A and B to start from; "" fresh LoRA
  std::string method = "lora";       // lora | full
  int lora_r = 8;
  float lora_alpha = 16;
  bool use_rslora = false;
  std::vector<std::string> target_modules = {"all-linear"};
  std::string lora_bias = "none";    // none | all | lora_only: which biases LoRA trains (PEFT's bias)
  std::string checkpointing = "none";  // none | every | every:K
  int batch = 1, seq = 0;            // B rows of T tokens
  std::vector<int> tokens;           // B*T ids
  std::vector<int> labels;           // B*T labels (-100: ignored); empty: the next token, the last of a row ignored
  bool use_dora = false;             // DoRA (PEFT's use_dora)
  std::string init_lora_weights = "true";  // true | gaussian | pissa | pissa_niter_K | olora (a fresh LoRA)
  float loraplus_lr_ratio = 0;       // LoRA+: lora_B and 1-D tensors at lr · ratio; 0: off
  uint64_t seed = 0;                 // LoRA initialisation
  float adamw_lr = 0;                // > 0: then AdamW steps; out_dir/params.safetensors holds the result
  int adamw_steps = 1;               // forward + backward + AdamW on the same batch, this many times
  float weight_decay = 0.01f;        // AdamW's (torch's default), on every tensor but biases
  int threads = 0;
};

struct GradCheckResult {
  float loss = 0;
  size_t trainable_tensors = 0;
  uint64_t trainable_params = 0;
};

// Writes out_dir/grads.safetensors (the first pass's gradients), out_dir/loss.txt ("%.9g", the first
// pass's loss), out_dir/init.safetensors (the trainable tensors before any step and, after a PiSSA /
// OLoRA initialisation, the residual base weights under their HF names) and with adamw_lr
// out_dir/params.safetensors (after adamw_steps steps) and out_dir/losses.txt (each pass's loss).
// leantune::Error naming the option, file or tensor that is wrong.
GradCheckResult run_grad_check(const GradCheckOptions& options, const std::string& out_dir);

}  // namespace leantune
