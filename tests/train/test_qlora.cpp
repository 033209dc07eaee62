// QLoRA: LoRA on quantized frozen weights. On a small random Llama (with q/k/v biases), the loss
// and every LoRA gradient over an NF4 + double quant, FP4 or int8 base equal those of the fp32
// base holding the dequantized weights (int8 with every column an outlier: its product is then
// f32); a folder written by quantize_model trains to the same bits without re-quantizing; bad
// configs and files are clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/quant_model.h"
#include "io/safetensors.h"
#include "train/train_config.h"
#include "train/train_model.h"

using namespace lt;
namespace fs = std::filesystem;

namespace {

bool is_linear(const std::string& n) { return n.find("_proj.weight") != std::string::npos; }

// Random weights for a small Llama; `transform` rewrites each linear weight (rows, cols) in place.
struct RandModel {
  ModelConfig cfg;
  std::vector<std::vector<float>> store;
  std::vector<TensorInfo> list;
  TensorSet ts;

  explicit RandModel(const std::function<void(std::vector<float>&, int64_t, int64_t)>& transform = nullptr) {
    cfg.dim = 64; cfg.n_layers = 2; cfg.n_heads = 4; cfg.n_kv_heads = 2; cfg.head_dim = 16; cfg.hidden_dim = 96;
    cfg.vocab_size = 50; cfg.max_seq_len = 64; cfg.attention_bias = cfg.o_proj_bias = true;  // Llama attention_bias
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0, 0.1f);
    store.reserve(64);
    auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm) {
      size_t n = 1;
      for (auto s : shape) n *= size_t(s);
      auto& v = store.emplace_back(n);
      for (auto& x : v) x = norm ? 1.0f + nd(rng) : nd(rng);
      if (transform && is_linear(name)) transform(v, shape[0], shape[1]);
      TensorInfo t;
      t.name = name; t.shape = shape; t.data = v.data(); t.nbytes = n * 4; t.file = "memory";
      list.push_back(t);
      ts.add(t);
    };
    const int64_t C = 64, QD = 64, KVD = 32, F = 96, V = 50;
    add("model.embed_tokens.weight", {V, C}, false);
    for (int l = 0; l < 2; ++l) {
      auto p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {C}, true);
      add(p + "post_attention_layernorm.weight", {C}, true);
      add(p + "self_attn.q_proj.weight", {QD, C}, false);
      add(p + "self_attn.k_proj.weight", {KVD, C}, false);
      add(p + "self_attn.v_proj.weight", {KVD, C}, false);
      add(p + "self_attn.q_proj.bias", {QD}, false);
      add(p + "self_attn.k_proj.bias", {KVD}, false);
      add(p + "self_attn.v_proj.bias", {KVD}, false);
      add(p + "self_attn.o_proj.weight", {C, QD}, false);
      add(p + "mlp.gate_proj.weight", {F, C}, false);
      add(p + "mlp.up_proj.weight", {F, C}, false);
      add(p + "mlp.down_proj.weight", {C, F}, false);
    }
    add("model.norm.weight", {C}, true);
    add("lm_head.weight", {V, C}, false);
    for (int l = 0; l < 2; ++l)  // last, so that the other tensors keep their random values
      add("model.layers." + std::to_string(l) + ".self_attn.o_proj.bias", {C}, false);
    ts.source = "memory";
  }

  // An HF folder (config.json + model.safetensors) holding these weights.
  void save(const fs::path& dir) const {
    fs::create_directories(dir);
    nlohmann::json j = {{"model_type", "llama"}, {"hidden_size", 64}, {"num_hidden_layers", 2},
                        {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 96},
                        {"vocab_size", 50}, {"max_position_embeddings", 64}, {"attention_bias", true}};
    write_text_file_atomic((dir / "config.json").string(), j.dump());
    save_safetensors((dir / "model.safetensors").string(), list);
  }
};

TrainModelOptions lora_options(const char* quant, bool dq) {
  TrainModelOptions o;
  o.method = Method::Lora;
  o.lora.r = 4;
  o.lora.alpha = 8;
  o.lora.target_modules = {"all-linear"};
  o.micro_batch = 2;
  o.seq_len = 16;
  o.seed = 9;
  o.quantization = parse_quantization(quant);
  o.double_quant = dq;
  return o;
}

struct Result {
  float loss;
  std::vector<std::string> names;
  std::vector<std::vector<float>> grads;
};

// One forward/backward with non-zero LoRA B (so that A gets gradients too).
Result run(const ModelConfig& cfg, const TensorSet& ts, const TrainModelOptions& o) {
  TrainModel m(cfg, ts, o, ops_cpu());
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 0.2f);
  for (auto& p : m.params())
    for (size_t i = 0; i < p.n; ++i) p.p[i] += nd(rng);
  const int N = o.micro_batch * o.seq_len;
  std::vector<int> tok(N), lab(N), pos(N), doc(N);
  for (int i = 0; i < N; ++i) {
    tok[i] = (i * 7 + 3) % cfg.vocab_size;
    pos[i] = i % o.seq_len;
    doc[i] = i - i % o.seq_len;
    lab[i] = (i + 1) % o.seq_len ? (i * 5 + 1) % cfg.vocab_size : kIgnoreLabel;
  }
  m.zero_grads();
  Result r;
  r.loss = m.forward_backward(tok.data(), lab.data(), pos.data(), doc.data(), 1.0f, 1);
  for (const auto& p : m.params()) {
    r.names.push_back(p.name);
    r.grads.emplace_back(p.g, p.g + p.n);
  }
  return r;
}

// Largest relative L2 difference between matching gradients.
double worst_rel_diff(const Result& a, const Result& b) {
  EXPECT_EQ(a.names, b.names);
  double worst = 0;
  for (size_t t = 0; t < a.grads.size(); ++t) {
    double d = 0, n = 0;
    for (size_t i = 0; i < a.grads[t].size(); ++i) {
      d += std::pow(double(a.grads[t][i]) - b.grads[t][i], 2);
      n += std::pow(double(b.grads[t][i]), 2);
    }
    EXPECT_GT(n, 0) << a.names[t];
    worst = std::max(worst, std::sqrt(d / n));
  }
  return worst;
}

// The fp32 model holding dequantize(quantize(W)) for every linear weight.
RandModel dequantized_model(const QuantSpec& spec) {
  return RandModel([spec](std::vector<float>& w, int64_t rows, int64_t cols) {
    std::vector<uint8_t> buf(quant_storage_bytes(spec, rows, cols) + 64);
    void* st = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
    dequantize_weight(w.data(), quantize_weight(st, buf.size() - 64, w.data(), rows, cols, spec));
  });
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(QLora, GradientsEqualTheFp32BaseWithDequantizedWeights) {
  struct Case { const char* quant; bool dq; float threshold; double tol, loss_tol; };
  // int8 with threshold 1e-6: every column is an outlier, so its forward product is f32 too; at
  // the default 6.0 activations are rounded to int8 (about 1/127 relative) and only agree roughly
  const Case cases[] = {{"nf4", true, 6, 1e-4, 1e-5}, {"nf4", false, 6, 1e-4, 1e-5}, {"fp4", true, 6, 1e-4, 1e-5},
                        {"int8", false, 1e-6f, 1e-4, 1e-5}, {"int8", false, 6, 5e-2, 3e-3}};
  for (const auto& c : cases) {
    TrainModelOptions o = lora_options(c.quant, c.dq);
    o.int8_threshold = c.threshold;
    RandModel base;
    const Result q = run(base.cfg, base.ts, o);
    QuantSpec spec{parse_quant_type(c.quant), 64, c.dq};
    RandModel deq = dequantized_model(spec);
    const Result f = run(deq.cfg, deq.ts, lora_options("none", false));
    const std::string what = fmt::format("{} dq {} threshold {}", c.quant, c.dq, c.threshold);
    EXPECT_NEAR(q.loss, f.loss, c.loss_tol * std::fabs(f.loss)) << what;
    const double worst = worst_rel_diff(q, f);
    EXPECT_LE(worst, c.tol) << what;
    if (c.tol > 1e-3) {
      EXPECT_GT(worst, 1e-6) << what << ": the int8 activation rounding should show";
    }
  }
  // and the quantization is not a no-op: the fp32 base's own gradients differ
  RandModel plain;
  RandModel base;
  const double vs_plain = worst_rel_diff(run(base.cfg, base.ts, lora_options("nf4", true)),
                                         run(plain.cfg, plain.ts, lora_options("none", false)));
  EXPECT_GT(vs_plain, 1e-3);
}

TEST(QLora, QuantizedFolderTrainsToTheSameBitsWithoutRequantizing) {
  const fs::path dir = fs::temp_directory_path() / ("lt_qlora_folder_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RandModel(nullptr).save(dir / "f32");
  quantize_model((dir / "f32").string(), {QuantType::NF4, 64, true}, (dir / "nf4").string());
  ModelFiles src = load_model_files((dir / "f32").string());
  ModelFiles q = load_model_files((dir / "nf4").string());
  EXPECT_EQ(q.config.quantization, QuantType::NF4);
  EXPECT_TRUE(q.config.quant_double_quant);
  EXPECT_EQ(q.tensors.find("model.layers.0.self_attn.q_proj.weight"), nullptr);
  EXPECT_NE(q.tensors.find("model.layers.0.self_attn.q_proj.weight.qabsmax"), nullptr);
  EXPECT_NE(q.tensors.find("model.layers.0.self_attn.q_proj.bias"), nullptr);
  const Result on_load = run(src.config, src.tensors, lora_options("nf4", true));
  const Result stored = run(q.config, q.tensors, lora_options("none", false));
  EXPECT_EQ(on_load.loss, stored.loss);
  EXPECT_EQ(on_load.grads, stored.grads);
  // naming the stored format explicitly is accepted too
  ModelFiles q2 = load_model_files((dir / "nf4").string());
  EXPECT_EQ(run(q2.config, q2.tensors, lora_options("nf4", true)).grads, stored.grads);
  fs::remove_all(dir);
}

TEST(QLora, BadQuantizedFilesAndRequestsAreClearErrors) {
  const fs::path dir = fs::temp_directory_path() / ("lt_qlora_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RandModel(nullptr).save(dir / "f32");
  const std::string nf4 = (dir / "nf4").string();
  quantize_model((dir / "f32").string(), {QuantType::NF4, 64, true}, nf4);
  // quantizing an already quantized model, to another type or the same
  std::string e = error_of([&] { quantize_model(nf4, {QuantType::Int8, 64, false}, (dir / "x").string()); });
  EXPECT_NE(e.find("already quantized (nf4, block size 64, double quant on)"), std::string::npos) << e;
  e = error_of([&] { quantize_model(nf4, {QuantType::NF4, 64, true}, (dir / "x").string()); });
  EXPECT_NE(e.find("already quantized"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "x"));
  // training a stored nf4 model as int8, or with full fine-tuning
  {
    ModelFiles q = load_model_files(nf4);
    e = error_of([&] { run(q.config, q.tensors, lora_options("int8", false)); });
    EXPECT_NE(e.find("already quantized (nf4"), std::string::npos) << e;
    TrainModelOptions full = lora_options("none", false);
    full.method = Method::Full;
    e = error_of([&] { plan_training(q.config, full); });
    EXPECT_NE(e.find("stored quantized (nf4)"), std::string::npos) << e;
  }
  // truncated scales / a missing part: the tensor is named
  auto rewrite = [&](const std::string& out, const std::function<bool(TensorInfo&)>& edit) {
    TensorSet ts;
    load_safetensors(nf4 + "/model.safetensors", ts);
    std::vector<TensorInfo> list;
    for (auto [name, t] : ts.all())
      if (edit(t)) list.push_back(t);
    fs::create_directories(out);
    save_safetensors(out + "/model.safetensors", list);
    fs::copy_file(nf4 + "/config.json", out + "/config.json", fs::copy_options::overwrite_existing);
  };
  const std::string trunc = (dir / "trunc").string(), nooff = (dir / "nooff").string();
  rewrite(trunc, [](TensorInfo& t) {
    if (t.name == "model.layers.1.mlp.down_proj.weight.qabsmax") {  // 96 blocks -> 95
      t.shape = {95};
      t.nbytes = 95;
    }
    return true;
  });
  rewrite(nooff, [](TensorInfo& t) { return t.name != "model.layers.0.mlp.up_proj.weight.offset"; });
  {
    ModelFiles q = load_model_files(trunc);
    e = error_of([&] { run(q.config, q.tensors, lora_options("none", false)); });
    EXPECT_NE(e.find("'model.layers.1.mlp.down_proj.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("has 95 values, expected 96"), std::string::npos) << e;
  }
  {
    ModelFiles q = load_model_files(nooff);
    e = error_of([&] { run(q.config, q.tensors, lora_options("none", false)); });
    EXPECT_NE(e.find("missing tensor 'model.layers.0.mlp.up_proj.weight.offset'"), std::string::npos) << e;
  }
  // a quantization_config with a bad block size or another tool's format
  auto config_error = [&](const nlohmann::json& qc) {
    nlohmann::json j = nlohmann::json::parse(read_text_file(nf4 + "/config.json"));
    j["quantization_config"] = qc;
    write_text_file_atomic(trunc + "/config.json", j.dump());
    return error_of([&] { load_model_files(trunc); });
  };
  e = config_error({{"quant_method", "leantune"}, {"type", "nf4"}, {"blocksize", 100}});
  EXPECT_NE(e.find("quantization_config: 4-bit quantization: block size 100 is not supported"), std::string::npos) << e;
  e = config_error({{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}});
  EXPECT_NE(e.find("quant_method 'bitsandbytes' is not supported"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(QLora, ConfigKeysAreValidated) {
  auto cfg_error = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"--base_model", "m", "--datasets", "d"});
    return error_of([&] { validate_train_config(parse_train_args(args)); });
  };
  for (const char* bs : {"100", "32", "8192", "0"}) {
    std::string e = cfg_error({"--quantization", "nf4", "--quant-blocksize", bs});
    EXPECT_NE(e.find(fmt::format("quant_blocksize {} is not a power of two from 64 to 4096", bs)), std::string::npos)
        << e;
  }
  std::string e = cfg_error({"--quantization", "nf5"});
  EXPECT_NE(e.find("quantization 'nf5' is not one of none, nf4, fp4, int8"), std::string::npos) << e;
  e = cfg_error({"--quantization", "nf4", "--method", "full"});
  EXPECT_NE(e.find("Use method: lora (QLoRA) or quantization: none"), std::string::npos) << e;
  e = cfg_error({"--quantization", "int8", "--double-quant", "true"});
  EXPECT_NE(e.find("double_quant applies to nf4 and fp4"), std::string::npos) << e;
  e = cfg_error({"--quantization", "int8", "--int8-threshold", "-1"});
  EXPECT_NE(e.find("int8_threshold must be >= 0"), std::string::npos) << e;
  TrainConfig ok = parse_train_args({"--base_model", "m", "--datasets", "d", "--quantization", "nf4",
                                     "--double_quant", "true", "--quant_blocksize", "128", "--int8_threshold", "0"});
  validate_train_config(ok);
  const TrainModelOptions o = train_model_options(ok);
  EXPECT_EQ(o.quantization, QuantType::NF4);
  EXPECT_TRUE(o.double_quant);
  EXPECT_EQ(o.quant_blocksize, 128);
  EXPECT_EQ(o.int8_threshold, 0.0f);
  // the model-level check names the options too (TrainModelOptions built by hand)
  RandModel m;
  TrainModelOptions bad = lora_options("nf4", false);
  bad.quant_blocksize = 96;
  e = error_of([&] { plan_training(m.cfg, bad); });
  EXPECT_NE(e.find("block size 96 is not supported"), std::string::npos) << e;
}
