// tokenizer.json decoders, each a step of tokens -> tokens as in tokenizers' decode_chain:
// ByteLevel (characters back to bytes, lossy UTF-8), Replace, ByteFallback ("<0xNN>" runs to
// UTF-8, one U+FFFD per byte when invalid), Fuse, Strip, Metaspace; plus GPT-2's byte table.
#include <array>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/utf8.h"

namespace lt::hf {

using json = nlohmann::json;

namespace {

struct ByteTable {
  std::array<std::string, 256> to_char;
  std::array<int, 324> to_byte;  // code points 0..323 cover the table
  ByteTable() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      uint32_t cp = printable ? b : 256 + n++;
      utf8::append(to_char[b], cp);
      to_byte[cp] = b;
    }
  }
};
const ByteTable& table() {
  static const ByteTable t;
  return t;
}

class SequenceDecoder final : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> items;
  void decode_chain(std::vector<std::string>& t) const override {
    for (const auto& d : items) d->decode_chain(t);
  }
};

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      std::string tb;
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        size_t len = 0;
        uint32_t cp = utf8::decode(t, i, &len);
        int b = utf8::valid_char_len(t, i) ? char_to_byte(cp) : -1;
        if (b < 0) ok = false;
        else tb += static_cast<char>(b);
        i += len;
      }
      bytes += ok ? tb : t;  // a token with a character outside the table passes as its bytes
    }
    tokens.assign(1, utf8::lossy(bytes));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  std::string from, to;
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (from.empty()) return;
    for (auto& t : tokens) {
      std::string out;
      size_t prev = 0, pos;
      while ((pos = t.find(from, prev)) != std::string::npos) {
        out.append(t, prev, pos - prev);
        out += to;
        prev = pos + from.size();
      }
      out.append(t, prev);
      t.swap(out);
    }
  }
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8::is_valid(pending)) out.push_back(pending);
      else
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(utf8::kReplacement);
      pending.clear();
    };
    for (auto& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex_digit(t[3]) >= 0 && hex_digit(t[4]) >= 0) {
        pending += static_cast<char>(hex_digit(t[3]) * 16 + hex_digit(t[4]));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

// Strips up to `start` leading and `stop` trailing copies of the character `content` per token.
class StripDecoder final : public Decoder {
 public:
  std::string content;
  int start = 0, stop = 0;
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (content.empty()) return;
    for (auto& t : tokens) {
      size_t a = 0, b = t.size();
      for (int i = 0; i < start && t.compare(a, content.size(), content) == 0 && a + content.size() <= b; ++i) a += content.size();
      for (int i = 0; i < stop && b >= a + content.size() && t.compare(b - content.size(), content.size(), content) == 0; ++i)
        b -= content.size();
      t = t.substr(a, b - a);
    }
  }
};

// Metaspace decoder: the replacement character becomes ' ', except that the first token drops it
// when a prefix was prepended at encode time.
class MetaspaceDecoder final : public Decoder {
 public:
  std::string replacement = "\xE2\x96\x81";
  bool prepend = true;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t p = 0; p < t.size();) {
        if (t.compare(p, replacement.size(), replacement) == 0) {
          if (!(i == 0 && prepend && p == 0)) out += ' ';
          p += replacement.size();
        } else {
          out += t[p++];
        }
      }
      tokens[i].swap(out);
    }
  }
};

std::string decoder_str_field(const json& j, const char* k, const std::string& path, const char* what) {
  LT_CHECK(j.contains(k) && j[k].is_string(), "{}: {} decoder needs a string \"{}\"", path, what, k);
  return j[k].get<std::string>();
}

}  // namespace

const std::string& byte_to_char(uint8_t b) { return table().to_char[b]; }

int char_to_byte(uint32_t cp) { return cp < table().to_byte.size() ? table().to_byte[cp] : -1; }

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  LT_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), "{}: decoder has no \"type\" string", path);
  std::string t = j["type"].get<std::string>();
  if (t == "Sequence") {
    LT_CHECK(j.contains("decoders") && j["decoders"].is_array(), "{}: Sequence decoder needs \"decoders\"", path);
    auto s = std::make_unique<SequenceDecoder>();
    for (const auto& d : j["decoders"])
      if (auto p = make_decoder(d, path)) s->items.push_back(std::move(p));
    return s;
  }
  if (t == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (t == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (t == "Fuse") return std::make_unique<FuseDecoder>();
  if (t == "Replace") {
    LT_CHECK(j.contains("pattern") && j["pattern"].is_object() && j["pattern"].contains("String") &&
                 j["pattern"]["String"].is_string(),
             "{}: Replace decoder needs {{\"pattern\": {{\"String\": ...}}}} (Regex patterns are not supported)", path);
    auto r = std::make_unique<ReplaceDecoder>();
    r->from = j["pattern"]["String"].get<std::string>();
    r->to = decoder_str_field(j, "content", path, "Replace");
    return r;
  }
  if (t == "Strip") {
    auto s = std::make_unique<StripDecoder>();
    s->content = decoder_str_field(j, "content", path, "Strip");
    s->start = j.value("start", 0);
    s->stop = j.value("stop", 0);
    return s;
  }
  if (t == "Metaspace") {
    auto m = std::make_unique<MetaspaceDecoder>();
    if (j.contains("replacement") && j["replacement"].is_string()) m->replacement = j["replacement"].get<std::string>();
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) m->prepend = j["prepend_scheme"] != "never";
    else if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean()) m->prepend = j["add_prefix_space"].get<bool>();
    return m;
  }
  fail("{}: unsupported decoder type '{}' (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)",
       path, excerpt(t));
}

}  // namespace lt::hf
