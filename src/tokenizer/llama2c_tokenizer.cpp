// llama2.c tokenizer.bin: int32 max_token_length, then per token: float32 score (finite), int32
// length, length bytes (the vocabulary size is the number of entries until end of file). Ids 0, 1, 2 are
// <unk>, BOS and EOS; ids 3..258 are the byte-fallback pieces "<0xNN>" (id = byte + 3).
// encode() follows run.c's encode(): UTF-8 code points looked up in the vocabulary (their
// byte-fallback tokens when absent), a dummy-prefix " " when the text is non-empty, then
// repeatedly merge the adjacent pair whose concatenation is in the vocabulary with the best score
// (leftmost on ties; a heap instead of run.c's rescan, same result). A vocabulary from GGUF also
// has tokens recognized in the text first (llama.cpp's special-token partition), each text piece
// after one getting the dummy prefix again, as llama.cpp does.
// decode() follows run.c's decode(): drop the leading space of the piece after BOS (or at the start), "<0xNN>" is the
// raw byte; the byte string is returned as UTF-8 with invalid runs as U+FFFD.
#include "tokenizer/llama2c_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/utf8.h"

namespace lt {

namespace {

class SpmTokenizer final : public Tokenizer {
 public:
  SpmTokenizer(const std::string& path, SpmVocab v) : v_(std::move(v)) {
    source_ = path;
    for (size_t i = 0; i < v_.pieces.size(); ++i)
      if (!is_unused(int(i))) lookup_.emplace(v_.pieces[i], static_cast<int>(i));
    for (int id : v_.text_tokens) {
      hf::AddedToken t;
      t.id = id, t.content = v_.pieces[size_t(id)], t.special = v_.special[size_t(id)], t.normalized = false;
      in_text_.add(t);
    }
  }

  std::vector<int> encode(std::string_view text, bool add_special) const override {
    std::vector<int> tokens;
    if (add_special && v_.add_bos && bos_id() >= 0) tokens.push_back(bos_id());
    bool after_special = true;  // the dummy prefix starts the text and follows a recognized token
    for (const auto& sp : in_text_.empty() ? std::vector<hf::AddedTokenMatcher::Span>{{-1, 0, text.size()}}
                                           : in_text_.split(text)) {
      if (sp.id >= 0) {
        tokens.push_back(sp.id);
        after_special = true;
      } else if (sp.b > sp.a) {
        encode_piece(text.substr(sp.a, sp.b - sp.a), after_special && v_.add_space_prefix, tokens);
        after_special = false;
      }
    }
    if (add_special && v_.add_eos && eos_id() >= 0) tokens.push_back(eos_id());
    return tokens;
  }

  std::string decode(std::span<const int> ids, bool skip_special) const override {
    if (v_.llama_cpp_decode) return decode_llama_cpp(ids, skip_special);
    std::string bytes;
    int prev = bos_id();  // the start of a sequence drops the dummy-prefix space, as SentencePiece does
    for (int id : ids) {
      if (id < 0 || id >= vocab_size()) {
        bytes += utf8::kReplacement;
        prev = id;
        continue;
      }
      if (is_special(id)) {
        if (!skip_special) bytes += special_text(id);
        prev = id;
        continue;
      }
      if (is_unused(id)) continue;
      std::string_view piece = v_.pieces[id];
      if (prev == bos_id() && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
      int byte = parse_byte_piece(piece);
      if (byte >= 0) {
        bytes += static_cast<char>(byte);
      } else {
        bytes.append(piece);
      }
      prev = id;
    }
    return utf8::lossy(bytes);
  }

  int vocab_size() const override { return static_cast<int>(v_.pieces.size()); }
  int bos_id() const override { return v_.bos; }
  int eos_id() const override { return v_.eos; }
  bool is_special(int id) const override { return id >= 0 && id < vocab_size() && v_.special[size_t(id)]; }
  std::string token_text(int id) const override {
    return id >= 0 && id < vocab_size() && !is_unused(id) ? v_.pieces[id] : std::string();
  }
  bool one_entry_per_model_token() const override { return v_.one_entry_per_model_token; }

 private:
  std::string decode_llama_cpp(std::span<const int> ids, bool skip_special) const {
    if (skip_special && v_.add_bos && !ids.empty() && ids[0] == bos_id()) ids = ids.subspan(1);
    std::string bytes, shown;
    bool strip = v_.add_space_prefix;  // the first piece only
    for (int id : ids) {
      std::string_view piece;
      if (id < 0 || id >= vocab_size()) piece = utf8::kReplacement;
      else if (is_special(id) && !skip_special) shown = special_text(id), piece = shown;
      else if (!is_special(id) && !is_unused(id)) piece = v_.pieces[id];
      if (strip && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
      strip = false;
      const int byte = is_special(id) ? -1 : parse_byte_piece(piece);
      if (byte >= 0) bytes += static_cast<char>(byte);
      else bytes.append(piece);
    }
    return utf8::lossy(bytes);
  }

  bool is_unused(int id) const { return !v_.unused.empty() && v_.unused[size_t(id)]; }

  // run.c's encode of one piece of text: code points, the byte-fallback tokens of those not in the
  // vocabulary, then the merges.
  void encode_piece(std::string_view text, bool dummy_prefix, std::vector<int>& out) const {
    std::vector<int> tokens;
    if (dummy_prefix && !text.empty()) tokens.push_back(find(" "));  // -1 (kept, as run.c) if " " is missing
    std::string buf;
    for (size_t c = 0; c < text.size(); ++c) {
      if ((static_cast<uint8_t>(text[c]) & 0xC0) != 0x80) buf.clear();
      buf += text[c];
      bool next_is_cont = c + 1 < text.size() && (static_cast<uint8_t>(text[c + 1]) & 0xC0) == 0x80;
      if (next_is_cont && buf.size() < 4) continue;
      int id = find(buf);
      if (id != -1) {
        tokens.push_back(id);
      } else {
        for (char b : buf) {
          int byte_id = v_.byte_ids[static_cast<uint8_t>(b)];
          if (byte_id < 0) byte_id = v_.unk;
          LT_CHECK(byte_id >= 0, "{}: byte {:#04x} has no byte-fallback token <0x{:02X}> in the vocabulary ({} tokens)",
                   source_, static_cast<uint8_t>(b), static_cast<uint8_t>(b), vocab_size());
          tokens.push_back(byte_id);
        }
      }
      buf.clear();
    }
    merge_pairs(tokens);
    for (int id : tokens)
      if (id != -1) out.push_back(id);
  }

  // run.c's loop (merge the best-scoring pair, the leftmost on ties, until none is left) with a
  // heap instead of a rescan per merge: the same merges in the same order, O(n log n).
  void merge_pairs(std::vector<int>& tok) const {
    const int n = static_cast<int>(tok.size());
    std::vector<int> prev(n), next(n);
    std::vector<bool> alive(n, true);
    for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    struct Entry {
      float score;
      int pos, id;
      bool operator<(const Entry& o) const { return score != o.score ? score < o.score : pos > o.pos; }
    };
    std::priority_queue<Entry> heap;
    std::string pair;
    auto pair_id = [&](int pos) {
      int nx = next[pos];
      if (nx < 0 || tok[pos] < 0 || tok[nx] < 0) return -1;
      pair = v_.pieces[tok[pos]];
      pair += v_.pieces[tok[nx]];
      return find(pair);
    };
    auto push = [&](int pos) {
      int id = pair_id(pos);
      if (id >= 0 && v_.scores[id] > -1e10f) heap.push({v_.scores[id], pos, id});  // NaN never wins in run.c
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      Entry e = heap.top();
      heap.pop();
      if (!alive[e.pos] || pair_id(e.pos) != e.id) continue;  // stale
      int right = next[e.pos];
      tok[e.pos] = e.id;
      alive[right] = false;
      next[e.pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = e.pos;
      if (prev[e.pos] >= 0) push(prev[e.pos]);
      push(e.pos);
    }
    std::vector<int> out;
    for (int i = n > 0 ? 0 : -1; i >= 0; i = next[i]) out.push_back(tok[i]);
    tok.swap(out);
  }

  int find(const std::string& s) const {
    auto it = lookup_.find(s);
    return it == lookup_.end() ? -1 : it->second;
  }
  // "<0xNN>" -> NN, else -1.
  static int parse_byte_piece(std::string_view p) {
    if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
    int v = 0;
    for (char c : p.substr(3, 2)) {
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
  // The export writes BOS/EOS as "\n<s>\n" / "\n</s>\n"; show them without the newlines.
  std::string special_text(int id) const {
    std::string s = v_.pieces[id];
    while (!s.empty() && s.front() == '\n') s.erase(s.begin());
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }

  SpmVocab v_;
  std::unordered_map<std::string, int> lookup_;  // first id wins on duplicate pieces
  hf::AddedTokenMatcher in_text_;
};

int32_t read_i32(const std::string& b, size_t off) {
  int32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}

}  // namespace

std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, const std::string& bytes) {
  LT_CHECK(bytes.size() >= 4, "{}: not a llama2.c tokenizer .bin (only {} bytes, need a 4-byte header)", path,
           bytes.size());
  int32_t max_len = read_i32(bytes, 0);
  LT_CHECK(max_len > 0 && max_len <= 65536,
           "{}: not a llama2.c tokenizer .bin (max_token_length {} in the header is not in 1..65536)", path, max_len);
  std::vector<std::string> pieces;
  std::vector<float> scores;
  size_t off = 4;
  while (off < bytes.size()) {
    size_t entry = pieces.size();
    LT_CHECK(off + 8 <= bytes.size(), "{}: truncated llama2.c tokenizer: entry {} at byte {} needs 8 header bytes, {} left",
             path, entry, off, bytes.size() - off);
    float score;
    std::memcpy(&score, bytes.data() + off, 4);
    int32_t len = read_i32(bytes, off + 4);
    off += 8;
    LT_CHECK(len >= 0 && len <= max_len, "{}: llama2.c tokenizer entry {} has length {} (max_token_length is {})", path,
             entry, len, max_len);
    LT_CHECK(off + static_cast<size_t>(len) <= bytes.size(),
             "{}: truncated llama2.c tokenizer: entry {} needs {} bytes at byte {}, file has {}", path, entry, len, off,
             bytes.size());
    pieces.emplace_back(bytes.data() + off, static_cast<size_t>(len));
    LT_CHECK(std::isfinite(score),
             "{}: llama2.c tokenizer entry {} ('{}') has score {}; every merge score must be a finite number, so "
             "the file is damaged (re-export it with llama2.c's tokenizer.py)",
             path, entry, excerpt(pieces.back()), score);
    scores.push_back(score);
    off += static_cast<size_t>(len);
  }
  LT_CHECK(!pieces.empty(), "{}: llama2.c tokenizer has no vocabulary entries", path);
  SpmVocab v;
  const int n = static_cast<int>(pieces.size());
  v.pieces = std::move(pieces);
  v.scores = std::move(scores);
  v.special.assign(size_t(n), false);
  for (int id = 0; id < 3 && id < n; ++id) v.special[size_t(id)] = true;  // <unk>, BOS, EOS
  for (int b = 0; b < 256; ++b) v.byte_ids[size_t(b)] = b + 3 < n ? b + 3 : -1;
  v.bos = n > 1 ? 1 : -1, v.eos = n > 2 ? 2 : -1;
  v.one_entry_per_model_token = true;
  return make_spm_tokenizer(path, std::move(v));
}

std::unique_ptr<Tokenizer> make_spm_tokenizer(const std::string& source, SpmVocab v) {
  const size_t n = v.pieces.size();
  LT_CHECK(n > 0 && v.scores.size() == n && v.special.size() == n && (v.unused.empty() || v.unused.size() == n),
           "{}: a SentencePiece vocabulary of {} tokens with {} scores and {} token types; expected one of each per "
           "token", source, n, v.scores.size(), v.special.size());
  auto check_id = [&](int id, const char* what) {
    LT_CHECK(id >= -1 && id < int(n), "{}: {} id {} is outside the vocabulary ({} tokens)", source, what, id, n);
  };
  check_id(v.bos, "BOS");
  check_id(v.eos, "EOS");
  check_id(v.unk, "unknown token");
  for (int id : v.byte_ids) check_id(id, "byte-fallback token");
  for (int id : v.text_tokens) LT_CHECK(id >= 0 && id < int(n), "{}: token id {} is outside the vocabulary", source, id);
  return std::make_unique<SpmTokenizer>(source, std::move(v));
}

}  // namespace lt
