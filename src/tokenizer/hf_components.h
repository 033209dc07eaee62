// The stages of a Hugging Face tokenizer.json pipeline around the BPE model, built from their
// JSON objects: normalizers (hf_normalizers.cpp: Sequence, NFC, NFD, NFKC, NFKD, Lowercase,
// Strip, StripAccents, Replace, Prepend, Nmt, BertNormalizer, ByteLevel), pre-tokenizers
// (Sequence, Split, ByteLevel, Metaspace, Digits) and decoders (Sequence, ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace). Each mirrors the tokenizers library (v0.2x) behaviour.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <memory>
#include <string>
#include <vector>

namespace lt {
class Regex;
}

namespace lt::hf {

// A piece of text between added tokens, then between pre-tokenizer splits. `at_start`: it begins
// at offset 0 of the original text (Metaspace prepend_scheme "first").
struct Piece {
  std::string text;
  bool at_start = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits (empty pieces dropped).
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Each returns nullptr for a JSON null; throws lt::Error naming `path` for an unknown type.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& path);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& path);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& path);

// {"pattern": {"String": "..."} or {"Regex": "..."}} of a Split pre-tokenizer or Replace
// normalizer -> a compiled regex; `what` names the component in errors.
std::unique_ptr<Regex> make_pattern(const nlohmann::json& j, const std::string& path, const char* what);

// GPT-2's byte <-> printable-character table used by ByteLevel.
const std::string& byte_to_char(uint8_t b);  // UTF-8 of the mapped character
int char_to_byte(uint32_t cp);               // -1 when cp is not in the table

}  // namespace lt::hf
