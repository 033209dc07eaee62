// Hostile JSON in every model file leantune reads: 100,000-deep nesting (which used to overflow
// the stack when a message printed the value back) at the top level and inside a field of
// config.json, a safetensors header, model.safetensors.index.json and adapter_config.json; long
// values cut to an excerpt in messages; and a model weight of a dtype the loaders cannot use, named
// with its file and the dtypes that are supported.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/json_parse.h"
#include "io/hf_model.h"
#include "io/model_files.h"
#include "io_test_util.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "io/tensor_set.h"

namespace lt {
namespace {

using test::TempDir;
using test::write_bytes;

const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');

// A safetensors file: 8-byte little-endian header length, the header (space-padded so that the
// data starts 8-byte aligned, as the format's writers do), then `data`.
std::string safetensors_bytes(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(DeepJson, ConfigJsonTopLevelAndInAField) {
  TempDir d;
  for (const std::string& text : {kDeep, "{\"model_type\": \"llama\", \"hidden_size\": " + kDeep + "}"}) {
    write_bytes(d / "config.json", text);
    EXPECT_LT_ERROR(load_hf_config(d / "config.json"), {d / "config.json", "nests deeper than 64 levels"});
  }
}

TEST(DeepJson, SafetensorsHeader) {
  TempDir d;
  for (const std::string& header : {kDeep, "{\"w\": {\"dtype\": \"F32\", \"shape\": " + kDeep + "}}"}) {
    write_bytes(d / "m.safetensors", safetensors_bytes(header, ""));
    TensorSet ts;
    EXPECT_LT_ERROR(load_safetensors(d / "m.safetensors", ts), {d / "m.safetensors", "nests deeper than 64"});
  }
}

TEST(DeepJson, SafetensorsIndex) {
  TempDir d;
  write_bytes(d / "model.safetensors.index.json", "{\"weight_map\": " + kDeep + "}");
  EXPECT_LT_ERROR(load_hf_weights(d.path), {d / "model.safetensors.index.json", "nests deeper than 64"});
}

TEST(DeepJson, AdapterConfig) {
  std::string base;
  EXPECT_LT_ERROR(parse_peft_adapter_config(kDeep, "a/adapter_config.json", &base),
                  {"a/adapter_config.json", "nests deeper than 64"});
  const std::string in_field = "{\"peft_type\": \"LORA\", \"r\": " + kDeep + "}";
  EXPECT_LT_ERROR(parse_peft_adapter_config(in_field, "a/adapter_config.json", &base),
                  {"a/adapter_config.json", "nests deeper than 64"});
}

TEST(BadJsonValues, MessagesCutLongValuesToAnExcerpt) {
  // a 100,000-element list where an integer belongs: named, but not printed whole
  std::string list = "[";
  for (int i = 0; i < 100000; ++i) list += (i ? ",1" : "1");
  list += "]";
  const std::string cfg = "{\"model_type\": \"llama\", \"hidden_size\": " + list + "}";
  std::string msg = test::error_of([&] { parse_hf_config(cfg, "c/config.json"); });
  test::expect_contains(msg, {"c/config.json", "'hidden_size'", "must be an integer", "[1,1,1"});
  EXPECT_LT(msg.size(), 300u) << msg.substr(0, 400);
  std::string base;
  const std::string adapter = "{\"peft_type\": \"LORA\", \"r\": " + list + "}";
  msg = test::error_of([&] { parse_peft_adapter_config(adapter, "a/adapter_config.json", &base); });
  test::expect_contains(msg, {"a/adapter_config.json", "'r'", "an integer"});
  EXPECT_LT(msg.size(), 300u) << msg.substr(0, 400);
  // a 1 MB architecture name
  const std::string arch = "{\"model_type\": \"" + std::string(1 << 20, 'q') + "\"}";
  msg = test::error_of([&] { parse_hf_config(arch, "c/config.json"); });
  test::expect_contains(msg, {"c/config.json", "unknown architecture"});
  EXPECT_LT(msg.size(), 300u);
}

TEST(TensorDtype, IntegerWeightNamesFileTensorAndSupportedDtypes) {
  TempDir d;
  const std::string header = R"({"a.weight": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
                                 "b.weight": {"dtype": "I32", "shape": [2], "data_offsets": [8, 16]},
                                 "b.weight.codes": {"dtype": "U8", "shape": [8], "data_offsets": [16, 24]}})";
  write_bytes(d / "m.safetensors", safetensors_bytes(header, std::string(24, '\0')));
  TensorSet ts;
  load_safetensors(d / "m.safetensors", ts);  // any dtype loads; only model weights must be floats
  EXPECT_LT_ERROR(ts.check_weight_dtypes(),
                  {d / "m.safetensors", "tensor 'b.weight'", "dtype I32", "F32, F16 or BF16"});
  // the same file as a model: load_model_files checks its weights
  write_bytes(d / "config.json", R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 16})");
  EXPECT_LT_ERROR(load_model_files(d / "m.safetensors"), {d / "m.safetensors", "'b.weight'", "I32"});
  // quantized parts and non-weight tensors keep their dtypes
  TensorSet ok;
  const std::string h2 = R"({"w.weight.codes": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                             "step": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]}})";
  write_bytes(d / "ok.safetensors", safetensors_bytes(h2, std::string(16, '\0')));
  load_safetensors(d / "ok.safetensors", ok);
  ok.check_weight_dtypes();  // no throw
}

}  // namespace
}  // namespace lt
