// The fuzz harnesses in the normal test suite: every input under tests/fuzz/regressions/<fuzzer>/
// (crashes libFuzzer found, kept after the fix) is replayed through the same entry point and must
// end in success or an lt::Error (under ASan/UBSan, any memory error fails the run); and each
// harness must accept a valid input, so a harness that rejects everything early cannot pass as a
// fuzzer that finds nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <typeinfo>

#include "core/error.h"
#include "fuzz_common.h"
#include "io/peft_adapter.h"
#include "model/gguf_export.h"
#include "io/safetensors.h"
#include "tokenizer/hf_components.h"

namespace fs = std::filesystem;

namespace {

const std::map<std::string, lt::fuzz::Harness>& harnesses() {
  static const std::map<std::string, lt::fuzz::Harness> m = {
      {"fuzz_safetensors", lt::fuzz::safetensors},         {"fuzz_hf_config", lt::fuzz::hf_config},
      {"fuzz_tokenizer_json", lt::fuzz::tokenizer_json},   {"fuzz_llama2c_model", lt::fuzz::llama2c_model},
      {"fuzz_llama2c_tokenizer", lt::fuzz::llama2c_tokenizer}, {"fuzz_adapter_config", lt::fuzz::adapter_config},
      {"fuzz_train_yaml", lt::fuzz::train_yaml},           {"fuzz_jsonl_data", lt::fuzz::jsonl_data},
      {"fuzz_trainer_state", lt::fuzz::trainer_state},     {"fuzz_gguf", lt::fuzz::gguf},
      {"fuzz_chat_template", lt::fuzz::chat_template},     {"fuzz_openai_request", lt::fuzz::openai_request}};
  return m;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "" when `h` accepted or cleanly rejected the input; else what escaped.
std::string run_clean(lt::fuzz::Harness h, const std::string& bytes) {
  try {
    h(bytes);
  } catch (const lt::Error&) {
  } catch (const std::exception& e) {
    return std::string(typeid(e).name()) + ": " + e.what();
  }
  return "";
}

// A llama2.c checkpoint: dim 8, hidden 16, 1 layer, 2 heads, 1 kv head, vocab 32 (shared), seq_len 8.
std::string tiny_llama2c_model() {
  const int32_t h[7] = {8, 16, 1, 2, 1, 32, 8};
  const int C = 8, F = 16, V = 32, T = 8, HS = 4, KVD = 4;
  size_t floats = V * C + C + C * C + 2 * KVD * C + C * C + C + 3 * F * C + C + 2 * T * (HS / 2);
  std::string out(reinterpret_cast<const char*>(h), sizeof h);
  for (size_t i = 0; i < floats; ++i) {
    float v = float(int(i * 7919 % 97) - 48) / 200.0f;
    out.append(reinterpret_cast<const char*>(&v), 4);
  }
  return out;
}

std::string tiny_safetensors() {
  float w[6] = {1, 2, 3, 4, 5, 6};
  lt::TensorInfo t;
  t.name = "w";
  t.shape = {2, 3};
  t.data = w;
  t.nbytes = sizeof w;
  fs::path p = fs::temp_directory_path() / ("lt_fuzz_tiny_" + std::to_string(::getpid()) + ".safetensors");
  lt::save_safetensors(p.string(), {t}, {{"format", "pt"}});
  std::string bytes = read_bytes(p);
  fs::remove(p);
  return bytes;
}

// A llama GGUF (dim 32, 1 layer, 2 heads, vocab 16, q8_0 linears) with a gpt2 tokenizer.
std::string tiny_gguf() {
  lt::ModelConfig c;
  c.dim = 32, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 16, c.hidden_dim = 32;
  c.vocab_size = 16, c.max_seq_len = 16;
  lt::gguf::Vocab v;
  v.model = "gpt2";
  for (int i = 0; i < 16; ++i) v.tokens.push_back(std::string(1, char('a' + i)));
  std::vector<float> w(size_t(32 * 32));  // the largest tensor; every tensor takes its first values
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 7919 % 97) - 48) / 200.0f;
  fs::path p = fs::temp_directory_path() / ("lt_fuzz_tiny_" + std::to_string(::getpid()) + ".gguf");
  lt::gguf::write_model_gguf(p.string(), c, [&](const std::string&) { return w.data(); }, v,
                             lt::gguf::TensorType::Q8_0, "tiny");
  std::string bytes = read_bytes(p);
  fs::remove(p);
  return bytes;
}

// A byte-level BPE tokenizer.json: the 256 byte characters, one merge, one special token.
std::string tiny_tokenizer_json() {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string c = lt::hf::byte_to_char(static_cast<uint8_t>(b));
    std::string esc = c == "\"" ? "\\\"" : c == "\\" ? "\\\\" : c;
    vocab += "\"" + esc + "\": " + std::to_string(b) + ", ";
  }
  return R"({"added_tokens": [{"id": 257, "content": "<|eot|>", "special": true, "normalized": false}],
    "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {)" + vocab + R"("hi": 256}, "merges": ["h i"]}})";
}

}  // namespace

TEST(FuzzRegressions, EveryKeptCrashInputEndsCleanly) {
  fs::path root = fs::path(LT_SOURCE_DIR) / "tests/fuzz/regressions";
  if (!fs::is_directory(root)) GTEST_SKIP() << "no regression inputs under " << root;
  int n = 0;
  for (const auto& dir : fs::directory_iterator(root)) {
    auto it = harnesses().find(dir.path().filename().string());
    ASSERT_NE(it, harnesses().end()) << dir.path() << " does not name a fuzzer (fuzz_<format>)";
    for (const auto& f : fs::directory_iterator(dir.path())) {
      std::string what = run_clean(it->second, read_bytes(f.path()));
      EXPECT_EQ(what, "") << f.path();
      ++n;
    }
  }
  EXPECT_GT(n, 0);
}

TEST(FuzzRegressions, HarnessesAcceptValidInputs) {
  using namespace lt::fuzz;
  const std::string config = R"({"model_type": "llama", "hidden_size": 8, "intermediate_size": 16,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5})";
  const std::pair<Harness, std::string> valid[] = {
      {hf_config, config},
      {tokenizer_json, tiny_tokenizer_json()},
      {adapter_config, lt::peft_adapter_config_json(lt::LoraConfig{}, "base")},
      {llama2c_tokenizer, small_tokenizer_bytes()},
      {llama2c_model, tiny_llama2c_model()},
      {safetensors, tiny_safetensors()},
      {jsonl_data, "{\"text\": \"the cat\"}\n\n{\"prompt\": \"a\", \"completion\": \"b\"}\n"},
      {train_yaml, "base_model: m.bin\ndatasets:\n  - path: d.jsonl\nlora_r: 4\n"},
      {trainer_state, R"({"step": 2, "epoch": 0, "position": 4, "losses": [3.5, 3.25], "metrics_records": 3})"},
      {gguf, tiny_gguf()},
      {chat_template, "{% for m in messages %}<{{ m.role }}>{{ m.content | default('') | tojson }}{% endfor %}"
                      "{% if add_generation_prompt %}<assistant>{% endif %}"},
      {openai_request, R"({"prompt": "Once upon", "max_tokens": 4, "temperature": 0, "stop": ["."]})"}};
  for (const auto& [h, bytes] : valid) {
    try {
      h(bytes);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "valid input rejected: " << e.what() << "\n" << bytes.substr(0, 200);
    }
  }
}

TEST(FuzzRegressions, HarnessesRejectTruncatedInputsCleanly) {
  // The clean-rejection path the fuzzers live on: each valid input cut short is an lt::Error (the
  // llama2.c harness resizes a file to its header's size, so only a cut header is rejected).
  EXPECT_THROW(lt::fuzz::llama2c_model(tiny_llama2c_model().substr(0, 20)), lt::Error);
  std::string bad_heads = tiny_llama2c_model();
  const int32_t three = 3;  // n_heads 3 does not divide dim 8
  std::memcpy(bad_heads.data() + 12, &three, 4);
  EXPECT_THROW(lt::fuzz::llama2c_model(bad_heads), lt::Error);
  EXPECT_THROW(lt::fuzz::safetensors(tiny_safetensors().substr(0, 20)), lt::Error);
  EXPECT_THROW(lt::fuzz::hf_config("{\"model_type\": \"llama\""), lt::Error);
  EXPECT_THROW(lt::fuzz::gguf(tiny_gguf().substr(0, 100)), lt::Error);
}

// Nesting 100,000 deep overflows the stack when an error message prints the value back
// (nlohmann::json::dump recursion): config.json fields, adapter_config.json keys, safetensors
// shapes. Found with the fuzz harnesses; fixed by the JSON nesting limit (core/json_parse.h).
TEST(FuzzRegressions, DeeplyNestedJsonEndsCleanly) {
  const int depth = 100000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  EXPECT_EQ(run_clean(lt::fuzz::hf_config, "{\"model_type\": " + deep + "}"), "");
  EXPECT_EQ(run_clean(lt::fuzz::adapter_config, "{\"peft_type\": \"LORA\", \"r\": " + deep + "}"), "");
  std::string header = "{\"w\": {\"dtype\": \"F32\", \"shape\": [" + deep + "], \"data_offsets\": [0, 0]}}";
  std::string st(8, '\0');
  for (int i = 0; i < 8; ++i) st[i] = char(uint64_t(header.size()) >> (8 * i));
  EXPECT_EQ(run_clean(lt::fuzz::safetensors, st + header), "");
  // a server request: nested prompts, messages, contents, stops
  for (const std::string& body : {"{\"prompt\": " + deep + "}", "{\"messages\": " + deep + "}",
                                  "{\"messages\": [{\"role\": \"user\", \"content\": " + deep + "}]}",
                                  "{\"prompt\": \"a\", \"stop\": " + deep + "}", deep})
    EXPECT_EQ(run_clean(lt::fuzz::openai_request, body), "");
  // export --gguf --tokenizer T: a tokenizer.json whose pre_tokenizer nests deep (it is printed back
  // with dump(); `leantune export` died by SIGSEGV on it)
  const fs::path tj = fs::temp_directory_path() / ("lt_deep_tok_" + std::to_string(::getpid()) + ".json");
  std::ofstream(tj) << "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": " << deep
                    << "}";
  EXPECT_THROW(lt::gguf::read_vocab(tj.string(), 32), lt::Error);
  fs::remove(tj);
}
