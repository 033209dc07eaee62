// libFuzzer harness: a llama2.c tokenizer .bin through load_llama2c_tokenizer, then encode /
// decode of hard strings.
#include "fuzz_common.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace lt::fuzz {

void llama2c_tokenizer(std::string_view bytes) {
  auto tok = load_llama2c_tokenizer("tokenizer.bin", std::string(bytes));
  exercise_tokenizer(*tok);
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::llama2c_tokenizer)
