// libFuzzer harness: a Hugging Face tokenizer.json (optionally followed by kConfigSeparator and a
// tokenizer_config.json) through load_hf_tokenizer, then encode / decode of hard strings.
#include "fuzz_common.h"
#include "tokenizer/hf_tokenizer.h"

namespace lt::fuzz {

constexpr std::string_view kConfigSeparator = "\n#tokenizer_config.json\n";

void tokenizer_json(std::string_view bytes) {
  std::string_view json = bytes, config;
  if (size_t k = bytes.find(kConfigSeparator); k != std::string_view::npos) {
    json = bytes.substr(0, k);
    config = bytes.substr(k + kConfigSeparator.size());
  }
  auto tok = load_hf_tokenizer("tokenizer.json", std::string(json), "tokenizer_config.json", std::string(config));
  exercise_tokenizer(*tok);
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::tokenizer_json)
