// Hugging Face tokenizer.json (model type BPE) as an lt::Tokenizer.
#pragma once
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace lt {

// `json_text` is the contents of `json_path` (named in errors); `config_text` the contents of
// tokenizer_config.json or empty (its add_bos_token / add_eos_token / bos_token / eos_token
// override the post-processor's special tokens).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& json_path, const std::string& json_text,
                                             const std::string& config_path, const std::string& config_text);

}  // namespace lt
