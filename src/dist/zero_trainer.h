// `mpirun -np N leantune train CONFIG.yaml --zero S`: the training loop of train/trainer.cpp run
// data-parallel with ZeRO stage S (dist/zero.h) over a Communicator.
// Data: every rank walks the same shuffled batch stream; a step takes R·accumulation consecutive
// micro-batches (the global batch = R × micro_batch_size × accumulation) and rank r computes the
// r-th run of `accumulation` of them, so R ranks with accumulation a see exactly the batches, in
// the same order and with the same dropout masks, as one rank with accumulation R·a. Gradients
// are scaled by 1/(R·a); the reported loss is the global mean.
// Rank 0 prints (the progress bar on a terminal), evaluates and writes metrics.jsonl, and at the
// end the same outputs as one process through train/run_outputs.h: the adapter or the model folder
// (with the base's config.json and tokenizer files), ledger.json and report.html;
// every rank writes ledger-rank<r>.json (its planned and allocated bytes per category) and its
// checkpoint shard (dist/shard_checkpoint.h). An lt::Error on one rank of several prints the
// message with the rank and aborts the job (every rank exits non-zero).
#pragma once
#include "dist/comm.h"
#include "dist/zero.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace lt {

TrainResult run_training_zero(const TrainConfig& config, const ZeroOptions& zero, Communicator& comm,
                              const TrainHooks& hooks = {});

// The ZeRO options of a config: zero_stage (-1 counts as 0), offload_optimizer, offload_dir.
ZeroOptions zero_options(const TrainConfig& config);

}  // namespace lt
