// Shared pieces of the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp, scripts/fuzz.sh). Each harness
// is a function taking the input bytes that may throw lt::Error (a clean rejection); compiled with
// LT_FUZZ_MAIN (the LT_FUZZ build) its file also defines LLVMFuzzerTestOneInput through
// LT_FUZZ_ENTRY, and without it the function is replayed by tests/fuzz/test_fuzz_regressions.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace lt {
class Tokenizer;
}

namespace lt::fuzz {

using Harness = void (*)(std::string_view bytes);

// Inputs larger than this are skipped (the formats' interesting structure fits in far less).
constexpr size_t kMaxInputBytes = 1 << 20;

// A path whose file holds exactly `bytes`, for loaders that only take a path. The file is an
// anonymous memfd of this process (/proc/self/fd/N), rewritten on each call: nothing is written
// to disk and nothing is left behind. The path stays valid until the next call.
std::string bytes_path(std::string_view bytes);

// A small llama2.c tokenizer built in memory (<unk>, <s>, </s>, the 256 byte pieces, printable
// ASCII and a few merges), shared by the harnesses that need one.
const Tokenizer& small_tokenizer();
std::string small_tokenizer_bytes();  // its .bin bytes

// Encodes a fixed set of hard strings (ASCII, UTF-8, invalid bytes, special-token markup) with and
// without special tokens, decodes them back, stream-decodes them, and decodes the first and last
// ids of the vocabulary and some out-of-range ids: what every command does with a tokenizer.
void exercise_tokenizer(const Tokenizer& tok);

// The harnesses (tests/fuzz/fuzz_<name>.cpp; the libFuzzer executable is fuzz_<name>).
void safetensors(std::string_view bytes);
void hf_config(std::string_view bytes);
void tokenizer_json(std::string_view bytes);
void llama2c_model(std::string_view bytes);
void llama2c_tokenizer(std::string_view bytes);
void adapter_config(std::string_view bytes);
void train_yaml(std::string_view bytes);
void jsonl_data(std::string_view bytes);
void trainer_state(std::string_view bytes);
void gguf(std::string_view bytes);
void chat_template(std::string_view bytes);
void openai_request(std::string_view bytes);  // the server's request parser (tools/leantune/server)

// Runs `h` on the input: lt::Error is a clean rejection; any other exception is reported once
// per type on stderr (and aborts when LT_FUZZ_STRICT=1 is set, so libFuzzer keeps the input).
int run_one(Harness h, const uint8_t* data, size_t size);

}  // namespace lt::fuzz

#ifdef LT_FUZZ_MAIN
#define LT_FUZZ_ENTRY(harness)                                                  \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {     \
    return ::lt::fuzz::run_one(harness, data, size);                            \
  }
#else
#define LT_FUZZ_ENTRY(harness)
#endif
