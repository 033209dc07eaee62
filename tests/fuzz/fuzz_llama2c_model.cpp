// libFuzzer harness: a llama2.c checkpoint through load_llama2c (a path: the bytes go through a
// memfd), then the inference model built from it (scalar reference kernels, a context of at most
// 8) and a forward pass over two tokens, as `leantune generate` does.
#include <algorithm>

#include "fuzz_common.h"
#include "io/llama2c.h"
#include "model/llama_model.h"

namespace lt::fuzz {

void llama2c_model(std::string_view bytes) {
  Llama2cModel m = load_llama2c(bytes_path(bytes));
  InferenceOptions o;
  o.context = std::min(8, m.config.max_seq_len);
  LlamaModel model(m.config, m.tensors, o, ops_ref());
  int tokens[2] = {std::min(1, m.config.vocab_size - 1), m.config.vocab_size - 1};
  int T = std::min(2, model.context());
  model.forward(tokens, T, 0);
  volatile float sink = model.logits()[m.config.vocab_size - 1];
  (void)sink;
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::llama2c_model)
