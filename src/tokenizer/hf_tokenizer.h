// Hugging Face tokenizer.json (model type BPE) as an lt::Tokenizer.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "tokenizer/tokenizer.h"

namespace lt {

// `json_text` is the contents of `json_path` (named in errors); `config_text` the contents of
// tokenizer_config.json or empty (its add_bos_token / add_eos_token / bos_token / eos_token
// override the post-processor's special tokens).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& json_path, const std::string& json_text,
                                             const std::string& config_path, const std::string& config_text);

// The same from parsed JSON (a tokenizer.json `j` and a tokenizer_config.json `config`, null when
// none) built in memory; `source` is named in errors. Ids must be below `id_bound` (the entries
// of `j` may leave ids out: they decode to nothing).
std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& source, const nlohmann::json& j,
                                             const nlohmann::json& config, size_t id_bound);

}  // namespace lt
