// parse_json (depth bound, error messages), excerpt() and read_text_file on bad paths: the
// shared helpers every JSON file and every message about user input go through.
#include <gtest/gtest.h>

#include <string>

#include "../io/io_test_util.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "core/mapped_file.h"

namespace lt {
namespace {

std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

TEST(JsonParse, NestingUpToTheLimitParses) {
  nlohmann::json j = parse_json(nested(kMaxJsonDepth), "f.json");
  int depth = 0;
  const nlohmann::json* p = &j;
  while (p->is_array()) {
    ++depth;
    if (p->empty()) break;
    p = &(*p)[0];
  }
  EXPECT_EQ(depth, kMaxJsonDepth);
}

TEST(JsonParse, DeeperThanTheLimitIsAnErrorNamingTheSource) {
  EXPECT_LT_ERROR(parse_json(nested(kMaxJsonDepth + 1), "f.json"), {"f.json", "deeper than 64", "column 65"});
  // 100,000 levels: rejected by the scan, nothing recursive runs (this would overflow the stack)
  const std::string deep = nested(100000);
  std::string msg = test::error_of([&] { parse_json(deep, "deep.json"); });
  test::expect_contains(msg, {"deep.json", "nests deeper than 64 levels"});
  EXPECT_LT(msg.size(), 400u) << "the message must not echo the input";
  // objects count as well, and the line is right
  std::string obj = "{\"a\":\n";
  for (int i = 0; i < 100; ++i) obj += "{\"a\":";
  EXPECT_LT_ERROR(parse_json(obj, "o.json"), {"o.json", "line 2"});
}

TEST(JsonParse, BracketsInsideStringsDoNotCount) {
  const std::string s = "{\"k\": \"" + std::string(1000, '[') + "\\\"[[[\"}";
  nlohmann::json j = parse_json(s, "s.json");
  EXPECT_EQ(j["k"].get<std::string>().size(), 1004u);
}

TEST(JsonParse, SyntaxErrorsNameLineColumnAndAShortExcerpt) {
  std::string msg = test::error_of([&] { parse_json("{\"a\": 1,\n \"b\": tru}", "cfg.json"); });
  test::expect_contains(msg, {"cfg.json", "malformed JSON", "line 2", "near '"});
  EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
  // an unterminated 1 MB string: nlohmann would echo it all ("last read: ..."); the message stays short
  const std::string huge = "{\"a\": \"" + std::string(1 << 20, 'x');
  msg = test::error_of([&] { parse_json(huge, "big.json"); });
  test::expect_contains(msg, {"big.json", "malformed JSON"});
  EXPECT_LT(msg.size(), 500u) << msg.substr(0, 600);
  // an empty source name gives no prefix (a JSONL line, named by its caller)
  msg = test::error_of([&] { parse_json("nope", ""); });
  EXPECT_EQ(msg.rfind("malformed JSON", 0), 0u) << msg;
}

TEST(JsonExcerpt, CutsLongValues) {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 10000; ++i) big.push_back(i);
  const std::string e = json_excerpt(big);
  EXPECT_EQ(e.rfind("[0,1,2,", 0), 0u) << e;
  EXPECT_LE(e.size(), 80u + 3u);  // 80 characters + the 3-byte "…"
  EXPECT_EQ(e.substr(e.size() - 3), "\xE2\x80\xA6");
  EXPECT_EQ(json_excerpt(nlohmann::json("short")), "\"short\"");
}

TEST(Excerpt, EscapesControlAndInvalidBytesKeepsUtf8) {
  EXPECT_EQ(excerpt("a\nb\tc"), "a\\nb\\tc");
  EXPECT_EQ(excerpt(std::string("x\x01y\xFFz", 5)), "x\\x01y\\xFFz");
  EXPECT_EQ(excerpt("\xE2\x96\x81hi"), "\xE2\x96\x81hi");      // ▁hi: one character, kept whole
  EXPECT_EQ(excerpt("\xE2\x96"), "\\xE2\\x96");               // a truncated sequence is escaped
  EXPECT_EQ(excerpt("\xED\xA0\x80"), "\\xED\\xA0\\x80");      // a UTF-16 surrogate is not UTF-8
  EXPECT_EQ(excerpt("abcdef", 3), "abc\xE2\x80\xA6");
  EXPECT_EQ(excerpt("abc", 3), "abc");  // exactly the limit: not cut
  // the limit counts characters, not bytes
  EXPECT_EQ(excerpt("\xC3\xA9\xC3\xA9\xC3\xA9", 2), "\xC3\xA9\xC3\xA9\xE2\x80\xA6");
}

TEST(ReadTextFile, DirectoryAndMissingFileAreNamed) {
  test::TempDir d;
  EXPECT_LT_ERROR(read_text_file(d.path), {d.path, "is a directory, expected a file"});
  EXPECT_LT_ERROR(read_text_file(d / "missing.json"), {d / "missing.json", "cannot open"});
  EXPECT_LT_ERROR(load_json_file(d.path), {d.path, "is a directory"});
  test::write_bytes(d / "ok.json", "{\"a\": [1, 2]}");
  EXPECT_EQ(load_json_file(d / "ok.json")["a"][1].get<int>(), 2);
}

}  // namespace
}  // namespace lt
