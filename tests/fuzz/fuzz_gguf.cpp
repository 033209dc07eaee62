// libFuzzer harness: a GGUF file through gguf::Reader (a path: the bytes go through a memfd), every
// metadata value read back through the typed getters and every tensor's bytes read; then what
// `--model file.gguf` does with it: the tokenizer from its metadata (exercised on hard strings),
// and the llama model files (q/k rows un-permuted, blocks dequantized), the inference model
// (reference kernels, a context of at most 8) and a forward pass over two tokens.
#include <algorithm>

#include "core/error.h"
#include "fuzz_common.h"
#include "io/gguf_model.h"
#include "io/gguf_reader.h"
#include "model/llama_model.h"
#include "model/model_tokenizer.h"

namespace lt::fuzz {

namespace {

// Each key through every getter: the one that fits returns, the others throw lt::Error.
uint64_t read_metadata(const ::lt::gguf::Reader& r) {
  uint64_t sum = 0;
  for (const std::string& k : r.keys()) {
    auto get = [&](auto f) {
      try {
        f();
        ++sum;
      } catch (const Error&) {
      }
    };
    get([&] { sum += uint64_t(r.get_int(k).value_or(0)); });
    get([&] { sum += uint64_t(r.get_float(k).value_or(0) != 0); });
    get([&] { sum += r.get_bool(k).value_or(false); });
    get([&] { sum += r.get_string(k).value_or("").size(); });
    get([&] { sum += r.get_strings(k) ? r.get_strings(k)->size() : 0; });
    get([&] { sum += r.get_floats(k).value_or(std::vector<float>()).size(); });
    get([&] { sum += r.get_ints(k).value_or(std::vector<int64_t>()).size(); });
  }
  return sum;
}

void run_gguf_model(const std::string& path) {
  ModelFiles m = load_gguf_model(path);
  InferenceOptions o;
  o.context = std::min(8, m.config.max_seq_len);
  LlamaModel model(m.config, m.tensors, o, ops_ref());
  int tokens[2] = {std::min(1, m.config.vocab_size - 1), m.config.vocab_size - 1};
  model.forward(tokens, std::min(2, model.context()), 0);
  volatile float sink = model.logits()[m.config.vocab_size - 1];
  (void)sink;
}

}  // namespace

void gguf(std::string_view bytes) {
  const std::string path = bytes_path(bytes);
  const ::lt::gguf::Reader r(path);
  uint64_t sum = read_metadata(r);
  for (const auto& t : r.tensors())
    for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
  volatile uint64_t sink = sum;
  (void)sink;
  try {
    exercise_tokenizer(*make_gguf_tokenizer(read_gguf_vocab(r), path));
  } catch (const Error&) {
  }
  run_gguf_model(path);
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::gguf)
