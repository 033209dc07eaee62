// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}): vocabulary,
// ranked merges, byte fallback, unk token, ignore_merges. Used by both byte-level BPE (GPT-2,
// Llama 3, Qwen2) and SentencePiece-style BPE (Llama 2, Mistral); they differ only in the
// normalizer / pre-tokenizer / decoder around it.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lt {

// The bound on the token ids of one tokenizer.json: each id names one token, so with N vocab
// entries and M added tokens every id is below N + M (a larger one is a damaged file).
struct TokenIdLimit {
  std::string path;  // the tokenizer.json, named in errors
  size_t n_vocab = 0, n_added = 0;
  // `id` as an int; lt::Error naming the file, the list (model.vocab / added_tokens), the token
  // and the id when it is negative or not below n_vocab + n_added.
  int check(long long id, const char* list, std::string_view token) const;
};

class BpeModel {
 public:
  // Parses the "model" object; ids are checked against `limit`, whose path is named in errors.
  BpeModel(const nlohmann::json& model, const TokenIdLimit& limit);

  // Appends the ids of one pre-tokenized word, as tokenizers' BPE::tokenize does.
  void tokenize(std::string_view word, std::vector<int>& out) const;

  int token_to_id(const std::string& s) const;  // -1 when absent
  const std::string* id_to_token(int id) const;  // nullptr when absent
  int max_id() const { return static_cast<int>(id_to_token_.size()) - 1; }

 private:
  struct Merge {
    int rank;
    int new_id;
  };
  static uint64_t key(int a, int b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  void merge_all(std::vector<int>& symbols) const;

  std::unordered_map<std::string, int> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  int byte_ids_[256];  // id of "<0xNN>", -1 when absent
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  int unk_id_ = -1;
  std::string continuing_prefix_, end_suffix_;
};

}  // namespace lt
