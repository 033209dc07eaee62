// The op profiler: a profiled training step records every op with FLOPs that add up to the
// model's FLOP count, self times that nest correctly, a valid Chrome trace, a full-storage
// policy that drops rather than allocates, and profiled tables that compute the same numbers.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/mapped_file.h"
#include "core/profiler.h"
#include "kernels/cpu/gemm.h"
#include "plan/flops.h"
#include "train/train_model.h"

using namespace lt;

namespace {

struct Tiny {
  ModelConfig cfg;
  std::vector<std::vector<float>> store;
  TensorSet ts;
  Tiny() {
    cfg.dim = 64; cfg.n_layers = 2; cfg.n_heads = 4; cfg.n_kv_heads = 2; cfg.head_dim = 16; cfg.hidden_dim = 160;
    cfg.vocab_size = 300; cfg.max_seq_len = 128;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0, 0.05f);
    auto add = [&](const std::string& n, std::vector<int64_t> shape) {
      size_t k = 1;
      for (auto s : shape) k *= size_t(s);
      store.emplace_back(k);
      for (auto& v : store.back()) v = nd(rng);
      TensorInfo t;
      t.name = n; t.shape = shape; t.data = store.back().data(); t.nbytes = k * 4; t.file = "memory";
      ts.add(t);
    };
    add("model.embed_tokens.weight", {300, 64});
    for (int l = 0; l < 2; ++l) {
      std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {64});
      add(p + "post_attention_layernorm.weight", {64});
      add(p + "self_attn.q_proj.weight", {64, 64});
      add(p + "self_attn.k_proj.weight", {32, 64});
      add(p + "self_attn.v_proj.weight", {32, 64});
      add(p + "self_attn.o_proj.weight", {64, 64});
      add(p + "mlp.gate_proj.weight", {160, 64});
      add(p + "mlp.up_proj.weight", {160, 64});
      add(p + "mlp.down_proj.weight", {64, 160});
    }
    add("model.norm.weight", {64});
    add("lm_head.weight", {300, 64});
    ts.source = "memory";
  }
};

float one_step(TrainModel& m, int N, int T) {
  std::vector<int> tok(N), lab(N), pos(N), doc(N);
  for (int i = 0; i < N; ++i) {
    tok[i] = (i * 13 + 5) % 300;
    lab[i] = (i + 1) % T ? (i * 7 + 2) % 300 : -100;
    pos[i] = i % T;
    doc[i] = i - i % T;
  }
  return m.forward_backward(tok.data(), lab.data(), pos.data(), doc.data(), 1.0f, 0);
}

}  // namespace

TEST(Profiler, RecordsEveryOpWithTheModelsFlopsAndAChromeTrace) {
  Tiny t;
  TrainModelOptions o;
  o.method = Method::Full;
  o.micro_batch = 2;
  o.seq_len = 32;
  TrainModel plain(t.cfg, t.ts, o, ops_cpu());
  const float want = one_step(plain, 64, 32);
  TrainModel plain2(t.cfg, t.ts, o, ops_cpu());  // loading leaves in-memory tensors intact
  EXPECT_EQ(one_step(plain2, 64, 32), want);

  prof::route(true);
  TrainModel m(t.cfg, t.ts, o, ops_cpu());
  prof::start(4096);
  const float got = one_step(m, 64, 32);
  prof::stop();
  prof::route(false);
  EXPECT_EQ(got, want);  // the profiled tables run the same kernels

  const std::string tab = prof::table();
  for (const char* op : {"gemm", "attention_train_forward", "attention_backward", "rmsnorm_backward",
                         "swiglu_forward", "lm_head_loss (softmax)", "embedding_backward"})
    EXPECT_NE(tab.find(op), std::string::npos) << op << "\n" << tab;
  // the recorded FLOPs: the model's count (GEMMs and attention) plus the elementwise ops (< 10%)
  const double model = training_flops_per_token(t.cfg, o).total() * 64;
  EXPECT_GT(prof::recorded_flops(), model);
  EXPECT_LT(prof::recorded_flops(), 1.1 * model);
  EXPECT_GT(prof::recorded_seconds(), 0);

  const std::string path =
      (std::filesystem::temp_directory_path() / ("lt_profile_test_" + std::to_string(::getpid()) + ".json")).string();
  prof::write_trace(path);
  auto j = nlohmann::json::parse(read_text_file(path));
  ASSERT_EQ(j["traceEvents"].size(), prof::recorded_events());
  for (const auto& e : j["traceEvents"]) {
    EXPECT_EQ(e["ph"], "X");
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_TRUE(e["args"].contains("flops"));
  }
  std::filesystem::remove(path);

  // storage full: later events are counted, not stored (nothing allocates mid-step)
  prof::route(true);
  TrainModel m2(t.cfg, t.ts, o, ops_cpu());
  prof::start(10);
  one_step(m2, 64, 32);
  prof::stop();
  prof::route(false);
  EXPECT_EQ(prof::recorded_events(), 10u);
  EXPECT_GT(prof::dropped_events(), 0u);
  EXPECT_NE(prof::table().find("not recorded"), std::string::npos);
}

// Ops called on the other threads of a team (the prefill slices of quant_linear.cpp and
// half_linear.cpp run a GEMM on each thread) are not recorded: only the thread that started the
// profiler pushes onto its stack (two threads pushing at once corrupted the heap under ASan).
TEST(Profiler, RecordsOnlyTheThreadThatStartedIt) {
  const int n = 16;
  std::vector<float> a(size_t(n) * n, 1.0f), b(size_t(n) * n, 1.0f);
  std::vector<std::vector<float>> c(8, std::vector<float>(size_t(n) * n));
  prof::start(4096);
  int team = 1;
#pragma omp parallel num_threads(4)
  {
#pragma omp single
    team = omp_get_num_threads();
    for (int r = 0; r < 50; ++r)
      cpu::gemm_f32(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c[size_t(omp_get_thread_num()) % 8].data(), n);
  }
  prof::stop();
  EXPECT_EQ(prof::recorded_events(), 50u) << "team of " << team;
  EXPECT_EQ(c[0][0], float(n));
}
