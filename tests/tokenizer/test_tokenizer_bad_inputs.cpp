// Hostile tokenizer files: 100,000-deep tokenizer.json / tokenizer_config.json, token ids far
// past the vocabulary (a 16,777,215 id used to allocate a 537 MB table), llama2.c files with NaN
// or inf scores, a llama2.c tokenizer smaller than the model's vocabulary, and the format chosen
// by the file name (a non-JSON .json is a JSON error, not "a bad llama2.c file").
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "../io/io_test_util.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace lt {
namespace {

using json = nlohmann::json;
using test::TempDir;
using test::write_bytes;

const std::string kTok512 = std::string(LT_SHARED_DIR) + "/models/stories260K/tok512.bin";

// A byte-level BPE tokenizer.json: vocab a..d (ids 0..3) and one added token at `added_id`.
json small_json(int added_id) {
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}}}, {"merges", json::array()}};
  j["added_tokens"] = json::array({{{"id", added_id}, {"content", "<|end|>"}, {"special", true}}});
  return j;
}

// llama2.c tokenizer bytes: max_token_length, then (score, length, bytes) per piece.
std::string llama2c_bytes(const std::vector<std::pair<float, std::string>>& entries) {
  std::string out(4, '\0');
  int32_t max_len = 8;
  std::memcpy(out.data(), &max_len, 4);
  for (const auto& [score, piece] : entries) {
    char buf[8];
    int32_t len = int32_t(piece.size());
    std::memcpy(buf, &score, 4);
    std::memcpy(buf + 4, &len, 4);
    out.append(buf, 8);
    out += piece;
  }
  return out;
}

TEST(TokenizerBadInputs, DeepJsonIsAnErrorNamingTheFile) {
  TempDir d;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write_bytes(d / "tokenizer.json", deep);
  EXPECT_LT_ERROR(Tokenizer::load(d / "tokenizer.json"), {d / "tokenizer.json", "nests deeper than 64"});
  // deep inside a field the tokenizer builders walk recursively (a normalizer Sequence)
  json j = small_json(4);
  std::string text = j.dump();
  text.insert(text.size() - 1, ",\"normalizer\":" + deep);
  write_bytes(d / "tokenizer.json", text);
  EXPECT_LT_ERROR(Tokenizer::load(d / "tokenizer.json"), {d / "tokenizer.json", "nests deeper than 64"});
  // tokenizer_config.json next to it
  write_bytes(d / "tokenizer.json", small_json(4).dump());
  write_bytes(d / "tokenizer_config.json", deep);
  EXPECT_LT_ERROR(Tokenizer::load(d.path), {d / "tokenizer_config.json", "nests deeper than 64"});
}

TEST(TokenizerBadInputs, IdsAreBoundedByTheNumberOfTokens) {
  TempDir d;
  // 4 vocab entries + 1 added token: ids 0..4 are possible, 4 is the largest valid one
  write_bytes(d / "ok.json", small_json(4).dump());
  EXPECT_EQ(Tokenizer::load(d / "ok.json")->vocab_size(), 5);
  write_bytes(d / "added.json", small_json(16777215).dump());
  EXPECT_LT_ERROR(Tokenizer::load(d / "added.json"),
                  {d / "added.json", "added_tokens token '<|end|>'", "id 16777215", "0..4"});
  json v = small_json(4);
  v["model"]["vocab"]["d"] = 16777215;
  write_bytes(d / "vocab.json", v.dump());
  EXPECT_LT_ERROR(Tokenizer::load(d / "vocab.json"), {d / "vocab.json", "model.vocab token 'd'", "id 16777215"});
  v["model"]["vocab"]["d"] = 5;  // just past the limit
  write_bytes(d / "vocab.json", v.dump());
  EXPECT_LT_ERROR(Tokenizer::load(d / "vocab.json"), {"model.vocab token 'd'", "id 5", "0..4"});
  v["model"]["vocab"]["d"] = -1;
  write_bytes(d / "vocab.json", v.dump());
  EXPECT_LT_ERROR(Tokenizer::load(d / "vocab.json"), {"model.vocab token 'd'", "id -1"});
}

TEST(TokenizerBadInputs, FormatFollowsTheFileName) {
  TempDir d;
  // not JSON but named .json: a JSON error, not "not a llama2.c tokenizer"
  write_bytes(d / "tokenizer.json", "version: 1\nmodel: bpe\n");
  std::string msg = test::error_of([&] { Tokenizer::load(d / "tokenizer.json"); });
  test::expect_contains(msg, {d / "tokenizer.json", "malformed JSON", "line 1"});
  EXPECT_EQ(msg.find("llama2.c"), std::string::npos) << msg;
  // a .bin starting with '{' is read as llama2.c, whatever its first byte
  write_bytes(d / "tok.bin", "{\"model\": {}}");
  EXPECT_LT_ERROR(Tokenizer::load(d / "tok.bin"), {d / "tok.bin", "llama2.c"});
  // a SentencePiece .model (protobuf) is explained
  write_bytes(d / "tokenizer.model", std::string("\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02", 16));
  EXPECT_LT_ERROR(Tokenizer::load(d / "tokenizer.model"), {d / "tokenizer.model", "SentencePiece", "tokenizer.json"});
  // an unknown extension still goes by content
  write_bytes(d / "tok.txt", small_json(4).dump());
  EXPECT_EQ(Tokenizer::load(d / "tok.txt")->vocab_size(), 5);
  // a folder where a file is expected is named as such
  EXPECT_LT_ERROR(read_text_file(d.path), {d.path, "is a directory"});
}

TEST(TokenizerBadInputs, Llama2cNonFiniteScoresAreErrors) {
  TempDir d;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf}) {
    write_bytes(d / "tok.bin", llama2c_bytes({{0.0f, "<unk>"}, {0.0f, "<s>"}, {bad, "ab"}}));
    EXPECT_LT_ERROR(Tokenizer::load(d / "tok.bin"), {d / "tok.bin", "entry 2 ('ab')", "finite"});
  }
  write_bytes(d / "tok.bin", llama2c_bytes({{0.0f, "<unk>"}, {0.0f, "<s>"}, {-1.5f, "ab"}}));
  EXPECT_EQ(Tokenizer::load(d / "tok.bin")->vocab_size(), 3);
}

TEST(TokenizerBadInputs, Llama2cVocabMustMatchTheModel) {
  // tok512.bin with its last 100 entries cut off: loads, but cannot serve a 512-token model
  const std::string full = read_text_file(kTok512);
  size_t off = 4;
  for (int i = 0; i < 412; ++i) {
    int32_t len;
    std::memcpy(&len, full.data() + off + 4, 4);
    off += 8 + size_t(len);
  }
  TempDir d;
  write_bytes(d / "cut.bin", full.substr(0, off));
  auto cut = Tokenizer::load(d / "cut.bin");
  ASSERT_EQ(cut->vocab_size(), 412);
  EXPECT_LT_ERROR(check_tokenizer_fits_model(*cut, 512, "stories260K.bin"),
                  {d / "cut.bin", "412 entries", "stories260K.bin", "vocabulary of 512", "truncated"});
  auto whole = Tokenizer::load(kTok512);
  check_tokenizer_fits_model(*whole, 512, "stories260K.bin");  // no throw
  EXPECT_LT_ERROR(check_tokenizer_fits_model(*whole, 1024, "m"), {"512 entries", "vocabulary of 1024"});
  // a tokenizer.json may be smaller than the model (padded embeddings), never larger
  write_bytes(d / "t.json", small_json(4).dump());
  auto hf = Tokenizer::load(d / "t.json");
  check_tokenizer_fits_model(*hf, 64, "m");  // no throw
  EXPECT_LT_ERROR(check_tokenizer_fits_model(*hf, 4, "m"), {d / "t.json", "ids up to 4", "vocabulary of 4"});
}

}  // namespace
}  // namespace lt
