// `leantune demo --synthetic` (api/demo.h): a tiny random Llama trained from scratch on synthetic
// additions, then LoRA-tuned on the same sums in words; nothing needs to be on disk beforehand.
#include "api/demo.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "core/atomic_file.h"
#include "io/safetensors.h"
#include "api/run_training.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

// GPT-2's byte-to-unicode map: printable bytes map to themselves, the rest to U+0100 onwards.
std::string byte_char(int b) {
  auto printable = [](int c) { return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255); };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c)
      if (!printable(c)) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

void write_byte_tokenizer(const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 256}, {"content", "<|endoftext|>"}, {"special", true}, {"single_word", false},
                         {"lstrip", false}, {"rstrip", false}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                         {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                 {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  write_text_file_atomic((dir / "tokenizer.json").string(), j.dump());
}

void write_random_llama(const fs::path& dir, uint64_t seed) {
  const int C = 128, L = 4, NH = 4, NKV = 2, HS = C / NH, F = 384, V = 257;
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", C},
                        {"num_hidden_layers", L}, {"num_attention_heads", NH}, {"num_key_value_heads", NKV},
                        {"intermediate_size", F}, {"vocab_size", V}, {"max_position_embeddings", 256},
                        {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"tie_word_embeddings", true},
                        {"eos_token_id", 256}, {"torch_dtype", "float32"}};
  write_text_file_atomic((dir / "config.json").string(), cfg.dump(1));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<std::vector<float>> store;
  std::vector<TensorInfo> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool ones) {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    store.emplace_back(n);
    for (auto& v : store.back()) v = ones ? 1.0f : nd(rng);
    TensorInfo t;
    t.name = name; t.dtype = DType::F32; t.shape = shape; t.data = store.back().data(); t.nbytes = n * 4;
    ts.push_back(t);
  };
  add("model.embed_tokens.weight", {V, C}, false);
  for (int l = 0; l < L; ++l) {
    auto p = fmt::format("model.layers.{}.", l);
    add(p + "input_layernorm.weight", {C}, true);
    add(p + "post_attention_layernorm.weight", {C}, true);
    add(p + "self_attn.q_proj.weight", {NH * HS, C}, false);
    add(p + "self_attn.k_proj.weight", {NKV * HS, C}, false);
    add(p + "self_attn.v_proj.weight", {NKV * HS, C}, false);
    add(p + "self_attn.o_proj.weight", {C, NH * HS}, false);
    add(p + "mlp.gate_proj.weight", {F, C}, false);
    add(p + "mlp.up_proj.weight", {F, C}, false);
    add(p + "mlp.down_proj.weight", {C, F}, false);
  }
  add("model.norm.weight", {C}, true);
  save_safetensors((dir / "model.safetensors").string(), ts);
}

// words = false: "23+45=68"; words = true (the shifted task): "23 plus 45 is 68".
void write_corpus(const fs::path& path, bool words, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string text;
  for (int i = 0; i < n; ++i) {
    int a = int(rng() % 90) + 10, b = int(rng() % 90) + 10;
    text += words ? fmt::format("{} plus {} is {}\n\n", a, b, a + b) : fmt::format("{}+{}={}\n\n", a, b, a + b);
  }
  write_text_file_atomic(path.string(), text);
}

// Greedy answers, one line each (the prompt, then its continuation up to the line's end).
void samples(const std::string& title, const std::string& model_dir, const std::string& tokenizer,
             const std::string& adapter, const std::vector<std::string>& prompts, int max_new) {
  std::vector<std::string> out = demo_samples(model_dir, tokenizer, adapter, prompts, max_new, {"\n"}, 1.0f);
  fmt::print("\n{}:\n", title);
  for (size_t i = 0; i < prompts.size(); ++i) fmt::print("  {}{}\n", prompts[i], out[i]);
}

}  // namespace

void run_synthetic_demo(const DemoOptions& o) {
  fs::path dir = o.dir;
  fs::create_directories(dir);
  const int lora_steps = o.lora_steps > 0 ? o.lora_steps : 80;
  fs::path base = dir / "base";
  fs::create_directories(base);
  write_byte_tokenizer(base);
  write_random_llama(base, 1);
  write_corpus(dir / "additions.txt", false, 4000, 2);
  write_corpus(dir / "additions_in_words.txt", true, 2000, 3);
  fmt::print("demo: a {}-layer Llama with random weights and a byte-level tokenizer in {}\n"
             "phase 1: train it from scratch on two-digit additions (full training), phase 2: LoRA on "
             "the same sums written in words\n\n", 4, base.string());
  std::vector<std::string> add_prompts = {"23+45=", "61+17=", "38+29="}, word_prompts = {"23 plus 45 is", "61 plus 17 is", "38 plus 29 is"};
  const std::string tok = base.string();

  TrainConfig c1 = demo_train_config(base.string(), tok, (dir / "additions.txt").string(), dir / "pretrain", o.threads);
  c1.method = Method::Full;
  c1.max_steps = o.pretrain_steps;
  c1.learning_rate = 3e-3;
  c1.warmup_steps = std::min(20, o.pretrain_steps);
  c1.weight_decay = 0.01;
  c1.sequence_len = 64;
  c1.micro_batch_size = 16;
  run_training(c1);
  const std::string pretrained = (dir / "pretrain" / "model").string();
  samples("after phase 1 (additions)", pretrained, tok, "", add_prompts, 6);
  samples("before phase 2 (the pretrained model, asked in words)", pretrained, tok, "", word_prompts, 6);

  fmt::print("\n");
  TrainConfig c2 = demo_train_config(pretrained, tok, (dir / "additions_in_words.txt").string(), dir / "lora", o.threads);
  c2.method = Method::Lora;
  c2.lora.r = 8;
  c2.lora.alpha = 16;
  c2.lora.target_modules = {"all-linear"};
  c2.max_steps = lora_steps;
  c2.learning_rate = 5e-3;
  c2.warmup_steps = std::min(10, lora_steps);
  c2.sequence_len = 64;
  c2.micro_batch_size = 16;
  run_training(c2);
  samples("after phase 2 (LoRA on sums in words)", pretrained, tok, (dir / "lora" / "adapter").string(), word_prompts, 6);
  fmt::print("\nwritten: {} (base model, corpora, pretrain/model, lora/adapter, metrics.jsonl files)\n", dir.string());
}

}  // namespace lt
