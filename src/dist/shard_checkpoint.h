// Sharded training checkpoints for ZeRO runs. In OUT/checkpoint-<step>/ every rank writes, each
// file atomically, shard-<r>-of-<R>.safetensors (1-D tensors "param", "adam_m", "adam_v": the flat
// elements [begin, end) of its shard, dist/zero.h) and shard-<r>-of-<R>.json; after a barrier
// rank 0 writes manifest.json (the tensors' names, shapes and flat offsets, the shards' ranges,
// the step and data position) and only then publishes OUT/LATEST, so a crash at any point leaves
// the previous checkpoint the one LATEST names.
// Loading re-shards: any number of ranks reads a checkpoint written by any other number (each rank
// copies the flat ranges it needs from the shards that hold them). A single-process checkpoint of
// the plain trainer (state.safetensors) loads too, and consolidate_checkpoint() turns a sharded
// one into that format (whole tensors "param.<name>", "adam_m.<name>", "adam_v.<name>" and
// trainer_state.json), which the single-process trainer resumes from.
#pragma once
#include <string>
#include <vector>

#include "dist/zero.h"

namespace lt {

struct TrainingPosition {
  int step = 0, epoch = 0;
  size_t position = 0;        // batches of the epoch already consumed (global, not per rank)
  std::vector<float> losses;  // per optimizer step so far
};

// Collective: every rank of z.comm() calls it. Returns the checkpoint folder.
std::string save_sharded_checkpoint(const std::string& out_dir, ZeroOptimizer& z,
                                    const std::vector<TrainParam>& params, const TrainingPosition& pos);

// path: a checkpoint folder, or "auto" for OUT/LATEST (a default TrainingPosition when there is
// none). Fills the model's parameters (all of them) and this rank's moments; lt::Error naming the
// file when a tensor is missing or the checkpoint was written for a different model.
TrainingPosition load_sharded_checkpoint(const std::string& path, const std::string& out_dir, ZeroOptimizer& z,
                                         std::vector<TrainParam>& params);

// Reads every shard of a sharded checkpoint and writes the single-process format to out_dir
// (state.safetensors + trainer_state.json). One process; no communicator.
void consolidate_checkpoint(const std::string& sharded_dir, const std::string& out_dir);

}  // namespace lt
