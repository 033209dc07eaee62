// A ZeRO run leaves the same outputs as a single-process run of the same config: on this job's
// ranks (1 in the main suite, 2 under dist_two_ranks), a full fine-tune and a LoRA run of
// stories260K, saved as a Hugging Face folder with a config.json, tokenizer_config.json and
// generation_config.json, must write report.html, ledger.json, metrics.jsonl and the model folder
// (model.safetensors plus the base's files, byte for byte) or the PEFT adapter: the same files
// with the same tensors, trained alike, and a ledger and metrics with the same fields.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/mapped_file.h"
#include "dist_test_config.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "api/run_training.h"

using namespace lt;
using lt::test::dist_config;
using lt::test::dist_dir;
using lt::test::reset_shared_dir;

namespace fs = std::filesystem;

namespace {

const char* const kBaseFiles[] = {"config.json", "tokenizer_config.json", "generation_config.json"};

// stories260K's tensors in an HF folder (rank 0 writes it once per job; every rank waits). The
// llama2.c weights are in the interleaved RoPE layout and the folder declares the halves layout,
// so it is another model than stories260K, but a valid one: what matters here is which files the
// runs write. The tokenizer stays tok512.bin (dist_config sets it).
const std::string& hf_base() {
  static const std::string dir = [] {
    const std::string d = dist_dir("outputs_hf_base");
    reset_shared_dir(d);
    if (world().rank() == 0) {
      const ModelFiles m = load_model_files(std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin");
      const ModelConfig& c = m.config;
      const nlohmann::json config = {
          {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", c.dim},
          {"intermediate_size", c.hidden_dim}, {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.max_seq_len}, {"rms_norm_eps", 1e-5}, {"rope_theta", c.rope_theta},
          {"tie_word_embeddings", c.tie_embeddings}, {"bos_token_id", 1}, {"eos_token_id", 2}};
      fs::create_directories(d);
      write_text_file_atomic(d + "/config.json", config.dump(1));
      write_text_file_atomic(d + "/tokenizer_config.json", R"({"model_max_length": 512, "padding_side": "right"})");
      write_text_file_atomic(d + "/generation_config.json", R"({"bos_token_id": 1, "eos_token_id": 2})");
      save_safetensors(d + "/model.safetensors", m.tensors);
    }
    world().barrier();
    return d;
  }();
  return dir;
}

TrainConfig outputs_config(const std::string& method) {
  TrainConfig c = dist_config(method, 2);
  c.base_model = hf_base();
  return c;
}

// The files of a run's output folder, relative to it, without the checkpoints (the sharded format
// differs from one process's by design) and the ZeRO ranks' own ledger-rank<r>.json.
std::set<std::string> output_files(const std::string& dir) {
  std::set<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    if (!e.is_regular_file() || rel.rfind("checkpoint-", 0) == 0 || rel == "LATEST" || rel.rfind("ledger-rank", 0) == 0)
      continue;
    files.insert(rel);
  }
  return files;
}

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.insert(it.key());
  return k;
}

// ||got - want|| against ||want - start|| over the tensors of `want` whose name contains `part`
// (start: null for zeros).
double relative_update_error(const TensorSet& got, const TensorSet& want, const TensorSet* start,
                             const std::string& part) {
  double err = 0, update = 0;
  for (const auto& [name, w] : want.all()) {
    if (name.find(part) == std::string::npos) continue;
    const TensorInfo* g = got.find(name);
    const TensorInfo* s = start ? start->find(name) : nullptr;
    const auto* wp = static_cast<const float*>(w.data);
    const auto* gp = static_cast<const float*>(g->data);
    const auto* sp = s ? static_cast<const float*>(s->data) : nullptr;
    for (int64_t i = 0; i < w.numel(); ++i) {
      err += std::pow(double(gp[i]) - wp[i], 2);
      update += std::pow(double(wp[i]) - (sp ? sp[i] : 0.0), 2);
    }
  }
  return update > 0 ? std::sqrt(err / update) : INFINITY;
}

// The same tensors (names, f32, shapes), trained alike: for the tensors named with `part`, the
// difference is small against their update from `start`.
void expect_same_tensors(const std::string& file, const std::string& ref_file, const std::string& what,
                         const TensorSet* start, const std::string& part) {
  TensorSet got, want;
  load_safetensors(file, got);
  load_safetensors(ref_file, want);
  ASSERT_EQ(got.all().size(), want.all().size()) << what;
  for (const auto& [name, w] : want.all()) {
    const TensorInfo* g = got.find(name);
    ASSERT_NE(g, nullptr) << what << ": " << name << " missing";
    EXPECT_EQ(g->dtype, DType::F32) << what << ": " << name;
    EXPECT_EQ(g->shape, w.shape) << what << ": " << name;
  }
  // The losses agree within 1e-5 relative, so the gradients do to about that; AdamW's update
  // m/(sqrt(v)+eps) follows them except for the rare elements whose gradient is near eps, where a
  // tiny difference can change that element's update by up to lr per step. Measured over the
  // whole update (the trained weights minus the starting ones) the difference stays far below 1%;
  // weights left untrained or taken from the wrong tensor would differ by about 100%.
  const double e = relative_update_error(got, want, start, part);
  std::printf("%s, %d rank(s): trained tensors differ from one process's by %.2e of the update\n", what.c_str(),
              world().size(), e);
  EXPECT_LT(e, 1e-2) << what;
}

}  // namespace

class DistZeroOutputs : public testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(DistZeroOutputs, SameFilesAsOneProcess) {
  const auto [method, stage] = GetParam();
  const std::string name = "outputs_" + method + "_zero" + std::to_string(stage);
  // one process with the whole global batch (accumulation 2), in a folder of this rank's own
  TrainConfig single = outputs_config(method);
  single.gradient_accumulation_steps = 2;
  single.output_dir = dist_dir(name + "_single", true);
  fs::remove_all(single.output_dir);
  run_training_single(single);
  TrainConfig zc = outputs_config(method);
  zc.output_dir = dist_dir(name);
  reset_shared_dir(zc.output_dir);
  ZeroOptions z;
  z.stage = stage;
  run_training_zero(zc, z, world());
  world().barrier();  // rank 0's files are complete

  if (world().rank() == 0) {
    const std::set<std::string> got = output_files(zc.output_dir), want = output_files(single.output_dir);
    EXPECT_EQ(got, want) << name;
    for (const char* f : {"report.html", "ledger.json", "metrics.jsonl"}) EXPECT_TRUE(got.count(f)) << name << ": " << f;
    if (method == "full") {
      EXPECT_TRUE(got.count("model/model.safetensors")) << name;
      for (const char* f : kBaseFiles)  // copied from the base, byte for byte
        EXPECT_EQ(read_text_file(zc.output_dir + "/model/" + f), read_text_file(hf_base() + "/" + f)) << name << ": " << f;
      TensorSet base;
      load_safetensors(hf_base() + "/model.safetensors", base);
      expect_same_tensors(zc.output_dir + "/model/model.safetensors", single.output_dir + "/model/model.safetensors",
                          name, &base, "");
    } else {
      EXPECT_TRUE(got.count("adapter/adapter_config.json") && got.count("adapter/adapter_model.safetensors")) << name;
      EXPECT_EQ(read_text_file(zc.output_dir + "/adapter/adapter_config.json"),
                read_text_file(single.output_dir + "/adapter/adapter_config.json")) << name;
      // lora_B starts at zero, so its values are its update (lora_A's are mostly its random start)
      expect_same_tensors(zc.output_dir + "/adapter/adapter_model.safetensors",
                          single.output_dir + "/adapter/adapter_model.safetensors", name, nullptr, "lora_B");
    }

    // ledger.json: the same fields; planned as this rank's plan, with the engine's shards measured
    const auto ledger = nlohmann::json::parse(read_text_file(zc.output_dir + "/ledger.json"));
    const auto ref_ledger = nlohmann::json::parse(read_text_file(single.output_dir + "/ledger.json"));
    EXPECT_EQ(keys(ledger), keys(ref_ledger)) << name;
    auto phases = [](const nlohmann::json& l) {
      std::set<std::string> p;
      for (const auto& s : l["samples"]) p.insert(s["phase"].get<std::string>());
      return p;
    };
    EXPECT_EQ(phases(ledger), phases(ref_ledger)) << name << ": the first step's timeline";
    EXPECT_TRUE(phases(ledger).count("optimizer")) << name;
    EXPECT_GT(ledger["planned"]["optimizer_state"].get<size_t>(), 0u) << name;
    EXPECT_GT(ledger["max_resident"]["optimizer_state"].get<size_t>(), 0u) << name << ": the engine's moments";
    // report.html: drawn from both, as for one process
    const std::string report = read_text_file(zc.output_dir + "/report.html");
    EXPECT_NE(report.find("<h2>Memory</h2>"), std::string::npos) << name;

    // metrics.jsonl: the same records, each with at least one process's fields
    std::istringstream zm(read_text_file(zc.output_dir + "/metrics.jsonl")),
        sm(read_text_file(single.output_dir + "/metrics.jsonl"));
    int n = 0;
    for (std::string zl, sl; std::getline(sm, sl); ++n) {
      ASSERT_TRUE(std::getline(zm, zl)) << name << ": record " << n << " missing";
      const std::set<std::string> zk = keys(nlohmann::json::parse(zl)), sk = keys(nlohmann::json::parse(sl));
      for (const auto& k : sk) EXPECT_TRUE(zk.count(k)) << name << ": record " << n << " lacks " << k;
    }
    EXPECT_GT(n, 4) << name;  // 4 steps and the evaluations
  }
  world().barrier();
  fs::remove_all(single.output_dir);
  reset_shared_dir(zc.output_dir);
}

INSTANTIATE_TEST_SUITE_P(DistZero, DistZeroOutputs,
                         testing::Combine(testing::Values("full", "lora"), testing::Values(0, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_stage" + std::to_string(std::get<1>(info.param));
                         });
