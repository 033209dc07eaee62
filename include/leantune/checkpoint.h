// Sharded (ZeRO) training checkpoints turned into what one process uses: the trained model as the
// trainer writes it at the end of a run (a PEFT adapter folder, or a full model folder), or the
// single-process training state that `leantune train` without mpirun resumes from. A checkpoint
// written by any number of ranks is read by one process.
//
// Usage:
//   std::string wrote = leantune::export_sharded_checkpoint("out", "out/adapter");  // out/LATEST
//   std::string from = leantune::consolidate_sharded_checkpoint("out/checkpoint-100", "state");
#pragma once
#include <string>

namespace leantune {

// The trained model of the checkpoint at `checkpoint` (a checkpoint folder, or an output folder:
// its LATEST): LoRA, a PEFT adapter folder; full fine-tuning, out_dir/model.safetensors with every
// tensor and the base folder's config and tokenizer files. Returns what it wrote. leantune::Error
// naming the file when the checkpoint is incomplete or was written without the run's information.
std::string export_sharded_checkpoint(const std::string& checkpoint, const std::string& out_dir);

// The single-process training state (state.safetensors + trainer_state.json) of the checkpoint
// at `checkpoint` (a checkpoint folder, or an output folder: its LATEST), written to out_dir.
// Returns the checkpoint folder it read.
std::string consolidate_sharded_checkpoint(const std::string& checkpoint, const std::string& out_dir);

}  // namespace leantune
