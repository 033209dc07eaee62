// Shared by the distributed tests: a short stories260K fine-tune on Aesop's fables, and output
// folders that every rank of a job agrees on. The tests run on one process in the main suite and
// under `mpirun -np 2` in the dist_two_ranks ctest entry (gtest filter Dist*).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "dist/comm.h"
#include "train/train_config.h"

namespace lt::test {

// method "lora" or "full"; `global_accum` micro-batches per step over all ranks.
inline TrainConfig dist_config(const std::string& method, int global_accum) {
  const std::string shared = LT_SHARED_DIR;
  TrainConfig c;
  c.base_model = shared + "/models/stories260K/stories260K.bin";
  c.tokenizer = shared + "/models/stories260K/tok512.bin";
  c.datasets = {{shared + "/data/aesop_fables/aesop_fables.txt", 2}};
  c.val_set_size = 0.05;
  c.eval_batches = 1;
  c.method = parse_method(method);
  c.lora.r = 4;
  c.lora.alpha = 8;
  c.lora.dropout = 0.1f;  // the masks depend on the global micro-batch index: this checks it
  c.lora.target_modules = {"all-linear"};
  c.micro_batch_size = 2;
  c.sequence_len = 64;
  c.gradient_accumulation_steps = global_accum / world().size();
  c.learning_rate = method == "lora" ? 3e-3 : 1e-3;
  c.lr_scheduler = "constant";
  c.weight_decay = 0.01;
  c.max_grad_norm = 0.5;  // small enough that clipping is active: the global norm matters
  c.max_steps = 4;
  c.threads = 1;
  c.logging_steps = 100;
  return c;
}

// Rank 0's process id, agreed by every rank: CTest runs test processes in parallel, so folders
// must not be shared between two jobs.
inline int job_id() {
  static const int id = [] {
    int pid = int(getpid());
    world().broadcast(&pid, sizeof(pid), 0);
    return pid;
  }();
  return id;
}

// A folder under the temporary directory, the same on every rank of this job and different from
// other jobs'; `per_rank` appends the rank.
inline std::string dist_dir(const std::string& name, bool per_rank = false) {
  auto d = std::filesystem::temp_directory_path() /
           ("lt_dist_" + std::to_string(job_id()) + "_" + std::to_string(world().size()) + "_" + name +
            (per_rank ? "_r" + std::to_string(world().rank()) : ""));
  return d.string();
}

// Empties a folder shared by every rank (rank 0 removes, then everyone waits).
inline void reset_shared_dir(const std::string& d) {
  if (world().rank() == 0) std::filesystem::remove_all(d);
  world().barrier();
}

}  // namespace lt::test
