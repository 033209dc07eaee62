// tokenizer.json normalizers, as the tokenizers library applies them to each piece of text
// between added tokens: Sequence, the Unicode forms NFC / NFD / NFKC / NFKD, Lowercase, Strip,
// StripAccents, Replace (String or Regex pattern), Prepend, Nmt, BertNormalizer and ByteLevel.
// The Unicode work is in unicode_text.cpp (ICU, pinned to tokenizers' Unicode data).
// Precompiled (SentencePiece's compiled character map, used with Unigram models) is refused.
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_text.h"

namespace lt::hf {

using json = nlohmann::json;

namespace {

constexpr const char* kSupported =
    "Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Nmt, BertNormalizer, ByteLevel";

class SequenceNormalizer final : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> items;
  void normalize(std::string& s) const override {
    for (const auto& n : items) n->normalize(s);
  }
};

// A normalizer that is one function of the text.
class FunctionNormalizer final : public Normalizer {
 public:
  explicit FunctionNormalizer(std::function<std::string(std::string_view)> f) : f_(std::move(f)) {}
  void normalize(std::string& s) const override { s = f_(s); }

 private:
  std::function<std::string(std::string_view)> f_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  std::unique_ptr<Regex> pattern;
  std::string content;
  void normalize(std::string& s) const override {
    auto m = pattern->find_all(s);
    if (m.empty()) return;
    std::string out;
    size_t prev = 0;
    for (auto [a, b] : m) {
      out.append(s, prev, a - prev);
      out += content;
      prev = b;
    }
    out.append(s, prev);
    s.swap(out);
  }
};

bool bool_field(const json& j, const char* key, bool def, const std::string& path, const char* what) {
  if (!j.contains(key) || j[key].is_null()) return def;
  LT_CHECK(j[key].is_boolean(), "{}: {} field \"{}\" must be true or false", path, what, key);
  return j[key].get<bool>();
}

std::string str_field(const json& j, const char* key, const std::string& path, const char* what) {
  LT_CHECK(j.contains(key) && j[key].is_string(), "{}: {} normalizer needs a string \"{}\"", path, what, key);
  return j[key].get<std::string>();
}

std::unique_ptr<Normalizer> fn(std::function<std::string(std::string_view)> f) {
  return std::make_unique<FunctionNormalizer>(std::move(f));
}

// BertNormalizer: clean_text, handle_chinese_chars, strip_accents (null: follows lowercase), lowercase.
std::unique_ptr<Normalizer> make_bert(const json& j, const std::string& path) {
  const char* what = "BertNormalizer";
  const bool clean = bool_field(j, "clean_text", true, path, what);
  const bool chinese = bool_field(j, "handle_chinese_chars", true, path, what);
  const bool lower = bool_field(j, "lowercase", true, path, what);
  const bool accents = bool_field(j, "strip_accents", lower, path, what);
  return fn([=](std::string_view in) {
    std::string s(in);
    if (clean) s = unicode::bert_clean_text(s);
    if (chinese) s = unicode::bert_pad_chinese(s);
    if (accents) s = unicode::bert_strip_accents(s);
    if (lower) s = unicode::lowercase(s);
    return s;
  });
}

std::unique_ptr<Normalizer> make_unicode_form(unicode::NormForm form) {
  return fn([form](std::string_view s) { return unicode::normalize(s, form); });
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  LT_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), "{}: normalizer has no \"type\" string", path);
  const std::string t = j["type"].get<std::string>();
  if (t == "Sequence") {
    LT_CHECK(j.contains("normalizers") && j["normalizers"].is_array(), "{}: Sequence normalizer needs \"normalizers\"", path);
    auto s = std::make_unique<SequenceNormalizer>();
    for (const auto& n : j["normalizers"])
      if (auto p = make_normalizer(n, path)) s->items.push_back(std::move(p));
    return s;
  }
  if (t == "NFC") return make_unicode_form(unicode::NormForm::NFC);
  if (t == "NFD") return make_unicode_form(unicode::NormForm::NFD);
  if (t == "NFKC") return make_unicode_form(unicode::NormForm::NFKC);
  if (t == "NFKD") return make_unicode_form(unicode::NormForm::NFKD);
  if (t == "Lowercase") return fn(unicode::lowercase);
  if (t == "StripAccents") return fn(unicode::strip_accents);
  if (t == "Nmt") return fn(unicode::nmt);
  if (t == "Strip") {
    const bool left = bool_field(j, "strip_left", true, path, "Strip normalizer");
    const bool right = bool_field(j, "strip_right", true, path, "Strip normalizer");
    return fn([=](std::string_view s) { return unicode::strip(s, left, right); });
  }
  if (t == "Prepend") {
    const std::string prepend = str_field(j, "prepend", path, "Prepend");
    return fn([prepend](std::string_view s) { return s.empty() ? std::string() : prepend + std::string(s); });
  }
  if (t == "Replace") {
    auto r = std::make_unique<ReplaceNormalizer>();
    r->pattern = make_pattern(j, path, "Replace normalizer");
    r->content = str_field(j, "content", path, "Replace");
    return r;
  }
  if (t == "BertNormalizer") return make_bert(j, path);
  if (t == "ByteLevel") {
    return fn([](std::string_view s) {
      std::string out;
      for (char c : s) out += byte_to_char(static_cast<uint8_t>(c));
      return out;
    });
  }
  if (t == "Precompiled")
    fail("{}: normalizer type 'Precompiled' (SentencePiece's compiled character map, used by Unigram tokenizers) is "
         "not supported; supported: {}",
         path, kSupported);
  fail("{}: unsupported normalizer type '{}' (supported: {})", path, excerpt(t), kSupported);
}

}  // namespace lt::hf
