// HF BPE model: a word is split into characters (each looked up in the vocabulary, or turned into
// "<0xNN>" byte tokens with byte_fallback, or the unk token, or dropped), then merges are applied
// lowest rank first, leftmost first on equal rank, exactly as tokenizers' Word::merge_all (which
// uses a heap with stale-entry checks; the result is the same as this min-(rank, position) loop).
#include "tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.h"
#include "core/json_parse.h"
#include "tokenizer/utf8.h"

namespace lt {

using json = nlohmann::json;

int TokenIdLimit::check(long long id, const char* list, std::string_view token) const {
  const size_t limit = n_vocab + n_added;
  LT_CHECK(id >= 0 && static_cast<unsigned long long>(id) < limit,
           "{}: {} token '{}' has id {}; ids must be in 0..{} (the file has {} vocab entries and {} added tokens, "
           "and each id names one token), so the file is damaged",
           path, list, excerpt(token), id, limit == 0 ? 0 : limit - 1, n_vocab, n_added);
  return static_cast<int>(id);
}

BpeModel::BpeModel(const json& model, const TokenIdLimit& limit) {
  const std::string& path = limit.path;
  LT_CHECK(model.contains("vocab") && model["vocab"].is_object(), "{}: model.vocab is missing or not an object", path);
  for (auto& [tok, idv] : model["vocab"].items()) {
    LT_CHECK(idv.is_number_integer(), "{}: model.vocab['{}'] is not an integer id (got {})", path, excerpt(tok),
             json_excerpt(idv));
    const int id = limit.check(idv.get<long long>(), "model.vocab", tok);
    vocab_.emplace(tok, id);
    if (static_cast<size_t>(id) >= id_to_token_.size()) {
      id_to_token_.resize(id + 1);
      has_id_.resize(id + 1, false);
    }
    id_to_token_[id] = tok;
    has_id_[id] = true;
  }
  auto get_bool = [&](const char* k) { return model.contains(k) && model[k].is_boolean() && model[k].get<bool>(); };
  byte_fallback_ = get_bool("byte_fallback");
  ignore_merges_ = get_bool("ignore_merges");
  fuse_unk_ = get_bool("fuse_unk");
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    unk_id_ = token_to_id(model["unk_token"].get<std::string>());
    LT_CHECK(unk_id_ >= 0, "{}: model.unk_token '{}' is not in the vocabulary", path,
             excerpt(model["unk_token"].get<std::string>()));
  }
  if (model.contains("continuing_subword_prefix") && model["continuing_subword_prefix"].is_string())
    continuing_prefix_ = model["continuing_subword_prefix"].get<std::string>();
  if (model.contains("end_of_word_suffix") && model["end_of_word_suffix"].is_string())
    end_suffix_ = model["end_of_word_suffix"].get<std::string>();
  if (model.contains("dropout") && model["dropout"].is_number())
    LT_CHECK(model["dropout"].get<double>() == 0.0, "{}: BPE dropout is not supported", path);
  for (int b = 0; b < 256; ++b) byte_ids_[b] = token_to_id(fmt::format("<0x{:02X}>", b));

  if (model.contains("merges") && !model["merges"].is_null()) {
    LT_CHECK(model["merges"].is_array(), "{}: model.merges is not an array", path);
    int rank = 0;
    for (const auto& m : model["merges"]) {
      std::string a, b;
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        size_t sp = s.find(' ');
        LT_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                 "{}: merge {} ('{}') is not two tokens separated by one space", path, rank, excerpt(s));
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        LT_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                 "{}: merge {} is neither \"a b\" nor [a, b]", path, rank);
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      int ia = token_to_id(a), ib = token_to_id(b);
      LT_CHECK(ia >= 0 && ib >= 0, "{}: merge {} ('{}' '{}') uses a token not in the vocabulary", path, rank, excerpt(a),
               excerpt(b));
      std::string merged = a + (continuing_prefix_.empty() || b.rfind(continuing_prefix_, 0) != 0
                                    ? b
                                    : b.substr(continuing_prefix_.size()));
      int im = token_to_id(merged);
      LT_CHECK(im >= 0, "{}: merge {} ('{}' '{}') gives '{}', which is not in the vocabulary", path, rank, excerpt(a),
               excerpt(b), excerpt(merged));
      merges_.insert_or_assign(key(ia, ib), Merge{rank, im});  // a repeated pair: the last wins, as in tokenizers
      ++rank;
    }
  }
}

int BpeModel::token_to_id(const std::string& s) const {
  auto it = vocab_.find(s);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int id) const {
  if (id < 0 || id >= static_cast<int>(id_to_token_.size()) || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    int id = token_to_id(std::string(word));
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int> symbols;
  int pending_unk = -1;  // fuse_unk: consecutive unknown characters become one unk
  for (size_t i = 0; i < word.size();) {
    size_t len = 0;
    utf8::decode(word, i, &len);
    std::string s(word.substr(i, len));
    bool first = i == 0;
    i += len;
    if (!first && !continuing_prefix_.empty()) s = continuing_prefix_ + s;
    if (i >= word.size() && !end_suffix_.empty()) s += end_suffix_;
    int id = token_to_id(s);
    if (id >= 0) {
      if (pending_unk >= 0) symbols.push_back(pending_unk), pending_unk = -1;
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        if (pending_unk >= 0) symbols.push_back(pending_unk), pending_unk = -1;
        for (char c : s) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
  merge_all(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::merge_all(std::vector<int>& sym) const {
  if (sym.size() < 2 || merges_.empty()) return;
  // Doubly linked list over positions plus a min-heap of (rank, position), as tokenizers does.
  const int n = static_cast<int>(sym.size());
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  struct Entry {
    int rank, pos, new_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int pos) {
    int nx = next[pos];
    if (nx < 0) return;
    auto it = merges_.find(key(sym[pos], sym[nx]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.new_id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Entry top = heap.top();
    heap.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    int right = next[top.pos];
    auto it = merges_.find(key(sym[top.pos], sym[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    sym[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0) push(prev[top.pos]);
    push(top.pos);
  }
  std::vector<int> out;
  for (int i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
  sym.swap(out);
}

}  // namespace lt
