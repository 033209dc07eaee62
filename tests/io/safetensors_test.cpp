// safetensors: writer/reader round trip, the on-disk bytes against the format spec, and one test
// per malformed input, each asserting that the error names the file and the tensor.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "io_test_util.h"

namespace lt {
namespace {

using test::TempDir;
using test::write_bytes;

// A safetensors file from a header text and a data buffer (header padded to 8 bytes if `pad`).
std::string st_bytes(std::string header, const std::string& buffer, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char(uint64_t(header.size()) >> (8 * i));
  return out + header + buffer;
}

TensorInfo make(const std::string& name, DType dt, std::vector<int64_t> shape, const void* data) {
  TensorInfo t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data = data;
  t.nbytes = size_t(t.numel()) * dtype_size(dt);
  return t;
}

TEST(Safetensors, RoundTripAllDtypes) {
  TempDir dir;
  std::string p = dir / "rt.safetensors";
  float f32[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
  uint16_t bf16[4] = {0x3f80, 0xc000, 0x7fc0, 0};
  uint16_t f16[1] = {0x3c00};
  int32_t i32[4] = {1, -2, 3, INT32_MIN};
  int64_t i64[1] = {INT64_MAX};
  uint8_t u8[3] = {0, 128, 255};
  std::vector<TensorInfo> ts = {
      make("u8", DType::U8, {3}, u8),          make("a.f32", DType::F32, {2, 3}, f32),
      make("bf16", DType::BF16, {4}, bf16),    make("scalar.f16", DType::F16, {}, f16),
      make("i32", DType::I32, {2, 2}, i32),    make("i64", DType::I64, {1}, i64),
      make("empty.i8", DType::I8, {0, 5}, nullptr)};
  save_safetensors(p, ts, {{"format", "pt"}, {"note", "hello"}});

  TensorSet set;
  SafetensorsMetadata meta = load_safetensors(p, set);
  EXPECT_EQ(meta.size(), 2u);
  EXPECT_EQ(meta["format"], "pt");
  EXPECT_EQ(meta["note"], "hello");
  ASSERT_EQ(set.all().size(), ts.size());
  for (const auto& want : ts) {
    const TensorInfo* got = set.find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->dtype, want.dtype) << want.name;
    EXPECT_EQ(got->shape, want.shape) << want.name;
    EXPECT_EQ(got->nbytes, want.nbytes) << want.name;
    EXPECT_EQ(got->file, p);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got->data) % dtype_size(got->dtype), 0u) << want.name;
    if (want.nbytes) {
      EXPECT_EQ(std::memcmp(got->data, want.data, want.nbytes), 0) << want.name;
    }
  }
  EXPECT_EQ(static_cast<const float*>(set.get("a.f32", {2, 3}).data)[2], 3.5f);
  // Only the final file remains: the temporary file was renamed over it.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path)) {
    files += 1;
    EXPECT_EQ(e.path().string(), p);
  }
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, WrittenBytesFollowTheSpec) {
  TempDir dir;
  std::string p = dir / "spec.safetensors";
  float w[2] = {1.0f, 2.0f};
  uint8_t b[1] = {7};
  save_safetensors(p, {make("b", DType::U8, {1}, b), make("w", DType::F32, {2}, w)});
  std::string bytes = read_text_file(p);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 9);  // contiguous buffer, no holes
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find("{\"b\":{\"data_offsets\":[8,9],\"dtype\":\"U8\",\"shape\":[1]},"
                        "\"w\":{\"data_offsets\":[0,8],\"dtype\":\"F32\",\"shape\":[2]}}"),
            0u)
      << header;
  float back[2];
  std::memcpy(back, bytes.data() + 8 + n, 8);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 2.0f);
  EXPECT_EQ(bytes.back(), 7);
}

TEST(Safetensors, OverwriteAndTensorSetOverload) {
  TempDir dir;
  std::string p = dir / "o.safetensors";
  float a[1] = {1}, b[1] = {2};
  save_safetensors(p, {make("x", DType::F32, {1}, a)});
  TensorSet first;
  load_safetensors(p, first);
  save_safetensors(p, first, {{"k", "v"}});  // rewrite from a set mapped from the same path
  save_safetensors(p, {make("x", DType::F32, {1}, b)});
  TensorSet set;
  load_safetensors(p, set);
  EXPECT_EQ(*static_cast<const float*>(set.get("x", {1}).data), 2.0f);
  EXPECT_EQ(*static_cast<const float*>(first.get("x", {1}).data), 1.0f);  // old mapping still valid
}

TEST(Safetensors, HandWrittenFileLoads) {
  TempDir dir;
  std::string p = dir / "hand.safetensors";
  float w[2] = {0.5f, -1.5f};
  std::string buf(reinterpret_cast<const char*>(w), 8);
  buf += std::string(8, '\0');  // a hole after the tensor is allowed
  write_bytes(p, st_bytes(R"({"__metadata__":{"a":"b"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("z":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})",
                          buf));
  TensorSet set;
  auto meta = load_safetensors(p, set);
  EXPECT_EQ(meta.at("a"), "b");
  EXPECT_EQ(static_cast<const float*>(set.get("w", {2}).data)[1], -1.5f);
  EXPECT_EQ(set.get("z", {}).nbytes, 8u);
}

TEST(Safetensors, MissingFile) {
  TensorSet set;
  EXPECT_LT_ERROR(load_safetensors("/nonexistent/dir/none.safetensors", set), {"none.safetensors"});
}

TEST(Safetensors, ShorterThanHeaderLength) {
  TempDir dir;
  std::string p = dir / "short.safetensors";
  write_bytes(p, "abc");
  TensorSet set;
  EXPECT_LT_ERROR(load_safetensors(p, set), {"short.safetensors", "8-byte"});
  write_bytes(p, "");
  EXPECT_LT_ERROR(load_safetensors(p, set), {"short.safetensors", "8-byte"});
}

TEST(Safetensors, HeaderLengthPastEnd) {
  TempDir dir;
  std::string p = dir / "hl.safetensors";
  std::string bytes = st_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  bytes[0] = char(0xff);  // header length now 255 + ... > file size
  write_bytes(p, bytes);
  TensorSet set;
  EXPECT_LT_ERROR(load_safetensors(p, set), {"hl.safetensors", "header length"});
  std::string huge(8, char(0xff));  // 2^64 - 1: must not overflow
  write_bytes(p, huge + "{}");
  EXPECT_LT_ERROR(load_safetensors(p, set), {"hl.safetensors", "header length"});
}

// Writes st_bytes(header, buffer) to `name` and returns the load error.
std::string load_error(const TempDir& dir, const std::string& name, const std::string& header,
                       const std::string& buffer, bool pad = true) {
  std::string p = dir / name;
  write_bytes(p, st_bytes(header, buffer, pad));
  TensorSet set;
  return test::error_of([&] { load_safetensors(p, set); });
}

TEST(Safetensors, MalformedJson) {
  TempDir dir;
  test::expect_contains(load_error(dir, "mj.safetensors", R"({"w":{"dtype":"F32",)", ""),
                        {"mj.safetensors", "malformed JSON"});
  test::expect_contains(load_error(dir, "arr.safetensors", "[1,2]", ""), {"arr.safetensors", "object"});
  test::expect_contains(load_error(dir, "ent.safetensors", R"({"w":5})", ""), {"ent.safetensors", "'w'", "object"});
  test::expect_contains(load_error(dir, "nodt.safetensors", R"({"w":{"shape":[1],"data_offsets":[0,4]}})",
                                   std::string(4, '\0')),
                        {"nodt.safetensors", "'w'", "dtype"});
  test::expect_contains(load_error(dir, "noof.safetensors", R"({"w":{"dtype":"F32","shape":[1]}})",
                                   std::string(4, '\0')),
                        {"noof.safetensors", "'w'", "data_offsets"});
  test::expect_contains(load_error(dir, "of3.safetensors",
                                   R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})",
                                   std::string(8, '\0')),
                        {"of3.safetensors", "'w'", "data_offsets"});
  test::expect_contains(load_error(dir, "noshape.safetensors", R"({"w":{"dtype":"F32","data_offsets":[0,4]}})",
                                   std::string(4, '\0')),
                        {"noshape.safetensors", "'w'", "shape"});
  test::expect_contains(load_error(dir, "meta.safetensors", R"({"__metadata__":{"k":1}})", ""),
                        {"meta.safetensors", "__metadata__", "'k'"});
}

TEST(Safetensors, UnsupportedDtype) {
  TempDir dir;
  for (const char* dt : {"F64", "F8_E4M3", "BOOL", "f32"}) {
    std::string h = std::string(R"({"wt":{"dtype":")") + dt + R"(","shape":[1],"data_offsets":[0,8]}})";
    test::expect_contains(load_error(dir, "dt.safetensors", h, std::string(8, '\0')),
                          {"dt.safetensors", "'wt'", std::string("'") + dt + "'", "supported: F32"});
  }
}

TEST(Safetensors, OffsetsPastBufferEnd) {
  TempDir dir;
  test::expect_contains(load_error(dir, "pe.safetensors", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                   std::string(8, '\0')),
                        {"pe.safetensors", "'w'", "past the end"});
  test::expect_contains(
      load_error(dir, "pe2.safetensors",
                 R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551615]}})",
                 ""),
      {"pe2.safetensors", "'w'", "past the end"});
}

TEST(Safetensors, EndBeforeBegin) {
  TempDir dir;
  test::expect_contains(load_error(dir, "eb.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
                                   std::string(8, '\0')),
                        {"eb.safetensors", "'w'", "before begin"});
}

TEST(Safetensors, ByteSizeMismatch) {
  TempDir dir;
  test::expect_contains(load_error(dir, "bs.safetensors", R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})",
                                   std::string(32, '\0')),
                        {"bs.safetensors", "'w'", "16 bytes", "needs 24"});
  test::expect_contains(
      load_error(dir, "ov.safetensors",
                 R"({"w":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,16]}})",
                 std::string(16, '\0')),
      {"ov.safetensors", "'w'", "too large"});
}

TEST(Safetensors, OverlappingTensors) {
  TempDir dir;
  test::expect_contains(load_error(dir, "ol.safetensors",
                                   R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                   R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                                   std::string(24, '\0')),
                        {"ol.safetensors", "'a'", "'b'", "overlap"});
  test::expect_contains(load_error(dir, "same.safetensors",
                                   R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                   R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                                   std::string(4, '\0')),
                        {"same.safetensors", "'a'", "'b'", "overlap"});
}

TEST(Safetensors, MisalignedData) {
  TempDir dir;
  test::expect_contains(load_error(dir, "al.safetensors",
                                   R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                   R"("w":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                                   std::string(8, '\0')),
                        {"al.safetensors", "'w'", "aligned"});
  // Offset 0 but the buffer itself starts at an odd file offset (unpadded header).
  std::string h = R"({"w":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})";
  if (h.size() % 2 == 0) h += " ";
  test::expect_contains(load_error(dir, "al2.safetensors", h, std::string(2, '\0'), /*pad=*/false),
                        {"al2.safetensors", "'w'", "aligned"});
}

TEST(Safetensors, BadShape) {
  TempDir dir;
  test::expect_contains(load_error(dir, "neg.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                                   std::string(4, '\0')),
                        {"neg.safetensors", "'w'", "negative"});
  test::expect_contains(load_error(dir, "frac.safetensors",
                                   R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
                                   std::string(4, '\0')),
                        {"frac.safetensors", "'w'", "integer"});
  test::expect_contains(load_error(dir, "str.safetensors", R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})",
                                   std::string(4, '\0')),
                        {"str.safetensors", "'w'", "integer"});
  test::expect_contains(load_error(dir, "negoff.safetensors",
                                   R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
                                   std::string(4, '\0')),
                        {"negoff.safetensors", "'w'", "negative"});
}

TEST(Safetensors, DuplicateNameAcrossFiles) {
  TempDir dir;
  float a[1] = {1};
  save_safetensors(dir / "1.safetensors", {make("x", DType::F32, {1}, a)});
  save_safetensors(dir / "2.safetensors", {make("x", DType::F32, {1}, a)});
  TensorSet set;
  load_safetensors(dir / "1.safetensors", set);
  EXPECT_LT_ERROR(load_safetensors(dir / "2.safetensors", set), {"2.safetensors", "'x'", "twice"});
}

TEST(Safetensors, ShapeMismatchReportedByGet) {
  TempDir dir;
  std::string p = dir / "shape.safetensors";
  float a[6] = {};
  save_safetensors(p, {make("model.norm.weight", DType::F32, {6}, a)});
  TensorSet set;
  set.source = dir.path;
  load_safetensors(p, set);
  EXPECT_LT_ERROR(set.get("model.norm.weight", {8}), {"shape.safetensors", "'model.norm.weight'", "[6]", "[8]"});
  EXPECT_LT_ERROR(set.get("lm_head.weight", {8, 6}), {"'lm_head.weight'", "missing"});
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  std::string p = dir / "bad.safetensors";
  float a[4] = {};
  TensorInfo t = make("w", DType::F32, {4}, a);
  t.nbytes = 12;
  EXPECT_LT_ERROR(save_safetensors(p, {t}), {"bad.safetensors", "'w'", "nbytes"});
  TensorInfo u = make("w", DType::F32, {4}, a);
  EXPECT_LT_ERROR(save_safetensors(p, {u, u}), {"bad.safetensors", "'w'", "twice"});
  EXPECT_LT_ERROR(save_safetensors(p, {make("__metadata__", DType::F32, {4}, a)}), {"bad.safetensors", "name"});
  EXPECT_LT_ERROR(save_safetensors(dir / "no/such/dir/x.safetensors", {u}), {"x.safetensors"});
  EXPECT_FALSE(std::filesystem::exists(p));
}

// Every truncation and many single-byte corruptions of a valid file either load or throw
// lt::Error; none may crash (this test matters most under ASan/UBSan).
TEST(Safetensors, CorruptionNeverCrashes) {
  TempDir dir;
  std::string good = dir / "good.safetensors";
  float w[6] = {1, 2, 3, 4, 5, 6};
  uint16_t h[3] = {1, 2, 3};
  save_safetensors(good, {make("w", DType::F32, {2, 3}, w), make("h", DType::BF16, {3}, h)}, {{"m", "v"}});
  const std::string bytes = read_text_file(good);
  std::string p = dir / "c.safetensors";
  auto try_load = [&](const std::string& b) {
    write_bytes(p, b);
    TensorSet set;
    try {
      load_safetensors(p, set);
      for (const auto& [n, t] : set.all()) {
        const auto* d = static_cast<const uint8_t*>(t.data);
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < t.nbytes; ++i) sink = sink + d[i];  // touch every byte (ASan checks bounds)
      }
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("c.safetensors"), std::string::npos) << e.what();
    }
  };
  for (size_t n = 0; n < bytes.size(); ++n) try_load(bytes.substr(0, n));
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    std::string b = bytes;
    size_t pos = rng() % std::min<size_t>(b.size(), 8 + 200);
    b[pos] = char(rng());
    try_load(b);
  }
}

}  // namespace
}  // namespace lt
