// tokenizer.json tokenizers built by hand (ids derived by hand from the merge ranks): a
// SentencePiece-style BPE with byte fallback (Llama 2 layout) and a byte-level BPE (GPT-2 layout);
// added tokens, post-processor BOS, tokenizer_config.json overrides, stream decoding of byte
// fallback, and bad files giving lt::Error naming the file. Parity with the `tokenizers` library
// itself is in tests/python/test_tokenizer_parity.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/tokenizer.h"

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("lt_hf_tok_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const lt::Error& e) {
    return e.what();
  }
  return "<no lt::Error>";
}

const std::string kSp = "\xE2\x96\x81";  // ▁

json sentencepiece_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  vocab[kSp] = 259;
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab[kSp + "h"] = 262;
  vocab["hi"] = 263;
  vocab[kSp + "hi"] = 264;
  vocab["\xC3\xA9"] = 265;  // é
  json j;
  j["added_tokens"] = json::array({
      {{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
      {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
  });
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kSp}},
                                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}})}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}},
                                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  j["model"] = {{"type", "BPE"},        {"vocab", vocab},       {"byte_fallback", true}, {"unk_token", "<unk>"},
                {"fuse_unk", true},     {"dropout", nullptr},   {"ignore_merges", false},
                {"merges", json::array({kSp + " h", json::array({"h", "i"}), kSp + "h i"})}};
  return j;
}

json bytelevel_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[lt::hf::byte_to_char(static_cast<uint8_t>(b))] = b;
  vocab["hi"] = 256;
  vocab["\xC4\xA0hi"] = 257;  // Ġhi
  json j;
  j["added_tokens"] = json::array({{{"id", 258}, {"content", "<|eot|>"}, {"special", true}, {"normalized", false}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"h i", "\xC4\xA0 hi"})}};
  return j;
}

TEST(HfTokenizer, SentencePieceStyleEncode) {
  auto tok = lt::Tokenizer::load(write(temp_dir() / "sp" / "tokenizer.json", sentencepiece_json().dump()));
  EXPECT_EQ(tok->vocab_size(), 266);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->encode("hi", true), (std::vector<int>{1, 264}));
  EXPECT_EQ(tok->encode("hi hi", false), (std::vector<int>{264, 264}));
  EXPECT_EQ(tok->encode("\xC3\xA9", false), (std::vector<int>{259, 265}));
  // 中 = E4 B8 AD has no piece: byte fallback ids byte + 3.
  EXPECT_EQ(tok->encode("\xE4\xB8\xAD", false), (std::vector<int>{259, 0xE4 + 3, 0xB8 + 3, 0xAD + 3}));
  // "<s>" in the text is the special token; the normalizer then runs on "hi" alone.
  EXPECT_EQ(tok->encode("<s>hi", true), (std::vector<int>{1, 1, 263 + 1}));
  EXPECT_TRUE(tok->encode("", false).empty());
  EXPECT_EQ(tok->encode("", true), std::vector<int>{1});
  // Unknown character without a byte token: cannot happen with full byte fallback; x is bytes.
  EXPECT_EQ(tok->encode("x", false), (std::vector<int>{259, 'x' + 3}));
}

TEST(HfTokenizer, SentencePieceStyleDecode) {
  auto tok = lt::Tokenizer::load(write(temp_dir() / "sp" / "tokenizer.json", sentencepiece_json().dump()));
  EXPECT_EQ(tok->decode(std::vector<int>{1, 264, 264}, true), "hi hi");
  EXPECT_EQ(tok->decode(std::vector<int>{1, 264, 264}, false), "<s> hi hi");
  EXPECT_EQ(tok->decode(std::vector<int>{259, 0xE4 + 3, 0xB8 + 3, 0xAD + 3}, true), "\xE4\xB8\xAD");
  // Invalid byte runs become one U+FFFD per byte (ByteFallback decoder).
  EXPECT_EQ(tok->decode(std::vector<int>{0xE4 + 3, 0xB8 + 3}, true), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode(std::vector<int>{-1, 99999}, true), "");
  for (std::string s : {"hi", " hi  hi ", "h\xC3\xA9 \xE4\xB8\xAD\xF0\x9F\x98\x80 x", ""})
    EXPECT_EQ(tok->decode(tok->encode(s, true), true), s);
}

TEST(HfTokenizer, StreamDecodingHoldsByteFallback) {
  auto tok = lt::Tokenizer::load(write(temp_dir() / "sp" / "tokenizer.json", sentencepiece_json().dump()));
  std::string text = "hi \xE4\xB8\xAD hi \xF0\x9F\x98\x80";
  std::vector<int> ids = tok->encode(text, true);
  lt::Tokenizer::StreamDecoder sd(*tok);
  std::vector<std::string> parts;
  for (int id : ids) parts.push_back(sd.push(id));
  parts.push_back(sd.flush());
  std::string all;
  for (const auto& p : parts) {
    EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos) << "partial character emitted";
    all += p;
  }
  EXPECT_EQ(all, text);
  EXPECT_EQ(all, tok->decode(ids, true));
}

TEST(HfTokenizer, ByteLevel) {
  auto tok = lt::Tokenizer::load(write(temp_dir() / "bl.json", bytelevel_json().dump()));
  EXPECT_EQ(tok->vocab_size(), 259);
  EXPECT_EQ(tok->encode("hi hi", true), (std::vector<int>{256, 257}));
  EXPECT_EQ(tok->encode("\xE4\xB8\xAD", false), (std::vector<int>{0xE4, 0xB8, 0xAD}));
  EXPECT_EQ(tok->encode("hi<|eot|>", false), (std::vector<int>{256, 258}));
  EXPECT_TRUE(tok->is_special(258));
  EXPECT_EQ(tok->decode(std::vector<int>{256, 258}, true), "hi");
  EXPECT_EQ(tok->decode(std::vector<int>{256, 258}, false), "hi<|eot|>");
  EXPECT_EQ(tok->decode(std::vector<int>{0xE4, 0xB8}, true), "\xEF\xBF\xBD");  // lossy, one per run
  EXPECT_EQ(tok->token_text(257), "\xC4\xA0hi");

  std::vector<int> ids = tok->encode("a\xF0\x9F\x98\x80 hi", false);
  lt::Tokenizer::StreamDecoder sd(*tok, false);
  std::string all;
  for (int id : ids) all += sd.push(id);
  all += sd.flush();
  EXPECT_EQ(all, "a\xF0\x9F\x98\x80 hi");
}

TEST(HfTokenizer, FolderWithTokenizerConfig) {
  fs::path d = temp_dir() / "folder";
  write(d / "tokenizer.json", bytelevel_json().dump());
  write(d / "tokenizer_config.json", R"({"add_bos_token": true, "add_eos_token": true,
      "bos_token": {"content": "<|eot|>"}, "eos_token": "<|eot|>"})");
  auto tok = lt::Tokenizer::load(d.string());
  EXPECT_EQ(tok->bos_id(), 258);
  EXPECT_EQ(tok->encode("hi", true), (std::vector<int>{258, 256, 258}));
  EXPECT_EQ(tok->encode("hi", false), (std::vector<int>{256}));
}

TEST(HfTokenizer, RandomBytesNeverCrash) {
  auto sp = lt::Tokenizer::load(write(temp_dir() / "sp" / "tokenizer.json", sentencepiece_json().dump()));
  auto bl = lt::Tokenizer::load(write(temp_dir() / "bl.json", bytelevel_json().dump()));
  auto l2 = lt::Tokenizer::load(std::string(LT_SHARED_DIR) + "/models/stories260K/tok512.bin");
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s(rng() % 24, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 4 == 0 ? "hi <s>\xE4"[rng() % 8] : rng());
    for (auto* tok : {sp.get(), bl.get(), l2.get()}) {
      std::vector<int> ids = tok->encode(s, true);
      for (int id : ids) ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
      std::string d = tok->decode(ids, false);
      lt::Tokenizer::StreamDecoder sd(*tok, false);
      std::string all;
      for (int id : ids) all += sd.push(id);
      all += sd.flush();
      EXPECT_EQ(all, d);
    }
  }
}

TEST(HfTokenizer, StreamOfRandomIdsEqualsDecode) {
  auto sp = lt::Tokenizer::load(write(temp_dir() / "sp" / "tokenizer.json", sentencepiece_json().dump()));
  auto bl = lt::Tokenizer::load(write(temp_dir() / "bl.json", bytelevel_json().dump()));
  auto l2 = lt::Tokenizer::load(std::string(LT_SHARED_DIR) + "/models/stories260K/tok512.bin");
  std::mt19937 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    for (auto* tok : {sp.get(), bl.get(), l2.get()}) {
      std::vector<int> ids(rng() % 16);
      for (int& id : ids) id = static_cast<int>(rng() % tok->vocab_size());
      for (bool skip : {false, true}) {
        lt::Tokenizer::StreamDecoder sd(*tok, skip);
        std::string all;
        for (int id : ids) all += sd.push(id);
        all += sd.flush();
        EXPECT_EQ(all, tok->decode(ids, skip));
      }
    }
  }
}

TEST(HfTokenizer, BadFilesNameTheFile) {
  fs::path d = temp_dir() / "bad";
  struct Case {
    std::string name, text, needle;
  };
  json unknown = sentencepiece_json();
  unknown["model"]["type"] = "Unigram";
  json bad_merge = bytelevel_json();
  bad_merge["model"]["merges"].push_back("zz q");
  json bad_pre = bytelevel_json();
  bad_pre["pre_tokenizer"] = {{"type", "Frobnicate"}};
  json bad_regex = bytelevel_json();
  bad_regex["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  json bad_type = bytelevel_json();
  bad_type["pre_tokenizer"]["use_regex"] = "yes";
  for (const Case& c : std::vector<Case>{{"malformed.json", "{\"model\": {\"type\": \"BPE\", ", "malformed JSON"},
                                         {"unknown.json", unknown.dump(), "Unigram"},
                                         {"merge.json", bad_merge.dump(), "zz"},
                                         {"pre.json", bad_pre.dump(), "Frobnicate"},
                                         {"regex.json", bad_regex.dump(), "(unclosed"},
                                         {"type.json", bad_type.dump(), ""},
                                         {"array.json", "[1, 2]", "not a JSON object"},
                                         {"novocab.json", R"({"model": {"type": "BPE"}})", "vocab"}}) {
    std::string p = write(d / c.name, c.text);
    std::string err = error_of([&] { lt::Tokenizer::load(p); });
    EXPECT_NE(err.find(p), std::string::npos) << err;
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
  }
  fs::path empty_dir = d / "empty";
  fs::create_directories(empty_dir);
  std::string err = error_of([&] { lt::Tokenizer::load(empty_dir.string()); });
  EXPECT_NE(err.find("tokenizer.json"), std::string::npos) << err;
  write(d / "cfgdir" / "tokenizer.json", bytelevel_json().dump());
  std::string cfg = write(d / "cfgdir" / "tokenizer_config.json", "{not json");
  err = error_of([&] { lt::Tokenizer::load((d / "cfgdir").string()); });
  EXPECT_NE(err.find(cfg), std::string::npos) << err;
}

}  // namespace

namespace {
// Forwards to another tokenizer and records the longest id list decode() was given.
class DecodeLengthProbe : public lt::Tokenizer {
 public:
  explicit DecodeLengthProbe(const lt::Tokenizer& t) : t_(t) {}
  std::vector<int> encode(std::string_view s, bool add) const override { return t_.encode(s, add); }
  std::string decode(std::span<const int> ids, bool skip) const override {
    longest = std::max(longest, ids.size());
    return t_.decode(ids, skip);
  }
  int vocab_size() const override { return t_.vocab_size(); }
  int bos_id() const override { return t_.bos_id(); }
  int eos_id() const override { return t_.eos_id(); }
  bool is_special(int id) const override { return t_.is_special(id); }
  std::string token_text(int id) const override { return t_.token_text(id); }
  mutable size_t longest = 0;

 private:
  const lt::Tokenizer& t_;
};
}  // namespace

// Long random streams (ids drawn mostly from byte pieces / single bytes, so multi-byte characters
// are split across tokens and often left partial), after a primed prompt: the pieces concatenated
// equal decode() of the whole continuation in context, and no push decodes more than the ids
// since the last complete text (plus one context token), so a stream is O(new tokens).
TEST(HfTokenizer, StreamDecoderIsIncrementalAndEqualsDecode) {
  auto sp = lt::Tokenizer::load(write(temp_dir() / "sp" / "tokenizer.json", sentencepiece_json().dump()));
  auto bl = lt::Tokenizer::load(write(temp_dir() / "bl.json", bytelevel_json().dump()));
  auto l2 = lt::Tokenizer::load(std::string(LT_SHARED_DIR) + "/models/stories260K/tok512.bin");
  std::mt19937 rng(23);
  for (auto* base : {sp.get(), bl.get(), l2.get()}) {
    DecodeLengthProbe tok(*base);
    const int V = tok.vocab_size();
    for (int iter = 0; iter < 60; ++iter) {
      // a prompt of whole text (so its decode is a prefix of the whole decode), then random ids
      static const char* kPrompts[] = {"", "hi", "hi hi", "h\xC3\xA9 hi"};
      const std::vector<int> prompt = tok.encode(kPrompts[rng() % 4], false);
      std::vector<int> ids(100 + rng() % 200);
      for (int& id : ids) id = int(rng() % 3 == 0 ? rng() % V : (rng() % 2 ? 3 + 0xC0 + rng() % 64 : 3 + 0x80 + rng() % 64));
      for (bool skip : {false, true}) {
        lt::Tokenizer::StreamDecoder sd(tok, skip);
        sd.prime(prompt);
        std::string all;
        size_t worst = 0;      // the most ids a push decoded beyond its bound
        size_t since = 0;      // ids pushed since the last push that returned text
        bool restarted = false;  // some push returned text (the window restarted after the prompt)
        for (int id : ids) {
          tok.longest = 0;
          const std::string piece = sd.push(id);
          all += piece;
          ++since;
          const size_t bound = since + 1 + (restarted ? 0 : prompt.size());
          if (tok.longest > bound) worst = std::max(worst, tok.longest - bound);
          if (!piece.empty()) since = 0, restarted = true;
        }
        all += sd.flush();
        std::vector<int> whole = prompt;
        whole.insert(whole.end(), ids.begin(), ids.end());
        const std::string full = tok.decode(whole, skip), head = tok.decode(prompt, skip);
        ASSERT_EQ(full.compare(0, head.size(), head), 0) << "the prompt's text is not a prefix";
        EXPECT_EQ(all, full.substr(head.size())) << "iteration " << iter;
        EXPECT_EQ(worst, 0u) << "a push decoded " << worst << " ids more than those since the last text";
      }
    }
  }
}
