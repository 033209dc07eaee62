// validate_config and write_file_atomic.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/mapped_file.h"
#include "core/atomic_file.h"
#include "io_test_util.h"
#include "core/model_config.h"

namespace lt {
namespace {

ModelConfig ok_config() {
  ModelConfig c;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.hidden_dim = 128;
  c.vocab_size = 32;
  return c;
}

TEST(IoValidateConfig, AcceptsAndRejects) {
  validate_config(ok_config(), "here");
  auto bad = [](auto mutate, std::initializer_list<std::string> parts) {
    ModelConfig c = ok_config();
    mutate(c);
    EXPECT_LT_ERROR(validate_config(c, "where.json"), parts);
  };
  bad([](ModelConfig& c) { c.dim = 0; }, {"where.json", "hidden size"});
  bad([](ModelConfig& c) { c.n_kv_heads = 3; }, {"where.json", "key/value heads"});
  bad([](ModelConfig& c) { c.head_dim = 7; }, {"where.json", "even"});
  bad([](ModelConfig& c) { c.norm_eps = 0; }, {"where.json", "rms_norm_eps"});
  bad([](ModelConfig& c) { c.rope_theta = -1; }, {"where.json", "rope_theta"});
  bad([](ModelConfig& c) { c.arch = "gpt2"; }, {"'gpt2'", "where.json"});
  bad([](ModelConfig& c) { c.rope_scaling.type = "su"; }, {"where.json", "'su'", "longrope"});
  bad([](ModelConfig& c) { c.rope_scaling.type = "llama3", c.rope_scaling.factor = 0; }, {"where.json", "factor"});
  bad([](ModelConfig& c) { c.eos_token_id = 32; }, {"where.json", "eos_token_id"});
  bad([](ModelConfig& c) { c.max_seq_len = 0; }, {"where.json", "sequence length"});
  bad([](ModelConfig& c) { c.n_layers = 1426085402; }, {"where.json", "num_hidden_layers", "1426085402", "1024"});
  ModelConfig deep = ok_config();
  deep.n_layers = 1024;  // the most it takes
  validate_config(deep, "here");
}

TEST(IoAtomicFile, ReplacesOrLeavesUntouched) {
  test::TempDir dir;
  std::string p = dir / "f.txt";
  write_text_file_atomic(p, "one");
  write_text_file_atomic(p, "two");
  EXPECT_EQ(read_text_file(p), "two");
  EXPECT_THROW(write_file_atomic(p,
                                 [](std::FILE* f) {
                                   std::fputs("partial", f);
                                   fail("boom");
                                 }),
               Error);
  EXPECT_EQ(read_text_file(p), "two");
  int n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path)) ++n;
  EXPECT_EQ(n, 1);  // no temporary left behind
  EXPECT_LT_ERROR(write_text_file_atomic(dir / "nodir/x.txt", "x"), {"nodir/x.txt"});
}

}  // namespace
}  // namespace lt
