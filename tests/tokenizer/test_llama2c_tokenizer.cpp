// llama2.c tokenizer (tok512.bin of stories260K): encode matches run.c's encode (ids cross-checked
// against SentencePiece with tok512.model), decode follows run.c, bad files throw lt::Error naming
// the file, and StreamDecoder holds back split UTF-8.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <random>

#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::string kTok512 = std::string(LT_SHARED_DIR) + "/models/stories260K/tok512.bin";

std::string write_temp(const std::string& name, const std::string& bytes) {
  auto p = std::filesystem::temp_directory_path() / ("lt_tok_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
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

TEST(Llama2cTokenizer, EncodesStoryPromptLikeRunC) {
  auto tok = lt::Tokenizer::load(kTok512);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  // SentencePiece (tok512.model) gives these 15 pieces: "▁Once ▁upon ▁a ▁time , ▁there ▁was ▁a
  // ▁little ▁g ir l ▁named ▁Lily ." ; run.c adds BOS = 1.
  std::vector<int> want = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};
  EXPECT_EQ(tok->encode("Once upon a time, there was a little girl named Lily.", true), want);
  want.erase(want.begin());
  EXPECT_EQ(tok->encode("Once upon a time, there was a little girl named Lily.", false), want);
  EXPECT_EQ(tok->token_text(403), " Once");
}

TEST(Llama2cTokenizer, ByteFallbackAndEmpty) {
  auto tok = lt::Tokenizer::load(kTok512);
  // SentencePiece: ▁h é ll o ▁ <0xE4><0xB8><0xAD><0xE6><0x96><0x87> ▁ <0xF0><0x9F><0x98><0x80> !
  std::vector<int> want = {270, 485, 306, 414, 410, 231, 187, 176, 233, 153, 138, 410, 243, 162, 155, 131, 443};
  EXPECT_EQ(tok->encode("h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80!", false), want);
  EXPECT_EQ(tok->encode("123456", false), (std::vector<int>{410, 475, 479, 472, 484, 480, 490}));
  EXPECT_EQ(tok->encode("", true), std::vector<int>{1});
  EXPECT_TRUE(tok->encode("", false).empty());
}

TEST(Llama2cTokenizer, DecodeRoundTrips) {
  auto tok = lt::Tokenizer::load(kTok512);
  for (std::string s : {"Once upon a time, there was a little girl named Lily.", "h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80!",
                        "tabs\tand\nnewlines", "  two  spaces "}) {
    EXPECT_EQ(tok->decode(tok->encode(s, true), true), s) << s;
  }
  // Without BOS the start of the sequence drops the dummy-prefix space too, as SentencePiece's
  // decode does, so a generated continuation decoded on its own has no stray leading space.
  EXPECT_EQ(tok->decode(tok->encode("Lily", false), true), "Lily");
  EXPECT_EQ(tok->decode(tok->encode("a Lily", false), true), "a Lily");
  // Not skipping specials shows BOS without the export's newlines.
  EXPECT_EQ(tok->decode(std::vector<int>{1, 317, 2}, false), "<s>Lily</s>");
  // Out-of-range ids do not crash.
  EXPECT_EQ(tok->decode(std::vector<int>{-5, 100000}, true), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Llama2cTokenizer, StreamDecoderHoldsSplitUtf8) {
  auto tok = lt::Tokenizer::load(kTok512);
  std::string text = "h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80! Lily";
  std::vector<int> ids = tok->encode(text, true);
  lt::Tokenizer::StreamDecoder sd(*tok);
  std::string all;
  for (int id : ids) {
    std::string piece = sd.push(id);
    // Every piece is complete UTF-8: no byte of 中 / 文 / 😀 arrives alone.
    for (size_t i = 0; i < piece.size(); ++i) {
      unsigned char c = piece[i];
      if (c == 0xE4 || c == 0xE6 || c == 0xF0) {
        EXPECT_GE(piece.size() - i, c == 0xF0 ? 4u : 3u);
      }
    }
    all += piece;
  }
  all += sd.flush();
  EXPECT_EQ(all, tok->decode(ids, true));
  EXPECT_EQ(all, text);

  // A dangling lead byte comes out of flush() as U+FFFD.
  lt::Tokenizer::StreamDecoder sd2(*tok);
  EXPECT_EQ(sd2.push(0xE4 + 3), "");
  EXPECT_EQ(sd2.flush(), "\xEF\xBF\xBD");
}

// run.c's encode() transcribed literally (rescan per merge), as the oracle for the heap version.
std::vector<int> run_c_encode(const std::vector<std::string>& vocab, const std::vector<float>& scores, const std::string& text) {
  auto lookup = [&](const std::string& s) {
    for (size_t i = 0; i < vocab.size(); ++i)
      if (vocab[i] == s) return static_cast<int>(i);
    return -1;
  };
  std::vector<int> tokens = {1};
  if (!text.empty()) tokens.push_back(lookup(" "));
  std::string buf;
  for (size_t c = 0; c < text.size(); ++c) {
    if ((static_cast<unsigned char>(text[c]) & 0xC0) != 0x80) buf.clear();
    buf += text[c];
    if (c + 1 < text.size() && (static_cast<unsigned char>(text[c + 1]) & 0xC0) == 0x80 && buf.size() < 4) continue;
    int id = lookup(buf);
    if (id != -1) tokens.push_back(id);
    else
      for (unsigned char b : buf) tokens.push_back(b + 3);
    buf.clear();
  }
  while (true) {
    float best = -1e10f;
    int best_id = -1, best_idx = -1;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      int id = lookup(vocab[tokens[i]] + vocab[tokens[i + 1]]);
      if (id != -1 && scores[id] > best) best = scores[id], best_id = id, best_idx = static_cast<int>(i);
    }
    if (best_idx == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + best_idx + 1);
  }
  return tokens;
}

TEST(Llama2cTokenizer, HeapMergeMatchesRunCLoop) {
  std::string bytes = lt::read_text_file(kTok512);
  std::vector<std::string> vocab;
  std::vector<float> scores;
  for (size_t off = 4; off + 8 <= bytes.size();) {
    float sc;
    int32_t len;
    std::memcpy(&sc, bytes.data() + off, 4);
    std::memcpy(&len, bytes.data() + off + 4, 4);
    vocab.emplace_back(bytes.data() + off + 8, len);
    scores.push_back(sc);
    off += 8 + len;
  }
  ASSERT_EQ(vocab.size(), 512u);
  auto tok = lt::Tokenizer::load(kTok512);
  std::mt19937 rng(3);
  const std::vector<std::string> alphabet = {"a", "e", "t", "h", "o", "n", " ", "  ", "s", "r", "l", "i", "d", ".", ",",
                                             "Th", "\n", "\xC3\xA9", "\xE4\xB8\xAD", "!", "'", "L", "y", "w", "1"};
  for (int iter = 0; iter < 400; ++iter) {
    std::string s;
    for (int k = rng() % 40; k > 0; --k) s += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(tok->encode(s, true), run_c_encode(vocab, scores, s)) << s;
  }
}

TEST(Llama2cTokenizer, BadFilesNameTheFile) {
  std::string bytes = lt::read_text_file(kTok512);
  std::string trunc = write_temp("trunc.bin", bytes.substr(0, bytes.size() - 3));
  EXPECT_NE(error_of([&] { lt::Tokenizer::load(trunc); }).find(trunc), std::string::npos);
  EXPECT_NE(error_of([&] { lt::Tokenizer::load(trunc); }).find("truncated"), std::string::npos);
  std::string tiny = write_temp("tiny.bin", "ab");
  EXPECT_NE(error_of([&] { lt::Tokenizer::load(tiny); }).find(tiny), std::string::npos);
  std::string header_only = write_temp("hdr.bin", std::string("\x10\x00\x00\x00", 4));
  EXPECT_NE(error_of([&] { lt::Tokenizer::load(header_only); }).find(header_only), std::string::npos);
  // A SentencePiece .model is not a llama2.c .bin.
  std::string model = std::string(LT_SHARED_DIR) + "/models/stories260K/tok512.model";
  EXPECT_NE(error_of([&] { lt::Tokenizer::load(model); }).find(model), std::string::npos);
  std::string missing = "/nonexistent/tok.bin";
  EXPECT_NE(error_of([&] { lt::Tokenizer::load(missing); }).find(missing), std::string::npos);
  std::remove(trunc.c_str());
  std::remove(tiny.c_str());
  std::remove(header_only.c_str());
}

}  // namespace
