// The real fine-tune: LoRA on the pretrained stories260K over Aesop's fables (10% of the fables
// held out). The held-out loss must fall by at least 25% from the base model's.
#include <gtest/gtest.h>

#include <filesystem>

#include "train/trainer.h"

using namespace lt;

TEST(TrainAesop, HeldOutLossFallsByAQuarter) {
  const std::string shared = LT_SHARED_DIR;
  TrainConfig c;
  c.base_model = shared + "/models/stories260K/stories260K.bin";
  c.tokenizer = shared + "/models/stories260K/tok512.bin";
  c.datasets = {{shared + "/data/aesop_fables/aesop_fables.txt", 2}};
  c.val_set_size = 0.1;
  c.method = "lora";
  c.lora.r = 16;
  c.lora.alpha = 32;
  c.lora.target_modules = {"all-linear"};
  c.micro_batch_size = 8;
  c.sequence_len = 256;
  c.learning_rate = 3e-3;
  c.warmup_steps = 5;
  c.max_steps = 40;
  c.threads = 2;
  c.logging_steps = 10;
  c.output_dir = (std::filesystem::temp_directory_path() / "lt_aesop_test").string();
  std::filesystem::remove_all(c.output_dir);
  TrainResult r = run_training(c);
  ASSERT_GE(r.eval_losses.size(), 2u);
  EXPECT_GT(r.first_eval_loss, 3.5f);  // the base model has not seen this style
  EXPECT_LE(r.last_eval_loss, 0.75f * r.first_eval_loss)
      << "held-out loss " << r.first_eval_loss << " -> " << r.last_eval_loss;
  EXPECT_TRUE(std::filesystem::exists(c.output_dir + "/adapter/adapter_model.safetensors"));
  std::filesystem::remove_all(c.output_dir);
}
