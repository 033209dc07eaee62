// The output folder is never trusted and never lost: a LATEST naming a path outside the output
// folder (or the folder itself) is an error before anything is opened or removed; a second run
// into a previous run's output folder refuses unless it resumes or overwrites on purpose; a run
// stopped mid-way and resumed leaves metrics.jsonl as an uninterrupted run does (one process and
// ZeRO); a corrupt trainer_state.json is an error naming the key; and a full disk (RLIMIT_FSIZE in
// a child process) makes `logits --out` and a checkpoint save exit 1 naming the file, with no
// partial file under the final name and the previous checkpoint intact.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "dist/comm.h"
#include "dist/shard_checkpoint.h"
#include "io/safetensors.h"
#include "train/output_dir.h"
#include "train/train_config.h"
#include "api/run_training.h"
#include "train/trainer_state.h"

namespace fs = std::filesystem;
using namespace lt;

namespace {

// A fresh, empty folder under the temp directory.
std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("lt_output_safety_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// A few LoRA steps of stories260K on Aesop, small enough to take well under a second per step.
TrainConfig tiny_config(const std::string& out) {
  const std::string shared = LT_SHARED_DIR;
  TrainConfig c;
  c.base_model = shared + "/models/stories260K/stories260K.bin";
  c.tokenizer = shared + "/models/stories260K/tok512.bin";
  c.datasets = {{shared + "/data/aesop_fables/aesop_fables.txt", 2}};
  c.method = Method::Lora;
  c.lora.r = 4;
  c.lora.alpha = 8;
  c.lora.target_modules = {"all-linear"};
  c.micro_batch_size = 2;
  c.sequence_len = 64;
  c.max_steps = 6;
  c.save_steps = 2;
  c.eval_steps = 3;
  c.eval_batches = 1;
  c.lr_scheduler = "constant";
  c.learning_rate = 1e-3;
  c.threads = 1;
  c.logging_steps = 100;
  c.output_dir = out;
  return c;
}

// metrics.jsonl without its wall-clock fields (throughput, memory), which differ between runs.
std::vector<nlohmann::json> metrics(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::ifstream f(out + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"tokens_per_s", "rss_bytes", "comm_bytes_per_step"}) j.erase(k);
    v.push_back(j);
  }
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(OutputSafety, CheckpointNamesFromDiskAreValidated) {
  const std::string out = fresh_dir("names");
  fs::create_directories(out + "/checkpoint-4");
  const std::string outside = fresh_dir("names_outside");
  fs::create_symlink(outside, out + "/checkpoint-5");
  EXPECT_EQ(read_latest(out), "");  // no LATEST: nothing to resume
  for (const std::string ok : {"checkpoint-4", "checkpoint-4\n"}) {
    write_file(out + "/LATEST", ok);
    EXPECT_EQ(read_latest(out), "checkpoint-4") << ok;
  }
  const std::vector<std::string> bads = {"../victim", ".", "..", "", "checkpoint-", "checkpoint-4/..", "/tmp",
                                         "checkpoint-4/../../x", "checkpoint-x", "checkpoint-5", "checkpoint-6",
                                         std::string("checkpoint-4\0x", 14), std::string(5000, 'a')};
  for (const std::string& bad : bads) {
    write_file(out + "/LATEST", bad);
    const std::string e = error_of([&] { read_latest(out); });
    EXPECT_NE(e.find(out + "/LATEST"), std::string::npos) << "'" << bad << "': " << e;
    EXPECT_NE(e.find("nothing was opened or removed"), std::string::npos) << e;
    EXPECT_LT(e.size(), 700u) << "the content must be cut to an excerpt";
    // `leantune consolidate --checkpoint OUT` follows LATEST the same way
    EXPECT_NE(error_of([&] { find_sharded_checkpoint(out); }).find("nothing was opened or removed"), std::string::npos);
  }
  EXPECT_TRUE(is_checkpoint_name("checkpoint-12"));
  EXPECT_FALSE(is_checkpoint_name("checkpoint-12 "));
  EXPECT_FALSE(is_checkpoint_name("xcheckpoint-12"));
  fs::remove_all(out);
  fs::remove_all(outside);
}

// `echo -n ../victim > out/LATEST` and `.`: resuming is an error naming LATEST, and neither the
// victim outside nor anything inside the output folder is removed, also when the run resumes from an
// explicit checkpoint and would replace the "previous" one at its first save.
TEST(OutputSafety, ABadLatestDeletesNothing) {
  const std::string root = fresh_dir("latest");
  const std::string victim = root + "/victim", out = root + "/out";
  fs::create_directories(victim);
  write_file(victim + "/precious.txt", "keep me");
  TrainConfig c = tiny_config(out);
  c.max_steps = 2;
  run_training(c);
  ASSERT_EQ(read_text_file(out + "/LATEST"), "checkpoint-2");
  fs::copy(out + "/checkpoint-2", root + "/ckpt", fs::copy_options::recursive);
  for (const std::string bad : {"../victim", "."}) {
    write_file(out + "/LATEST", bad);
    TrainConfig r = c;
    r.max_steps = 4;
    r.resume = "auto";
    const std::string e = error_of([&] { run_training(r); });
    EXPECT_NE(e.find("LATEST"), std::string::npos) << e;
    EXPECT_NE(e.find(bad), std::string::npos) << e;
    r.resume = root + "/ckpt";  // resumes, but LATEST names what the first save would remove
    EXPECT_NE(error_of([&] { run_training(r); }).find("LATEST"), std::string::npos);
    EXPECT_TRUE(fs::exists(victim + "/precious.txt")) << bad;
    EXPECT_TRUE(fs::exists(out + "/checkpoint-2/state.safetensors")) << bad;
    EXPECT_TRUE(fs::exists(out + "/adapter/adapter_model.safetensors")) << bad;
  }
  fs::remove_all(root);
}

TEST(OutputSafety, ASecondRunRefusesUnlessItResumesOrOverwrites) {
  const std::string out = fresh_dir("second");
  TrainConfig c = tiny_config(out);
  c.max_steps = 4;
  run_training(c);
  const std::string before = read_text_file(out + "/metrics.jsonl");
  const std::string e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find("--resume auto"), std::string::npos) << e;
  EXPECT_NE(e.find("--overwrite-output-dir"), std::string::npos) << e;
  EXPECT_NE(e.find(out), std::string::npos) << e;
  EXPECT_EQ(read_text_file(out + "/metrics.jsonl"), before) << "the refused run changed metrics.jsonl";
  EXPECT_EQ(read_text_file(out + "/LATEST"), "checkpoint-4");
  EXPECT_TRUE(fs::exists(out + "/checkpoint-4/state.safetensors"));
  // on purpose: the previous checkpoints go, the new run's outputs replace the rest
  fs::create_directories(out + "/checkpoint-2");  // a stale one, as a killed run leaves
  c.overwrite_output_dir = true;
  c.max_steps = 3;
  c.save_steps = 0;
  EXPECT_EQ(run_training(c).steps, 3);
  EXPECT_EQ(read_text_file(out + "/LATEST"), "checkpoint-3");
  EXPECT_FALSE(fs::exists(out + "/checkpoint-4"));
  EXPECT_FALSE(fs::exists(out + "/checkpoint-2"));
  EXPECT_EQ(metrics(out).back()["step"], 3);
  fs::remove_all(out);
}

// --overwrite-output-dir is a flag (no value needed), and also a key with a value like the others.
TEST(OutputSafety, OverwriteOutputDirIsAFlag) {
  EXPECT_FALSE(parse_train_args({"--max_steps", "3"}).overwrite_output_dir);
  TrainConfig c = parse_train_args({"--overwrite-output-dir", "--max_steps", "3"});
  EXPECT_TRUE(c.overwrite_output_dir);
  EXPECT_EQ(c.max_steps, 3);
  EXPECT_TRUE(parse_train_args({"--max_steps", "3", "--overwrite_output_dir"}).overwrite_output_dir);
  EXPECT_FALSE(parse_train_args({"--overwrite-output-dir", "false"}).overwrite_output_dir);
}

// A run stopped between checkpoints (an exception from the step hook stands in for the kill) and
// resumed: the steps after the checkpoint run twice, but metrics.jsonl holds each record once, equal
// (but for the wall-clock fields) to an uninterrupted run's; and the losses are bit-identical.
TEST(OutputSafety, ResumeLeavesMetricsAsIfTheRunHadNotStopped) {
  const std::string ref = fresh_dir("metrics_ref"), out = fresh_dir("metrics_cut");
  const TrainResult full = run_training(tiny_config(ref));
  const auto want = metrics(ref);
  ASSERT_EQ(want.size(), 1u + 6u + 1u + 1u);  // eval at 0, 6 steps, eval at 3, eval at the end
  for (int stop : {3, 5, 6}) {  // after an eval, between checkpoints, after the last step
    fs::remove_all(out);
    TrainHooks kill;
    kill.on_step_end = [stop](int step) {
      if (step == stop) throw std::runtime_error("killed");
    };
    EXPECT_THROW(run_training(tiny_config(out), kill), std::runtime_error);
    TrainConfig r = tiny_config(out);
    r.resume = "auto";
    EXPECT_EQ(run_training(r).losses, full.losses) << "stopped at " << stop;
    EXPECT_EQ(metrics(out), want) << "stopped at " << stop;
  }
  // stopped after the final checkpoint was published, before the final evaluation's record
  fs::remove_all(out);
  TrainHooks after;
  after.on_checkpoint_saved = [](int step) {
    if (step == 6) throw std::runtime_error("killed");
  };
  EXPECT_THROW(run_training(tiny_config(out), after), std::runtime_error);
  TrainConfig r = tiny_config(out);
  r.resume = "auto";
  run_training(r);
  EXPECT_EQ(metrics(out), want);
  fs::remove_all(ref);
  fs::remove_all(out);
}

TEST(OutputSafety, ZeroResumeLeavesMetricsAsIfTheRunHadNotStopped) {
  if (world().size() > 1) GTEST_SKIP() << "several ranks: the hook's exception would abort the job";
  const std::string ref = fresh_dir("zmetrics_ref"), out = fresh_dir("zmetrics_cut");
  SelfCommunicator self;
  ZeroOptions z;
  z.stage = 2;
  const TrainResult full = run_training_zero(tiny_config(ref), z, self);
  TrainHooks kill;
  kill.on_step_end = [](int step) {
    if (step == 5) throw std::runtime_error("killed");
  };
  EXPECT_THROW(run_training_zero(tiny_config(out), z, self, kill), std::runtime_error);
  EXPECT_EQ(read_text_file(out + "/LATEST"), "checkpoint-4");
  TrainConfig r = tiny_config(out);
  r.resume = "auto";
  EXPECT_EQ(run_training_zero(r, z, self).losses, full.losses);
  EXPECT_EQ(metrics(out), metrics(ref));
  fs::remove_all(ref);
  fs::remove_all(out);
}

TEST(OutputSafety, CorruptTrainerStateIsAClearError) {
  const std::string path = "out/checkpoint-2/trainer_state.json";
  const TrainerState s = parse_trainer_state(R"({"step": 2, "epoch": 0, "position": 4, "losses": [1.5, 1.25]})", path);
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(s.position, 4u);
  EXPECT_EQ(s.losses, (std::vector<float>{1.5f, 1.25f}));
  EXPECT_EQ(s.metrics_records, -1);
  const TrainerState back = parse_trainer_state(trainer_state_json(s).dump(), path);
  EXPECT_EQ(back.losses, s.losses);
  // each: the text, and the key the message must name
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"step": -1, "epoch": 0, "position": 0, "losses": []})", "'step'"},
      {R"({"step": 4294967296, "epoch": 0, "position": 0, "losses": []})", "'step'"},
      {R"({"step": 1e30, "epoch": 0, "position": 0, "losses": []})", "'step'"},
      {R"({"step": 2.5, "epoch": 0, "position": 0, "losses": [1, 2]})", "'step'"},
      {R"({"step": "2", "epoch": 0, "position": 0, "losses": [1, 2]})", "'step'"},
      {R"({"step": true, "epoch": 0, "position": 0, "losses": [1]})", "'step'"},
      {R"({"epoch": 0, "position": 0, "losses": []})", "'step'"},
      {R"({"step": 1, "position": 0, "losses": [1]})", "'epoch'"},
      {R"({"step": 1, "epoch": -3, "position": 0, "losses": [1]})", "'epoch'"},
      {R"({"step": 1, "epoch": 0, "position": -1, "losses": [1]})", "'position'"},
      {R"({"step": 1, "epoch": 0, "position": 0})", "'losses'"},
      {R"({"step": 1, "epoch": 0, "position": 0, "losses": {"a": 1}})", "'losses'"},
      {R"({"step": 3, "epoch": 0, "position": 0, "losses": [1]})", "'losses'"},
      {R"({"step": 1, "epoch": 0, "position": 0, "losses": [null]})", "'losses'"},
      {R"({"step": 1, "epoch": 0, "position": 0, "losses": [1], "loss_scale": -2})", "'loss_scale'"},
      {R"({"step": 1, "epoch": 0, "position": 0, "losses": [1], "skipped_steps": 5})", "'skipped_steps'"},
      {R"({"step": 1, "epoch": 0, "position": 0, "losses": [1], "metrics_records": -2})", "'metrics_records'"},
      {R"([1, 2])", "JSON object"},
      {R"({"step": 1, )", "malformed JSON"},
  };
  for (const auto& [text, key] : bad) {
    const std::string e = error_of([&] { parse_trainer_state(text, path); });
    EXPECT_NE(e.find(path), std::string::npos) << text << " -> " << e;
    EXPECT_NE(e.find(key), std::string::npos) << text << " -> " << e;
  }
}

// A corrupt step in a checkpoint stops the resume with the file named, instead of starting over.
TEST(OutputSafety, ResumeFromACorruptStateIsAnError) {
  const std::string out = fresh_dir("corrupt");
  TrainConfig c = tiny_config(out);
  c.max_steps = 2;
  run_training(c);
  write_file(out + "/checkpoint-2/trainer_state.json", R"({"step": -7, "epoch": 0, "position": 2, "losses": []})");
  c.resume = "auto";
  c.max_steps = 4;
  const std::string e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find(out + "/checkpoint-2/trainer_state.json"), std::string::npos) << e;
  EXPECT_NE(e.find("-7"), std::string::npos) << e;
  fs::remove_all(out);
}

namespace {

struct ChildResult {
  int status = 0;
  std::string err;
};

// Runs argv with RLIMIT_FSIZE = limit bytes and SIGXFSZ ignored, so a write past the limit fails
// with EFBIG as on a full disk; stderr is captured through a pipe (no file size limit applies).
ChildResult run_with_file_limit(const std::vector<std::string>& argv, rlim_t limit) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 2);
    ::dup2(::open("/dev/null", O_WRONLY), 1);
    ::close(fds[0]);
    rlimit rl{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    ::signal(SIGXFSZ, SIG_IGN);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  ChildResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) r.err.append(buf, size_t(n));
  ::close(fds[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

bool has_temp_files(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(OutputSafety, FullDiskDuringLogitsLeavesNoFile) {
  const std::string dir = fresh_dir("disk_logits"), out = dir + "/logits.f32";
  const std::string shared = LT_SHARED_DIR;
  // stories260K's vocabulary is 512: a row of logits is 2048 bytes, over the 1000-byte limit
  auto r = run_with_file_limit({LT_LEANTUNE_BIN, "logits", "--model", shared + "/models/stories260K/stories260K.bin",
                                "--ids", "1,2,3", "--out", out}, 1000);
  ASSERT_TRUE(WIFEXITED(r.status)) << "ended by a signal: " << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.err;
  EXPECT_NE(r.err.find(out), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out)) << "a partial file under the final name";
  EXPECT_FALSE(has_temp_files(dir));
  fs::remove_all(dir);
}

// A checkpoint save that hits a full disk: exit 1 naming the file, the new checkpoint folder gone,
// LATEST still naming the previous one, which loads, and the message says so.
TEST(OutputSafety, FullDiskDuringACheckpointKeepsThePreviousOne) {
  const std::string out = fresh_dir("disk_ckpt");
  TrainConfig c = tiny_config(out);
  c.max_steps = 2;
  run_training(c);
  const std::string shared = LT_SHARED_DIR;
  const size_t state_bytes = fs::file_size(out + "/checkpoint-2/state.safetensors");
  // under the limit: metrics.jsonl and the JSON files; over it: state.safetensors
  const rlim_t limit = 64 * 1024;
  ASSERT_GT(state_bytes, limit);
  auto r = run_with_file_limit(
      {LT_LEANTUNE_BIN, "train", "--base_model", c.base_model, "--tokenizer", c.tokenizer, "--datasets",
       c.datasets[0].path, "--min_blank_lines", "2", "--method", "lora", "--lora_r", "4", "--lora_alpha", "8",
       "--lora_target_modules", "all-linear", "--micro_batch_size", "2", "--sequence_len", "64", "--max_steps", "4",
       "--save_steps", "2", "--eval_steps", "3", "--eval_batches", "1", "--lr_scheduler", "constant",
       "--learning_rate", "1e-3", "--threads", "1", "--output_dir", out, "--resume", "auto"},
      limit);
  ASSERT_TRUE(WIFEXITED(r.status)) << "ended by a signal: " << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.err;
  EXPECT_NE(r.err.find(out + "/checkpoint-4/state.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("previous checkpoint " + out + "/checkpoint-2 is intact"), std::string::npos) << r.err;
  EXPECT_EQ(read_text_file(out + "/LATEST"), "checkpoint-2");
  EXPECT_FALSE(fs::exists(out + "/checkpoint-4"));
  EXPECT_FALSE(has_temp_files(out));
  EXPECT_EQ(fs::file_size(out + "/checkpoint-2/state.safetensors"), state_bytes);
  const std::string sp = out + "/checkpoint-2/trainer_state.json";
  EXPECT_EQ(parse_trainer_state(read_text_file(sp), sp).step, 2);
  TensorSet ts;
  EXPECT_NO_THROW(load_safetensors(out + "/checkpoint-2/state.safetensors", ts));
  fs::remove_all(out);
}
