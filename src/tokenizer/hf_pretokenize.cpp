// tokenizer.json pre-tokenizers (the normalizers are in hf_normalizers.cpp). Split behaviours (Isolated, Removed,
// MergedWithPrevious, MergedWithNext, Contiguous) are folded exactly as tokenizers'
// NormalizedString::split does it; ByteLevel maps each byte of a piece to GPT-2's printable
// characters after the optional regex split; Metaspace replaces ' ' by the replacement character.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace lt::hf {

using json = nlohmann::json;

namespace {

std::string type_of(const json& j, const std::string& path, const char* what) {
  LT_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), "{}: {} has no \"type\" string", path, what);
  return j["type"].get<std::string>();
}

std::string get_str(const json& j, const char* k, const std::string& path, const char* what) {
  LT_CHECK(j.contains(k) && j[k].is_string(), "{}: {} needs a string \"{}\"", path, what, k);
  return j[k].get<std::string>();
}

// ---- pre-tokenizers ----

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const json& j, const std::string& path) {
  std::string b = get_str(j, "behavior", path, "Split pre-tokenizer");
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  fail("{}: unknown Split behavior '{}'", path, excerpt(b));
}

struct Seg {
  size_t a, b;
  bool match;
};

// Splits one piece by `matches` (sorted, non-overlapping) with `behavior`, as tokenizers does.
void split_piece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches, bool invert, Behavior behavior,
                 std::vector<Piece>& out) {
  const std::string& s = piece.text;
  std::vector<Seg> segs;
  if (s.empty()) return;
  size_t prev = 0;
  for (auto [a, b] : matches) {
    if (prev != a) segs.push_back({prev, a, false});
    segs.push_back({a, b, true});
    prev = b;
  }
  if (prev != s.size()) segs.push_back({prev, s.size(), false});
  if (invert)
    for (auto& g : segs) g.match = !g.match;
  std::vector<Seg> res;  // .match now means "remove"
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto g : segs) res.push_back({g.a, g.b, false});
      break;
    case Behavior::kRemoved:
      res = segs;
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto g : segs) {
        if (g.match && !prev_match && !res.empty()) res.back().b = g.b;
        else res.push_back({g.a, g.b, false});
        prev_match = g.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->match && !prev_match && !res.empty()) res.back().a = it->a;
        else res.push_back({it->a, it->b, false});
        prev_match = it->match;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (auto g : segs) {
        if (g.match == prev_match && !res.empty()) res.back().b = g.b;
        else res.push_back({g.a, g.b, false});
        prev_match = g.match;
      }
      break;
    }
  }
  for (auto g : res) {
    if (g.match || g.a == g.b) continue;
    out.push_back({s.substr(g.a, g.b - g.a), piece.at_start && g.a == 0});
  }
}

class SequencePre final : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> items;
  void split(std::vector<Piece>& pieces) const override {
    for (const auto& p : items) p->split(pieces);
  }
};

class SplitPre final : public PreTokenizer {
 public:
  std::unique_ptr<Regex> pattern;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& p : pieces) split_piece(p, pattern->find_all(p.text), invert, behavior, out);
    pieces.swap(out);
  }
};

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPre final : public PreTokenizer {
 public:
  bool add_prefix_space = false;
  std::unique_ptr<Regex> regex;  // null when use_regex is false
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (auto p : pieces) {
      if (add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text = " " + p.text;
      if (regex) split_piece(p, regex->find_all(p.text), false, Behavior::kIsolated, out);
      else if (!p.text.empty()) out.push_back(p);
    }
    for (auto& p : out) {
      std::string mapped;
      for (char c : p.text) mapped += byte_to_char(static_cast<uint8_t>(c));
      p.text.swap(mapped);
    }
    pieces.swap(out);
  }
};

class MetaspacePre final : public PreTokenizer {
 public:
  std::string replacement = "\xE2\x96\x81";
  enum { kAlways, kFirst, kNever } scheme = kAlways;
  bool split_on = true;
  std::unique_ptr<Regex> rep_regex;
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (auto p : pieces) {
      std::string t;
      for (char c : p.text) {
        if (c == ' ') t += replacement;
        else t += c;
      }
      bool starts = t.rfind(replacement, 0) == 0;
      if (!starts && (scheme == kAlways || (scheme == kFirst && p.at_start))) t = replacement + t;
      p.text.swap(t);
      if (split_on) split_piece(p, rep_regex->find_all(p.text), false, Behavior::kMergedWithNext, out);
      else if (!p.text.empty()) out.push_back(p);
    }
    pieces.swap(out);
  }
};

}  // namespace

// {"String": "..."} or {"Regex": "..."} -> a compiled regex.
std::unique_ptr<Regex> make_pattern(const json& j, const std::string& path, const char* what) {
  LT_CHECK(j.contains("pattern") && j["pattern"].is_object(), "{}: {} needs a \"pattern\" object", path, what);
  const json& p = j["pattern"];
  std::string where = path + " (" + what + " pattern)";
  if (p.contains("String") && p["String"].is_string()) return std::make_unique<Regex>(Regex::escape(p["String"].get<std::string>()), where);
  if (p.contains("Regex") && p["Regex"].is_string()) return std::make_unique<Regex>(p["Regex"].get<std::string>(), where);
  fail("{}: {} pattern is neither {{\"String\": ...}} nor {{\"Regex\": ...}}", path, what);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  std::string t = type_of(j, path, "pre_tokenizer");
  if (t == "Sequence") {
    auto s = std::make_unique<SequencePre>();
    LT_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(), "{}: Sequence pre_tokenizer needs \"pretokenizers\"",
             path);
    for (const auto& n : j["pretokenizers"])
      if (auto p = make_pre_tokenizer(n, path)) s->items.push_back(std::move(p));
    return s;
  }
  if (t == "Split") {
    auto s = std::make_unique<SplitPre>();
    s->pattern = make_pattern(j, path, "Split pre-tokenizer");
    s->behavior = parse_behavior(j, path);
    s->invert = j.value("invert", false);
    return s;
  }
  if (t == "ByteLevel") {
    auto b = std::make_unique<ByteLevelPre>();
    b->add_prefix_space = j.value("add_prefix_space", true);
    if (j.value("use_regex", true)) b->regex = std::make_unique<Regex>(kGpt2Pattern, path + " (ByteLevel regex)");
    return b;
  }
  if (t == "Metaspace") {
    auto m = std::make_unique<MetaspacePre>();
    if (j.contains("replacement") && j["replacement"].is_string()) m->replacement = j["replacement"].get<std::string>();
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "always") m->scheme = MetaspacePre::kAlways;
      else if (s == "first") m->scheme = MetaspacePre::kFirst;
      else if (s == "never") m->scheme = MetaspacePre::kNever;
      else fail("{}: unknown Metaspace prepend_scheme '{}'", path, excerpt(s));
    } else if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean()) {
      m->scheme = j["add_prefix_space"].get<bool>() ? MetaspacePre::kAlways : MetaspacePre::kNever;
    }
    m->split_on = j.value("split", true);
    m->rep_regex = std::make_unique<Regex>(Regex::escape(m->replacement), path + " (Metaspace)");
    return m;
  }
  if (t == "Digits") {
    auto s = std::make_unique<SplitPre>();
    s->pattern = std::make_unique<Regex>(R"(\p{N})", path + " (Digits)");
    s->behavior = j.value("individual_digits", false) ? Behavior::kIsolated : Behavior::kContiguous;
    return s;
  }
  fail("{}: unsupported pre_tokenizer type '{}' (supported: Sequence, Split, ByteLevel, Metaspace, Digits)", path, excerpt(t));
}

}  // namespace lt::hf
