// libFuzzer harness: a llama2.c checkpoint through load_llama2c (a path: the bytes go through a
// memfd), then the inference model built from it (scalar reference kernels, a context of at most
// 8) and a forward pass over two tokens, as `leantune generate` does. The loader insists on the
// exact size its header implies, which almost every mutation breaks; so an input of the wrong
// size is also tried resized to that size (when it is at most 256 KiB), which takes
// arbitrary headers into the model build.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "fuzz_common.h"
#include "io/llama2c.h"
#include "model/llama_model.h"

namespace lt::fuzz {

namespace {

constexpr uint64_t kMaxFitted = 256 << 10;

// The file size the 28-byte header implies (load_llama2c's formula); 0 when the header is unusable
// or the size is over kMaxFitted (bigger models only slow the fuzzer down).
uint64_t implied_size(std::string_view b) {
  if (b.size() < 28) return 0;
  int32_t h[7];
  std::memcpy(h, b.data(), sizeof h);
  for (int i : {0, 1, 2, 3, 4, 6})
    if (h[i] <= 0 || h[i] > (1 << 20)) return 0;
  if (h[5] == 0 || h[5] == INT32_MIN || h[3] > h[0] || h[4] > h[3]) return 0;
  using u128 = unsigned __int128;
  const u128 C = h[0], F = h[1], L = h[2], V = h[5] > 0 ? h[5] : -int64_t(h[5]), T = h[6];
  const u128 HS = C / u128(h[3]), qd = u128(h[3]) * HS, kvd = u128(h[4]) * HS;
  u128 floats = V * C + L * C + L * qd * C + 2 * L * kvd * C + L * C * qd + L * C + 3 * L * F * C + C +
                2 * T * (HS / 2) + (h[5] > 0 ? 0 : V * C);
  u128 bytes = 28 + 4 * floats;
  return bytes <= kMaxFitted ? uint64_t(bytes) : 0;
}

void run_llama2c_model(const std::string& path) {
  Llama2cModel m = load_llama2c(path);
  InferenceOptions o;
  o.context = std::min(8, m.config.max_seq_len);
  LlamaModel model(m.config, m.tensors, o, ops_ref());
  int tokens[2] = {std::min(1, m.config.vocab_size - 1), m.config.vocab_size - 1};
  model.forward(tokens, std::min(2, model.context()), 0);
  volatile float sink = model.logits()[m.config.vocab_size - 1];
  (void)sink;
}

}  // namespace

void llama2c_model(std::string_view bytes) {
  uint64_t want = implied_size(bytes);
  if (want == 0 || want == bytes.size()) return run_llama2c_model(bytes_path(bytes));
  try {
    run_llama2c_model(bytes_path(bytes));  // the size check rejects it; that path is fuzzed too
  } catch (const Error&) {
  }
  // Cut to `want`, or grown by repeating the weights it has (zeros when it has none).
  std::string fitted(bytes.substr(0, std::min<size_t>(bytes.size(), want)));
  const size_t body = fitted.size() - 28;
  fitted.resize(want);
  for (size_t i = 28 + body; body > 0 && i < want; ++i) fitted[i] = fitted[28 + (i - 28) % body];
  run_llama2c_model(bytes_path(fitted));
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::llama2c_model)
