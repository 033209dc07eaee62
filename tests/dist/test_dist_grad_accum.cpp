// Gradient accumulation across ranks equals the larger batch: ZeRO with micro-batch 4 on R ranks
// (accumulation 2/R: 2 ranks x 4 x 1 under `mpirun -np 2`, 1 rank x 4 x 2 in the main suite)
// gives the losses, eval losses and trained weights of one process with micro-batch 8 x 1, on
// packed documents and on prompt/completion rows whose label counts differ widely, at every ZeRO
// stage: each rank's gradients are divided by the label-token count of the whole step (all
// ranks), all-reduced before the first backward.
#include <gtest/gtest.h>

#include <filesystem>
#include <fmt/format.h>

#include "dist/zero.h"
#include "dist_test_config.h"
#include "../train/grad_accum_test_data.h"
#include "api/run_training.h"

using namespace lt;
using namespace lt::test;
namespace fs = std::filesystem;

namespace {

// Writes the data once (rank 0) into a folder every rank reads.
std::string shared_data(const std::string& name, std::string (*write)(const std::string&)) {
  const std::string d = dist_dir(name);
  reset_shared_dir(d);
  std::string path;
  if (world().rank() == 0) path = write(d);
  world().barrier();
  return world().rank() == 0 ? path : write == write_packed_text ? d + "/docs.txt" : d + "/pairs.jsonl";
}

void check_ranks(const std::string& data, const std::string& method, bool packing, const std::string& name) {
  TrainConfig ref = accum_config(data, method, packing);
  ref.micro_batch_size = 8;
  ref.gradient_accumulation_steps = 1;
  ref.output_dir = dist_dir(name + "_ref", true);
  fs::remove_all(ref.output_dir);
  const TrainResult want = run_training_single(ref);
  for (int stage : {0, 1, 2, 3}) {
    TrainConfig c = ref;
    c.micro_batch_size = 4;
    c.gradient_accumulation_steps = 2 / world().size();
    c.zero_stage = stage;
    c.output_dir = dist_dir(name + "_zero" + std::to_string(stage));
    reset_shared_dir(c.output_dir);
    const TrainResult got = run_training_zero(c, zero_options(c), world());
    const std::string what = fmt::format("{} ZeRO {} on {} rank(s) x 4 x {} vs 8 x 1", name, stage, world().size(),
                                         c.gradient_accumulation_steps);
    expect_same_losses(got.losses, want.losses, what);
    if (world().rank() == 0) {  // rank 0 evaluates and writes the trained tensors
      expect_same_losses(got.eval_losses, want.eval_losses, what + " (eval)");
      expect_same_weights(trained_file(c), trained_file(ref), what, c.learning_rate, c.max_steps);
      expect_same_losses(grad_norms(c.output_dir), grad_norms(ref.output_dir), what + " (gradient norms)");
    }
    world().barrier();
  }
  fs::remove_all(ref.output_dir);
}

}  // namespace

TEST(DistGradAccum, PackedDocumentsEqualOneProcessOfEight) {
  check_ranks(shared_data("ga_packed", write_packed_text), "full", true, "packed full");
}

TEST(DistGradAccum, PromptCompletionRowsEqualOneProcessOfEight) {
  check_ranks(shared_data("ga_pc", write_prompt_completion), "lora", false, "prompt/completion lora");
}
