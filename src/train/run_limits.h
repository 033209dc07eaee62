// The limits a training run's shape must respect on a given model, checked before anything is
// planned or allocated (TrainModel's validate_options calls it, so train, plan and bench all do):
// the context, tokens per micro-batch, the LoRA rank of each adapted projection, and a bound on
// the memory plan that keeps every byte count of the plan inside 64 bits.
#pragma once
#include "core/model_config.h"
#include "train/train_model.h"

namespace lt {

// lt::Error naming the key, the value and the model's limit: sequence_len above the model's
// max_position_embeddings, micro_batch_size x sequence_len above 2^31 - 1 tokens, lora_r above
// min(in, out) of a targeted projection (naming the module and its shape), or a run whose memory
// plan could exceed 2^62 bytes (naming the part of the plan and saying the configuration is too large).
void check_run_fits_model(const ModelConfig& c, const TrainModelOptions& o);

// The largest LoRA rank the targeted projections allow: min(in, out) over them (INT_MAX when none).
int max_lora_rank(const ModelConfig& c, const LoraConfig& lora);

// An upper bound (in bytes, as a long double: it cannot overflow) of the memory plan of the run,
// and the name of its largest part. Every buffer plan_training lists is a product of the model's
// dimensions bounded term by term here.
struct PlanBound {
  long double bytes = 0;
  const char* largest = "";
};
PlanBound plan_bytes_bound(const ModelConfig& c, const TrainModelOptions& o);

}  // namespace lt
