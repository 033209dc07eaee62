// llama2.c tokenizer.bin: int32 max_token_length, then per token: float32 score (finite), int32
// length, length bytes (the vocabulary size is the number of entries until end of file). Ids 0, 1, 2 are
// <unk>, BOS and EOS; ids 3..258 are the byte-fallback pieces "<0xNN>" (id = byte + 3).
// encode() follows run.c's encode(): UTF-8 code points looked up in the vocabulary (bytes + 3 when
// absent), a dummy-prefix " " when the text is non-empty, then repeatedly merge the adjacent pair
// whose concatenation is in the vocabulary with the best score (leftmost on ties; a heap instead
// of run.c's rescan, same result).
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
#include "tokenizer/utf8.h"

namespace lt {

namespace {

class Llama2cTokenizer final : public Tokenizer {
 public:
  Llama2cTokenizer(const std::string& path, std::vector<std::string> pieces, std::vector<float> scores)
      : pieces_(std::move(pieces)), scores_(std::move(scores)) {
    source_ = path;
    for (size_t i = 0; i < pieces_.size(); ++i) lookup_.emplace(pieces_[i], static_cast<int>(i));
  }

  std::vector<int> encode(std::string_view text, bool add_special) const override {
    std::vector<int> tokens;
    if (add_special && bos_id() >= 0) tokens.push_back(bos_id());
    if (!text.empty()) tokens.push_back(find(" "));  // -1 (kept, as run.c) if " " is missing
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
          int byte_id = static_cast<uint8_t>(b) + 3;
          LT_CHECK(byte_id < vocab_size(), "llama2.c tokenizer: byte-fallback token {} is past the vocabulary ({})",
                   byte_id, vocab_size());
          tokens.push_back(byte_id);
        }
      }
      buf.clear();
    }
    merge_pairs(tokens);
    tokens.erase(std::remove(tokens.begin(), tokens.end(), -1), tokens.end());
    return tokens;
  }

  std::string decode(std::span<const int> ids, bool skip_special) const override {
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
      std::string_view piece = pieces_[id];
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

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  int bos_id() const override { return vocab_size() > 1 ? 1 : -1; }
  int eos_id() const override { return vocab_size() > 2 ? 2 : -1; }
  bool is_special(int id) const override { return id >= 0 && id <= 2 && id < vocab_size(); }
  std::string token_text(int id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
  }
  bool one_entry_per_model_token() const override { return true; }

 private:
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
      pair = pieces_[tok[pos]];
      pair += pieces_[tok[nx]];
      return find(pair);
    };
    auto push = [&](int pos) {
      int id = pair_id(pos);
      if (id >= 0 && scores_[id] > -1e10f) heap.push({scores_[id], pos, id});  // NaN never wins in run.c
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
    std::string s = pieces_[id];
    while (!s.empty() && s.front() == '\n') s.erase(s.begin());
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> lookup_;  // first id wins on duplicate pieces
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
  return std::make_unique<Llama2cTokenizer>(path, std::move(pieces), std::move(scores));
}

}  // namespace lt
