// Bad training inputs give messages in leantune's words: a 100,000-deep JSONL line (named by file
// and line, no crash), YAML of the wrong type or form (file, line, column, key, expected type;
// never yaml-cpp's "bad conversion"), and a config path that is a directory.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../io/io_test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/data.h"
#include "train/train_config.h"

namespace lt {
namespace {

using test::TempDir;
using test::write_bytes;

const std::string kTok512 = std::string(LT_SHARED_DIR) + "/models/stories260K/tok512.bin";

TEST(JsonlErrors, DeepLineNamesFileAndLine) {
  TempDir d;
  auto tok = Tokenizer::load(kTok512);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write_bytes(d / "data.jsonl", "{\"text\": \"Once upon a time\"}\n{\"text\": " + deep + "}\n");
  EXPECT_LT_ERROR(load_jsonl_file(d / "data.jsonl", *tok, DataOptions{}),
                  {d / "data.jsonl", ":2:", "nests deeper than 64"});
  write_bytes(d / "data.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated " + std::string(100000, 'x') + "\n");
  std::string msg = test::error_of([&] { load_jsonl_file(d / "data.jsonl", *tok, DataOptions{}); });
  test::expect_contains(msg, {d / "data.jsonl", ":2:", "malformed JSON"});
  EXPECT_LT(msg.size(), 500u) << msg.substr(0, 600);
}

TEST(YamlErrors, WrongTypeNamesFileLineColumnKeyAndType) {
  TempDir d;
  write_bytes(d / "c.yaml", "base_model: m\nlora_r: [1, 2]\n");
  std::string msg = test::error_of([&] { load_train_config(d / "c.yaml"); });
  test::expect_contains(msg, {d / "c.yaml", "line 2", "column 9", "'lora_r'", "an integer", "got a list"});
  EXPECT_EQ(msg.find("yaml-cpp"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("bad conversion"), std::string::npos) << msg;
  write_bytes(d / "c.yaml", "learning_rate: fast\n");
  EXPECT_LT_ERROR(load_train_config(d / "c.yaml"), {"'learning_rate'", "a number", "got 'fast'"});
  write_bytes(d / "c.yaml", "lora_r: 99999999999999999999\n");
  EXPECT_LT_ERROR(load_train_config(d / "c.yaml"), {"'lora_r'", "-2147483648 to 2147483647", "99999999999999999999"});
  // the same through a --flag: no file position
  EXPECT_LT_ERROR(parse_train_args({"--lora_r", "abc"}), {"--lora_r", "an integer", "got 'abc'"});
}

TEST(YamlErrors, ListOrMappingAsKeyNamesThePosition) {
  TempDir d;
  write_bytes(d / "c.yaml", "base_model: m\n[a, b]: 1\n");
  std::string msg = test::error_of([&] { load_train_config(d / "c.yaml"); });
  test::expect_contains(msg, {d / "c.yaml", ":2:", "key: value"});
  EXPECT_EQ(msg.find("yaml-cpp"), std::string::npos) << msg;
  write_bytes(d / "c.yaml", "datasets:\n  - path: a.txt\n    {x: 1}: 2\n");
  msg = test::error_of([&] { load_train_config(d / "c.yaml"); });
  test::expect_contains(msg, {d / "c.yaml", ":3:"});
  EXPECT_EQ(msg.find("yaml-cpp"), std::string::npos) << msg;
  write_bytes(d / "c.yaml", "a: [1, 2\n");
  EXPECT_LT_ERROR(load_train_config(d / "c.yaml"), {d / "c.yaml", "malformed YAML"});
}

TEST(YamlErrors, DirectoryOrMissingConfig) {
  TempDir d;
  EXPECT_LT_ERROR(load_train_config(d.path), {d.path, "is a directory"});
  EXPECT_LT_ERROR(load_train_config(d / "none.yaml"), {d / "none.yaml", "cannot open"});
}

}  // namespace
}  // namespace lt
