// TrainConfig: everything `leantune train` reads, with keys that read like Axolotl / torchtune
// configs. Loaded from a YAML file, then overridden by `--key value` flags (dashes or
// underscores); unknown keys are errors naming the key and the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/lora_config.h"
#include "core/train_types.h"
#include "train/adaptive_rank.h"
#include "train/train_model.h"

namespace lt {

struct DatasetSpec {
  std::string path;            // .txt file / folder of .txt, or .jsonl
  int min_blank_lines = 1;     // plain text: blank lines that separate documents
  std::string doc_separator = "blank_line";  // blank_line | file
};

struct TrainConfig {
  std::string base_model;                 // HF folder, .safetensors, or llama2.c .bin
  std::string tokenizer;                  // default: the model folder
  std::vector<DatasetSpec> datasets;
  int min_blank_lines = 1;                // top-level min_blank_lines: every dataset without its own
  std::string eval_dataset;               // separate eval set (else val_set_size of datasets)
  double val_set_size = 0.1;              // fraction held out for evaluation
  std::string chat_template;  // "" / auto (the model's, else chatml) | chatml | llama3 | llama2 | alpaca | x.jinja | a model template name
  bool skip_bad_lines = false;
  Method method = Method::Lora;           // lora | full (qlora: lora)
  LoraConfig lora;                        // lora_r, lora_alpha, lora_dropout, lora_target_modules, use_dora,
                                          // init_lora_weights (lora_init), ...
  double loraplus_lr_ratio = 0;           // LoRA+: lr of lora_B (and 1-D tensors) = learning_rate · ratio; 0: off
  bool freeze_embeddings = false, freeze_lm_head = false;
  int micro_batch_size = 4;
  int gradient_accumulation_steps = 1;
  int sequence_len = 256;
  bool sample_packing = true;
  double learning_rate = 2e-4;
  std::string lr_scheduler = "cosine";    // constant | linear | cosine
  int warmup_steps = 0;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;             // 0 = no clipping
  int num_epochs = 1;
  int max_steps = 0;                      // > 0: stop after this many optimizer steps; 0: num_epochs decides
                                          // (negative values are errors)
  std::string gradient_checkpointing = "none";  // none | every | every:K
  std::string unfreeze_schedule;          // "step:first_layer:lr_factor,..." (full fine-tuning)
  int eval_steps = 0;                     // evaluate every N steps (0: only before and after)
  int eval_batches = 0;                   // cap on eval batches (0: all)
  int save_steps = 0;                     // checkpoint every N steps (0: only at the end)
  int logging_steps = 1;
  std::string output_dir = "out";
  uint64_t seed = 42;
  int threads = 0;
  std::string resume;                     // checkpoint folder to resume from ("auto": output_dir/LATEST)
  bool overwrite_output_dir = false;      // a run without resume into a previous run's output_dir replaces
                                          // its outputs (else it refuses; train/output_dir.h)
  std::string memory_budget;              // e.g. "6GiB": stop before allocating when the plan exceeds it
  bool auto_fit = false;                  // auto: with memory_budget, pick micro-batch and checkpointing
  Quantization quantization;              // none | nf4 | fp4 | int8: frozen linear weights of a LoRA run (QLoRA)
  bool double_quant = false;              // nf4 / fp4: the absmax values quantized to 8 bits
  int quant_blocksize = 64;               // nf4 / fp4 block size: a power of two in [64, 4096]
  double int8_threshold = 6.0;            // LLM.int8 outlier threshold (0: no outlier columns)
  Precision precision = Precision::FP32;  // fp32 | bf16 | fp16: mixed precision (TrainModelOptions::precision)
  // auto | f32 | bf16: the attention's operands with precision bf16 (TrainModelOptions::attention_precision)
  AttentionPrecision attention_precision = AttentionPrecision::Auto;
  std::string qat = "none";               // none | int4: quantization-aware training (full fine-tuning), which
                                          // also writes OUTPUT_DIR/model_int4, a 4-bit model folder
  int qat_group_size = 32;                // int4 block: a power of two from 32 to 4096 (32, 64, 128 typical)
  bool qat_symmetric = true;              // int4: llama.cpp's q4_0 grid; false: q4_1's (a minimum per block)
  double initial_loss_scale = 65536;      // fp16: the dynamic loss scale's start (2^16; train/loss_scaler.h)
  int loss_scale_window = 2000;           // fp16: clean steps before the loss scale doubles
  int zero_stage = -1;                    // ZeRO data parallelism 0-3 (dist/zero.h, --zero S); -1: one process,
                                          // or stage 0 when mpirun started several ranks
  std::string offload_optimizer = "none"; // none | disk: AdamW moments in a file under offload_dir (ZeRO runs)
  std::string offload_dir;                // the folder for offload_optimizer: disk
  bool zero_overlap = false;              // ZeRO: nonblocking collectives overlapping the compute (dist/zero.h)
  // Top-k gradient sparsification (train/grad_topk.h): the fraction of each tensor's entries kept per
  // step (0: off, dense gradients); residual (error feedback) | scale; workers emulated in one process
  double grad_topk = 0;
  std::string grad_topk_feedback = "residual";
  int grad_topk_workers = 1;
  // with residual: AdamW's second moment counts a sent entry's square over the steps it carries
  bool grad_topk_variance_correction = true;
  // Adaptive LoRA rank (train/adaptive_rank.h; AdaLoRA's init_r = lora_r, target_r, tinit, tfinal,
  // deltaT, beta1, beta2): fixed | adaptive
  std::string lora_rank_policy = "fixed";
  int lora_target_r = 0;                  // adaptive: the final average rank per module, in [1, lora_r)
  std::string lora_rank_importance = "sensitivity";  // sensitivity | variance
  int lora_rank_tinit = 0, lora_rank_tfinal = 0, lora_rank_delta_t = 1;
  double lora_rank_beta1 = 0.85, lora_rank_beta2 = 0.85;

  std::string source;                     // where it was read from, for messages
};

// Reads a YAML file (path may be empty: defaults only). Every numeric key is checked against its
// allowed range as it is read (lt::Error naming the file, line, key, value and range); duplicate
// keys and unknown keys (with a suggestion) are errors.
TrainConfig load_train_config(const std::string& path);
// The same from YAML text; path_for_messages names it in errors.
TrainConfig parse_train_config_text(const std::string& yaml_text, const std::string& path_for_messages);
// Applies one `key = value` override (value as YAML scalar or list). lt::Error on an unknown key.
void set_train_config_key(TrainConfig& c, const std::string& key, const std::string& value);
// `[CONFIG.yaml] [--key value | --key=value ...]` (dashes in keys become underscores): the YAML
// file first, then each flag over it. lt::Error on a flag without a value or an unknown key.
TrainConfig parse_train_args(const std::vector<std::string>& args);
// The flags args[first..] (--key value | --key=value) over cfg, then the ranges checked.
void apply_train_flags(TrainConfig& cfg, const std::vector<std::string>& args, size_t first = 0);
// Checks the whole config; lt::Error naming the key.
void validate_train_config(const TrainConfig& c);
// The part of validate_train_config that needs no base_model / datasets: every numeric key in its
// range, warmup_steps <= max_steps, and the names of lr_scheduler, chat_template, doc_separator
// and gradient_checkpointing (method, precision and quantization are checked as they are read).
// lt::Error naming the key, the value and the range.
void check_train_config_ranges(const TrainConfig& c);
// Adaptive rank's options for a run of total_steps optimizer steps (train/adaptive_rank.h).
AdaptiveRankOptions adaptive_rank_options(const TrainConfig& c, int total_steps);
// The TrainModel options of a run (method, LoRA, batch shape, checkpointing, quantization).
TrainModelOptions train_model_options(const TrainConfig& c);

}  // namespace lt
