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
#include <optional>
#include <string>
#include <vector>

#include "core/train_types.h"
#include "dist/zero.h"
#include "train/sharding.h"
#include "train/trainer_state.h"

namespace lt {

// Collective: every rank of z.comm() calls it. Returns the checkpoint folder. A failed write is an
// lt::Error saying whether the previous checkpoint (the one LATEST names) is intact; hooks (may be
// null): on_checkpoint_written before LATEST is updated, on_checkpoint_saved after.
std::string save_sharded_checkpoint(const std::string& out_dir, ZeroOptimizer& z,
                                    const std::vector<TrainParam>& params, const TrainerState& pos,
                                    const TrainedModelInfo& info = {}, const TrainHooks* hooks = nullptr);

// path: a checkpoint folder, or "auto" for OUT/LATEST (a default TrainerState when there is
// none; a LATEST that names no checkpoint folder of OUT is an lt::Error). Fills the model's parameters (all of them) and this rank's moments; lt::Error naming the
// file when a tensor is missing or the checkpoint was written for a different model.
TrainerState load_sharded_checkpoint(const std::string& path, const std::string& out_dir, ZeroOptimizer& z,
                                         std::vector<TrainParam>& params);

// Reads every shard of a sharded checkpoint and writes the single-process format to out_dir
// (state.safetensors + trainer_state.json). One process; no communicator.
void consolidate_checkpoint(const std::string& sharded_dir, const std::string& out_dir);

// `leantune consolidate`: the trained model of a sharded checkpoint, as the trainer writes it at the
// end of a run: LoRA, a PEFT adapter folder (adapter_config.json, adapter_model.safetensors);
// full fine-tuning, out_dir/model.safetensors with every tensor (the trained ones from the shards,
// the frozen ones from the base model, F32) and the base folder's config.json and tokenizer files.
// path: a checkpoint folder, or an output folder (its LATEST). lt::Error naming the file when the
// checkpoint is incomplete or was written without the run's information. Returns what it wrote.
std::string export_sharded_checkpoint(const std::string& path, const std::string& out_dir);

// A checkpoint folder from `path`: itself when it holds manifest.json, else the folder its LATEST
// names; lt::Error otherwise.
std::string find_sharded_checkpoint(const std::string& path);

}  // namespace lt
