// Added-token matching, following tokenizers' AddedVocabulary::find_matches: leftmost-longest
// matches over a byte trie; single_word skips a match touching a word character; lstrip/rstrip
// widen the match over neighbouring whitespace (lstrip never reaching into the previous match).
#include "tokenizer/added_tokens.h"

#include "tokenizer/utf8.h"

namespace lt::hf {

namespace {
bool is_word_char(uint32_t cp) {
  return cp == '_' || (cp < 128 && ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))) ||
         (cp >= 128 && !utf8::is_whitespace(cp));
}
uint32_t last_cp(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<uint8_t>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  size_t len;
  return utf8::decode(s, i, &len);
}
}  // namespace

void AddedTokenMatcher::add(const AddedToken& t) {
  if (t.content.empty()) return;
  int node = 0;
  for (unsigned char c : t.content) {
    auto it = nodes_[node].next.find(c);
    if (it == nodes_[node].next.end()) {
      nodes_.emplace_back();
      int n = static_cast<int>(nodes_.size()) - 1;
      nodes_[node].next.emplace(c, n);
      node = n;
    } else {
      node = it->second;
    }
  }
  if (nodes_[node].token < 0) {
    nodes_[node].token = static_cast<int>(tokens_.size());
    tokens_.push_back(t);
  }
}

std::vector<AddedTokenMatcher::Span> AddedTokenMatcher::split(std::string_view s) const {
  std::vector<Span> out;
  size_t done = 0;  // end of the last emitted span
  size_t i = 0;
  while (i < s.size()) {
    int node = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < s.size(); ++j) {
      auto it = nodes_[node].next.find(static_cast<unsigned char>(s[j]));
      if (it == nodes_[node].next.end()) break;
      node = it->second;
      if (nodes_[node].token >= 0) best = nodes_[node].token, best_end = j + 1;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& t = tokens_[best];
    size_t a = i, b = best_end;
    if (t.single_word) {
      bool start_ok = a == 0 || !is_word_char(last_cp(s.substr(0, a)));
      size_t l = 0;
      bool stop_ok = b == s.size() || !is_word_char(utf8::decode(s, b, &l));
      if (!start_ok || !stop_ok) {
        i = best_end;  // the automaton resumes after the rejected match
        continue;
      }
    }
    if (t.lstrip) {
      size_t k = a;
      while (k > done) {
        size_t p = k - 1;
        while (p > done && (static_cast<uint8_t>(s[p]) & 0xC0) == 0x80) --p;
        size_t l = 0;
        if (!utf8::is_whitespace(utf8::decode(s, p, &l))) break;
        k = p;
      }
      a = k;
    }
    if (t.rstrip) {
      while (b < s.size()) {
        size_t l = 0;
        uint32_t cp = utf8::decode(s, b, &l);
        if (!utf8::is_whitespace(cp)) break;
        b += l;
      }
    }
    if (done < a) out.push_back({-1, done, a});
    out.push_back({t.id, a, b});
    done = b;
    i = best_end > b ? best_end : b;
  }
  if (done < s.size() || out.empty()) out.push_back({-1, done, s.size()});
  return out;
}

}  // namespace lt::hf
