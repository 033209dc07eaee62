// Hugging Face tokenizer.json with a BPE model. encode() runs tokenizers' pipeline:
//   1. split out added tokens with normalized=false from the raw text;
//   2. normalize each remaining piece, then split out added tokens with normalized=true;
//   3. pre-tokenize the remaining pieces; 4. BPE each word; 5. post-process (BOS/EOS from the
//      TemplateProcessing "single" template, Bert/Roberta cls/sep) when add_special.
// Added tokens with normalized=true are stored (matched and decoded) in their normalized form.
// decode() maps ids to token strings (added tokens first; special ones dropped on skip_special;
// unknown ids dropped) and runs the decoder (tokens joined by " " when there is none).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/json_parse.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/hf_tokenizer.h"

namespace lt {

using json = nlohmann::json;

namespace {

class HfTokenizer final : public Tokenizer {
 public:
  // id_bound > 0: ids are checked against it rather than the number of entries (a vocabulary
  // built with holes).
  HfTokenizer(const std::string& path, const json& j, const std::string& cfg_path, const json& cfg,
              size_t id_bound = 0);

  std::vector<int> encode(std::string_view text, bool add_special) const override;
  std::string decode(std::span<const int> ids, bool skip_special) const override;
  int vocab_size() const override { return vocab_size_; }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  bool is_special(int id) const override { return special_.count(id) > 0; }
  std::string token_text(int id) const override {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) return it->second;
    const std::string* s = model_->id_to_token(id);
    return s ? *s : std::string();
  }

 private:
  int id_of(const std::string& token) const {
    for (const auto& [id, s] : added_by_id_)
      if (s == token) return id;
    return model_->token_to_id(token);
  }
  void parse_post_processor(const json& p, const std::string& path);

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::Decoder> decoder_;
  hf::AddedTokenMatcher raw_tokens_, normalized_tokens_;
  std::unordered_map<int, std::string> added_by_id_;
  std::unordered_set<int> special_;
  std::vector<int> prefix_, suffix_;  // ids added around the sequence when add_special
  int vocab_size_ = 0, bos_id_ = -1, eos_id_ = -1;
};

// A special-token name in tokenizer_config.json: "..." or {"content": "..."}.
std::string config_token(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return {};
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

HfTokenizer::HfTokenizer(const std::string& path, const json& j, const std::string& cfg_path, const json& cfg,
                         size_t id_bound) {
  source_ = path;
  LT_CHECK(j.is_object(), "{}: tokenizer.json is not a JSON object", path);
  LT_CHECK(j.contains("model") && j["model"].is_object(), "{}: no \"model\" object", path);
  const json& m = j["model"];
  std::string type = m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>()
                     : m.contains("merges")                      ? "BPE"
                                                                 : "";
  LT_CHECK(type == "BPE", "{}: unsupported model type '{}' (only BPE is supported)", path, excerpt(type));
  const bool has_added = j.contains("added_tokens") && !j["added_tokens"].is_null();
  LT_CHECK(!has_added || j["added_tokens"].is_array(), "{}: \"added_tokens\" is not an array", path);
  // Every id names a token, so with N vocab entries and M added tokens no id can reach N + M: a
  // larger one is damage, and would size the id tables (a 16,777,215 id: a 537 MB table).
  const size_t n_added = has_added ? j["added_tokens"].size() : 0;
  const size_t n_vocab = m.contains("vocab") && m["vocab"].is_object() ? m["vocab"].size() : 0;
  const TokenIdLimit limit = id_bound > 0 ? TokenIdLimit{path, id_bound, 0} : TokenIdLimit{path, n_vocab, n_added};
  model_ = std::make_unique<BpeModel>(m, limit);
  vocab_size_ = model_->max_id() + 1;

  normalizer_ = hf::make_normalizer(j.value("normalizer", json()), path);
  if (has_added) {
    for (const auto& t : j["added_tokens"]) {
      LT_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                   t["content"].is_string(),
               "{}: an added_tokens entry lacks an integer \"id\" or a string \"content\"", path);
      hf::AddedToken a;
      a.content = t["content"].get<std::string>();
      a.id = limit.check(t["id"].get<long long>(), "added_tokens", a.content);
      a.special = t.value("special", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.single_word = t.value("single_word", false);
      a.normalized = t.value("normalized", !a.special);
      // tokenizers keeps a normalized added token in its normalized form, both for matching
      // (in normalized text) and as the token string decode() sees.
      if (a.normalized && normalizer_) normalizer_->normalize(a.content);
      added_by_id_[a.id] = a.content;
      if (a.special) special_.insert(a.id);
      (a.normalized ? normalized_tokens_ : raw_tokens_).add(a);
      vocab_size_ = std::max(vocab_size_, a.id + 1);
    }
  }
  pre_tokenizer_ = hf::make_pre_tokenizer(j.value("pre_tokenizer", json()), path);
  decoder_ = hf::make_decoder(j.value("decoder", json()), path);
  parse_post_processor(j.value("post_processor", json()), path);
  for (int id : prefix_) LT_CHECK(id >= 0 && id < vocab_size_, "{}: post_processor adds id {}, outside the vocabulary", path, id);
  for (int id : suffix_) LT_CHECK(id >= 0 && id < vocab_size_, "{}: post_processor adds id {}, outside the vocabulary", path, id);

  // BOS / EOS: tokenizer_config.json names, else the template's, else the usual names.
  auto find_named = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (int id = id_of(n); id >= 0) return id;
    return -1;
  };
  std::string cfg_bos = config_token(cfg, "bos_token"), cfg_eos = config_token(cfg, "eos_token");
  if (!cfg_bos.empty()) bos_id_ = id_of(cfg_bos);
  else if (!prefix_.empty()) bos_id_ = prefix_.front();
  else bos_id_ = find_named({"<s>", "<|begin_of_text|>"});
  if (!cfg_eos.empty()) eos_id_ = id_of(cfg_eos);
  else if (!suffix_.empty()) eos_id_ = suffix_.back();
  else eos_id_ = find_named({"</s>", "<|end_of_text|>", "<|endoftext|>"});

  // transformers' Llama tokenizers rebuild the template from add_bos_token / add_eos_token.
  bool has_bos_flag = cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean();
  bool has_eos_flag = cfg.is_object() && cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean();
  if (has_bos_flag || has_eos_flag) {
    bool add_bos = has_bos_flag ? cfg["add_bos_token"].get<bool>() : (!prefix_.empty());
    bool add_eos = has_eos_flag && cfg["add_eos_token"].get<bool>();
    LT_CHECK(!add_bos || bos_id_ >= 0, "{}: add_bos_token is true but the bos_token is not in the vocabulary", cfg_path);
    LT_CHECK(!add_eos || eos_id_ >= 0, "{}: add_eos_token is true but the eos_token is not in the vocabulary", cfg_path);
    if (has_bos_flag) prefix_ = add_bos ? std::vector<int>{bos_id_} : std::vector<int>{};
    if (has_eos_flag) suffix_ = add_eos ? std::vector<int>{eos_id_} : std::vector<int>{};
  }
}

void HfTokenizer::parse_post_processor(const json& p, const std::string& path) {
  if (p.is_null()) return;
  LT_CHECK(p.is_object() && p.contains("type") && p["type"].is_string(), "{}: post_processor has no \"type\" string", path);
  std::string t = p["type"].get<std::string>();
  if (t == "Sequence") {
    LT_CHECK(p.contains("processors") && p["processors"].is_array(), "{}: Sequence post_processor needs \"processors\"", path);
    for (const auto& q : p["processors"]) parse_post_processor(q, path);
    return;
  }
  if (t == "ByteLevel") return;  // only trims offsets
  if (t == "TemplateProcessing") {
    LT_CHECK(p.contains("single") && p["single"].is_array(), "{}: TemplateProcessing needs a \"single\" array", path);
    const json specials = p.value("special_tokens", json::object());
    prefix_.clear();
    suffix_.clear();
    bool seen_seq = false;
    for (const auto& piece : p["single"]) {
      if (piece.contains("Sequence")) {
        seen_seq = true;
        continue;
      }
      LT_CHECK(piece.contains("SpecialToken") && piece["SpecialToken"].contains("id") && piece["SpecialToken"]["id"].is_string(),
               "{}: TemplateProcessing item is neither Sequence nor SpecialToken", path);
      std::string name = piece["SpecialToken"]["id"].get<std::string>();
      LT_CHECK(specials.contains(name) && specials[name].contains("ids") && specials[name]["ids"].is_array(),
               "{}: TemplateProcessing uses special token '{}' missing from \"special_tokens\"", path, excerpt(name));
      for (const auto& id : specials[name]["ids"]) {
        LT_CHECK(id.is_number_integer(), "{}: special_tokens['{}'].ids holds a non-integer", path, excerpt(name));
        (seen_seq ? suffix_ : prefix_).push_back(id.get<int>());
      }
    }
    return;
  }
  if (t == "RobertaProcessing" || t == "BertProcessing") {
    auto id_of_pair = [&](const char* k) {
      LT_CHECK(p.contains(k) && p[k].is_array() && p[k].size() == 2 && p[k][1].is_number_integer(),
               "{}: {} needs \"{}\": [token, id]", path, t, k);
      return p[k][1].get<int>();
    };
    prefix_ = {id_of_pair("cls")};
    suffix_ = {id_of_pair("sep")};
    return;
  }
  fail("{}: unsupported post_processor type '{}' (supported: TemplateProcessing, ByteLevel, Sequence, "
       "RobertaProcessing, BertProcessing)",
       path, excerpt(t));
}

std::vector<int> HfTokenizer::encode(std::string_view text, bool add_special) const {
  std::vector<int> ids;
  if (add_special) ids = prefix_;
  // Pieces between added tokens, in order; id >= 0 marks an added token.
  struct Part {
    int id;
    hf::Piece piece;
  };
  std::vector<Part> parts;
  for (const auto& sp : raw_tokens_.split(text)) {
    if (sp.id >= 0) {
      parts.push_back({sp.id, {}});
      continue;
    }
    std::string s(text.substr(sp.a, sp.b - sp.a));
    if (s.empty()) continue;
    if (normalizer_) normalizer_->normalize(s);
    for (const auto& nsp : normalized_tokens_.split(s)) {
      if (nsp.id >= 0) parts.push_back({nsp.id, {}});
      else if (nsp.b > nsp.a) parts.push_back({-1, {s.substr(nsp.a, nsp.b - nsp.a), sp.a == 0 && nsp.a == 0}});
    }
  }
  std::vector<hf::Piece> words;
  for (auto& part : parts) {
    if (part.id >= 0) {
      ids.push_back(part.id);
      continue;
    }
    words.assign(1, std::move(part.piece));
    if (pre_tokenizer_) pre_tokenizer_->split(words);
    for (const auto& w : words) model_->tokenize(w.text, ids);
  }
  if (add_special) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string HfTokenizer::decode(std::span<const int> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) {
    if (skip_special && special_.count(id)) continue;
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) {
      tokens.push_back(it->second);
    } else if (const std::string* s = model_->id_to_token(id)) {
      tokens.push_back(*s);
    }
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& json_path, const std::string& json_text,
                                             const std::string& config_path, const std::string& config_text) {
  json j = parse_json(json_text, json_path), cfg;
  if (!config_text.empty()) cfg = parse_json(config_text, config_path);
  try {
    return std::make_unique<HfTokenizer>(json_path, j, config_path, cfg);
  } catch (const json::exception& e) {
    fail("{}: unexpected JSON structure: {}", json_path, e.what());
  }
}

std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& source, const json& j, const json& config,
                                             size_t id_bound) {
  try {
    return std::make_unique<HfTokenizer>(source, j, source, config, id_bound);
  } catch (const json::exception& e) {
    fail("{}: unexpected tokenizer structure: {}", source, e.what());
  }
}

}  // namespace lt
