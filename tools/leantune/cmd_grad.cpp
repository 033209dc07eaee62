// `leantune grad`: a test and debugging aid for training parity. Loads a model (and optionally a
// PEFT adapter's A/B), runs one forward + backward over B rows of T token ids (each row its own
// document; labels = next token, last position ignored, or from --labels), and writes the loss
// and every trainable tensor's gradient (PEFT / HF names) to OUT/grads.safetensors + OUT/loss.txt.
#include <cstdio>
#include <fmt/format.h>

#include "commands.h"
#include "flag_check.h"
#include "leantune/grad_check.h"

namespace lt::cli {

static std::vector<int> read_i32(const std::string& path, size_t n) {
  std::vector<int> v(n);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open", path);
  size_t got = std::fread(v.data(), sizeof(int), n, f);
  std::fclose(f);
  if (got != n) fail("{}: expected {} int32 values, read {}", path, n, got);
  return v;
}

void add_grad_command(CLI::App& app) {
  struct Args {
    leantune::GradCheckOptions o;
    std::string tokens, labels, out;
  };
  auto a = std::make_shared<Args>();
  auto& o = a->o;
  auto* c = app.add_subcommand("grad", "One forward+backward; write loss and gradients (testing aid)");
  c->add_option("--model,-m", o.model, "model path")->required();
  c->add_option("--adapter", o.adapter, "PEFT adapter folder whose A/B to start from");
  c->add_option("--tokens", a->tokens, "B*T int32 token ids (raw file)")->required();
  c->add_option("--labels", a->labels, "B*T int32 labels (raw file; default next token)");
  c->add_option("--batch", o.batch, "rows B")->check(CLI::PositiveNumber);
  c->add_option("--seq", o.seq, "tokens per row T")->required()->check(CLI::PositiveNumber);
  c->add_option("--method", o.method, "lora | full");
  c->add_option("--lora-r", o.lora_r, "rank");
  c->add_option("--lora-alpha", o.lora_alpha, "alpha");
  c->add_flag("--rslora", o.use_rslora, "alpha / sqrt(r) scaling");
  c->add_option("--lora-target-modules", o.target_modules, "modules");
  c->add_option("--lora-bias", o.lora_bias, "none | all | lora_only: which biases LoRA trains (PEFT's bias)");
  c->add_option("--checkpointing", o.checkpointing, "none | every | every:K");
  c->add_option("--threads,-t", o.threads, "threads");
  c->add_option("--out,-o", a->out, "output folder")->required();
  c->add_flag("--use-dora", o.use_dora, "DoRA (PEFT's use_dora)");
  c->add_option("--init-lora-weights", o.init_lora_weights, "true | gaussian | pissa | pissa_niter_K | olora");
  c->add_option("--loraplus-lr-ratio", o.loraplus_lr_ratio, "LoRA+: lora_B (and 1-D tensors) at lr x ratio");
  c->add_option("--seed", o.seed, "LoRA initialisation seed");
  c->add_option("--adamw-lr", o.adamw_lr, "then take AdamW steps at this lr and write params.safetensors");
  c->add_option("--adamw-steps", o.adamw_steps, "forward + backward + AdamW this many times on the batch (default 1)");
  c->add_option("--weight-decay", o.weight_decay, "AdamW weight decay (torch default 0.01)");
  c->callback([a] {
    leantune::GradCheckOptions o = a->o;
    const size_t n = size_t(o.batch) * size_t(o.seq);
    o.tokens = read_i32(a->tokens, n);
    if (!a->labels.empty()) o.labels = read_i32(a->labels, n);
    const leantune::GradCheckResult r = leantune::run_grad_check(o, a->out);
    fmt::print("loss {:.6f}, {} trainable tensors, {} parameters\n", r.loss, r.trainable_tensors, r.trainable_params);
  });
}

}  // namespace lt::cli
