// A testing aid for training parity with PyTorch / PEFT: one forward + backward of a model (LoRA
// or full fine-tuning) over B rows of T token ids, each row its own document, writing the loss
// and the gradient of every trainable tensor under its PEFT / Hugging Face name, and optionally
// the parameters after one AdamW step.
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
  float adamw_lr = 0;                // > 0: then one AdamW step; out_dir/params.safetensors holds the result
  float weight_decay = 0.01f;        // AdamW's (torch's default), applied to every tensor
  int threads = 0;
};

struct GradCheckResult {
  float loss = 0;
  size_t trainable_tensors = 0;
  uint64_t trainable_params = 0;
};

// Writes out_dir/grads.safetensors, out_dir/loss.txt ("%.9g") and with adamw_lr
// out_dir/params.safetensors. leantune::Error naming the option, file or tensor that is wrong.
GradCheckResult run_grad_check(const GradCheckOptions& options, const std::string& out_dir);

}  // namespace leantune
