// Gradient accumulation equals the larger batch: a step's loss and gradients are the sum over every
// label token of its micro-batches divided by the step's label-token count, so micro-batch 8 x 1,
// 4 x 2 and 2 x 4 give the same losses, eval losses and trained weights on data whose micro-batches
// hold very different label counts (packed documents; prompt/completion rows). A mean of
// per-micro-batch means (the old normalisation) would miss the bound by ~10x on this data.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>

#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "grad_accum_test_data.h"
#include "io/model_files.h"
#include "kernels/backward.h"
#include "train/train_model.h"
#include "api/run_training.h"

using namespace lt;
using namespace lt::test;
namespace fs = std::filesystem;

namespace {

std::string test_dir(const std::string& name) {
  return (fs::temp_directory_path() / ("lt_grad_accum_" + std::to_string(getpid()) + "_" + name)).string();
}

// Runs micro-batch 8 x 1, then 4 x 2 and 2 x 4, and compares each with the first.
void check_accumulation(const std::string& data, const std::string& method, bool packing, const std::string& name) {
  TrainConfig ref = accum_config(data, method, packing);
  ref.micro_batch_size = 8;
  ref.gradient_accumulation_steps = 1;
  ref.output_dir = test_dir(name + "_8x1");
  const TrainResult want = run_training_single(ref);
  ASSERT_EQ(want.losses.size(), 4u);
  for (int mb : {4, 2}) {
    TrainConfig c = ref;
    c.micro_batch_size = mb;
    c.gradient_accumulation_steps = 8 / mb;
    c.output_dir = test_dir(name + "_" + std::to_string(mb) + "x" + std::to_string(8 / mb));
    const TrainResult got = run_training_single(c);
    const std::string what = fmt::format("{} {} x {} vs 8 x 1", name, mb, 8 / mb);
    expect_same_losses(got.losses, want.losses, what);
    // the eval loss is a per-token mean over the eval set, whatever its batch shape
    expect_same_losses(got.eval_losses, want.eval_losses, what + " (eval)");
    expect_same_weights(trained_file(c), trained_file(ref), what, c.learning_rate, c.max_steps);
    expect_same_losses(grad_norms(c.output_dir), grad_norms(ref.output_dir), what + " (gradient norms)");
    fs::remove_all(c.output_dir);
  }
  fs::remove_all(ref.output_dir);
}

// The gradients of one micro-batch of stories260K (full fine-tuning), all tensors concatenated.
std::vector<float> micro_batch_grads(TrainModel& m, int64_t step_label_tokens, float* loss) {
  const int N = m.options().micro_batch * m.options().seq_len, T = m.options().seq_len;
  std::vector<int> tok(static_cast<size_t>(N)), lab = tok, pos = tok, doc = tok;
  std::mt19937 rng(5);
  for (int i = 0; i < N; ++i) {
    tok[size_t(i)] = int(rng() % 512);
    pos[size_t(i)] = i % T;
    doc[size_t(i)] = i - i % T;
  }
  for (int i = 0; i < N; ++i) lab[size_t(i)] = (i + 1) % T == 0 || i % 3 == 0 ? kIgnoreLabel : tok[size_t(i) + 1];
  m.zero_grads();
  *loss = m.forward_backward(tok.data(), lab.data(), pos.data(), doc.data(), 1.0f, 0, step_label_tokens);
  std::vector<float> g;
  for (const auto& p : m.params()) g.insert(g.end(), p.g, p.g + p.n);
  return g;
}

}  // namespace

// step_label_tokens: the micro-batch's own count (or 0) gives its mean's gradients bit for bit (a
// run without accumulation is unchanged); twice its count gives exactly half (the scale 1/2 is a
// power of two, and every operation after it is linear), and the same returned mean loss.
TEST(GradAccum, StepLabelCountScalesTheMicroBatchGradients) {
  auto files = load_model_files(std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  TrainModelOptions o;
  o.method = Method::Full;
  o.micro_batch = 2;
  o.seq_len = 32;
  TrainModel m(files.config, files.tensors, o, ops_cpu());
  const int own = 41;  // labels kept: 64 tokens less the 22 multiples of 3 and the row end 31 (63 is both)
  float l0, l1, l2;
  const auto g0 = micro_batch_grads(m, 0, &l0);
  const auto g1 = micro_batch_grads(m, own, &l1);
  const auto g2 = micro_batch_grads(m, 2 * own, &l2);
  EXPECT_EQ(l0, l1);
  EXPECT_EQ(l0, l2);
  size_t nonzero = 0;
  for (size_t i = 0; i < g0.size(); ++i) {
    ASSERT_EQ(g1[i], g0[i]) << "element " << i;
    ASSERT_EQ(g2[i], 0.5f * g0[i]) << "element " << i;
    nonzero += g0[i] != 0;
  }
  EXPECT_GT(nonzero, g0.size() / 2);
  EXPECT_THROW(micro_batch_grads(m, own - 1, &l1), Error);  // a step cannot count fewer labels than its part
}

TEST(GradAccum, PackedDocumentsFullFineTune) {
  const std::string d = test_dir("packed_data");
  check_accumulation(write_packed_text(d), "full", true, "packed full");
  fs::remove_all(d);
}

TEST(GradAccum, PromptCompletionRowsLora) {
  const std::string d = test_dir("pc_data");
  check_accumulation(write_prompt_completion(d), "lora", false, "prompt/completion lora");
  fs::remove_all(d);
}

TEST(GradAccum, PromptCompletionRowsFullFineTune) {
  const std::string d = test_dir("pc_full_data");
  check_accumulation(write_prompt_completion(d), "full", false, "prompt/completion full");
  fs::remove_all(d);
}
