// The public Trainer (include/leantune/trainer.h), used only through its header: stepping by hand
// gives the run() losses, the callbacks see every metrics record and the ledger as written, save()
// and resume() continue a run exactly, the fault-injection seam fires at its points, and a bad key
// is a leantune::Error naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "leantune/trainer.h"

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

fs::path fresh(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("lt_api_trainer_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  return d;
}

// A short LoRA run of stories260K on Aesop's fables, from YAML text, into `out`.
leantune::TrainerConfig config(const fs::path& out, int max_steps = 4) {
  const std::string shared = LT_SHARED_DIR;
  leantune::TrainerConfig c;
  c.yaml_text = "base_model: " + shared + "/models/stories260K/stories260K.bin\n"
                "tokenizer: " + shared + "/models/stories260K/tok512.bin\n"
                "datasets: [{path: " + shared + "/data/aesop_fables/aesop_fables.txt, min_blank_lines: 2}]\n"
                "lora_target_modules: all-linear\nlora_r: 4\nlora_alpha: 8\nmicro_batch_size: 2\n"
                "sequence_len: 64\nlearning_rate: 3e-3\nlr_scheduler: constant\neval_batches: 1\nthreads: 1\n";
  c.flags = {"--output-dir", out.string(), "--max_steps=" + std::to_string(max_steps)};
  c.print = false;
  return c;
}

}  // namespace

TEST(TrainerApi, SteppingByHandEqualsRunAndTheCallbacksSeeWhatIsWritten) {
  const fs::path a = fresh("run"), b = fresh("steps");
  const leantune::TrainSummary whole = leantune::Trainer(config(a)).run();
  ASSERT_EQ(whole.losses.size(), 4u);

  leantune::Trainer t(config(b));
  std::vector<std::string> records;
  std::string ledger;
  int progress = 0;
  t.on_metrics([&](const std::string& r) { records.push_back(r); });
  t.on_ledger([&](const std::string& l) { ledger = l; });
  t.on_progress([&](const leantune::TrainProgress& p) { progress += p.step == progress + 1 && p.total_steps == 4; });
  EXPECT_EQ(t.total_steps(), 4);
  std::vector<float> losses;
  while (!t.done()) losses.push_back(t.step().loss);
  const leantune::TrainSummary s = t.finish();
  EXPECT_EQ(losses, whole.losses);
  EXPECT_EQ(s.losses, whole.losses);
  EXPECT_EQ(s.eval_losses, whole.eval_losses);
  EXPECT_EQ(progress, 4);
  EXPECT_EQ(records, lines(read_file(b / "metrics.jsonl")));
  EXPECT_EQ(ledger, read_file(b / "ledger.json"));
  for (const char* f : {"report.html", "ledger.json", "adapter/adapter_model.safetensors", "LATEST"})
    EXPECT_TRUE(fs::exists(b / f)) << f;
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(TrainerApi, SaveAndResumeContinueARunExactly) {
  const fs::path full = fresh("full"), part = fresh("part");
  const leantune::TrainSummary want = leantune::Trainer(config(full)).run();
  {
    leantune::Trainer t(config(part));
    int published = -1;
    leantune::FaultInjection f;
    f.checkpoint_published = [&](int step) { published = step; };
    t.set_fault_injection(f);
    t.step();
    t.step();
    t.save();
    EXPECT_EQ(published, 2);
    EXPECT_EQ(read_file(part / "LATEST"), "checkpoint-2");
  }  // stopped after 2 of 4 steps, without finishing
  leantune::Trainer r(config(part));
  r.resume();  // output_dir/LATEST
  EXPECT_EQ(r.run().losses, want.losses);
  EXPECT_THROW(r.resume("auto"), leantune::Error);  // too late: the run has started
  fs::remove_all(full);
  fs::remove_all(part);
}

TEST(TrainerApi, ABadKeyIsAnErrorNamingIt) {
  leantune::TrainerConfig c = config(fresh("bad"));
  c.flags.push_back("--lora_rank");
  c.flags.push_back("8");
  try {
    leantune::Trainer t(c);
    FAIL() << "an unknown key must be refused";
  } catch (const leantune::Error& e) {
    EXPECT_NE(std::string(e.what()).find("lora_rank"), std::string::npos) << e.what();
  }
}
