// GGUF reader: a file the writer produced reads back (every value type, nested arrays, tensors), and
// so do bytes laid out by hand as ggml lays them out (every tensor type: f32, f16, bf16, q8_0, q4_0);
// each kind of bad input is an lt::Error naming the file and what is wrong: truncated at every
// byte, wrong magic, versions 1 and 4, big-endian, n_dims 5, overflowing shapes, data past the end,
// misaligned or overlapping data, unknown and unsupported tensor types, duplicate tensors and
// keys, lengths larger than the file, arrays nested too deep, a bad general.alignment; typed
// getters refusing the wrong type. Then the llama model loader at every type: config, names, q/k
// rows un-permuted, exactly the values the file holds, and its refusals (architecture, MoE,
// missing key, unknown tensor, llama.block_count beyond the blocks held, a block tensor missing).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/gguf_model.h"
#include "io/gguf_names.h"
#include "io/gguf_reader.h"
#include "io/gguf_writer.h"
#include "io/model_files.h"
#include "model/gguf_export.h"
#include "tokenizer/gguf_vocab.h"
#include "io_test_util.h"

namespace lt::gguf {
namespace {

// GGUF bytes written field by field, so that each test can break exactly one thing.
struct Bytes {
  std::string b;
  template <class T>
  Bytes& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b += s;
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return put<uint32_t>(kMagic).put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  Bytes& kv_u32(const std::string& k, uint32_t v) { return str(k).put<uint32_t>(4).put<uint32_t>(v); }
  // name, dims (innermost first), ggml type, data offset
  Bytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(uint32_t(ne.size()));
    for (uint64_t d : ne) put<uint64_t>(d);
    return put<uint32_t>(type).put<uint64_t>(offset);
  }
  Bytes& align(size_t a = 32) {
    b.resize((b.size() + a - 1) / a * a, '\0');
    return *this;
  }
  Bytes& data(size_t n) {
    for (size_t i = 0; i < n; ++i) b += char(i * 7 + 1);
    return *this;
  }
};

std::string write(const test::TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string p = dir / name;
  test::write_bytes(p, bytes);
  return p;
}

// One f32 [2, 4] tensor "w" (32 bytes) and one u32 key.
Bytes valid() { return Bytes().header(1, 1).kv_u32("k", 7).tensor("w", {4, 2}, 0, 0).align().data(32); }

TEST(GgufReader, ReadsWhatTheWriterWrote) {
  test::TempDir dir;
  Writer w;
  w.add_u32("a.u32", 42);
  w.add_i32("a.i32", -5);
  w.add_f32("a.f32", 1.5f);
  w.add_bool("a.bool", true);
  w.add_string("a.str", "héllo");
  w.add_strings("a.strs", {"x", "", "yz"});
  w.add_f32s("a.f32s", {0.5f, -2.0f});
  w.add_i32s("a.i32s", {3, -4, 5});
  std::vector<float> x(64 * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 17) * 0.25f - 2.0f;
  w.add_tensor("t.f32", {2, 64}, x.data(), TensorType::F32);
  w.add_tensor("t.bf16", {128}, x.data(), TensorType::BF16);
  w.add_tensor("t.q8", {2, 64}, x.data(), TensorType::Q8_0);
  w.write(dir / "a.gguf");
  const Reader r(dir / "a.gguf");
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.keys().size(), 8u);
  EXPECT_EQ(r.get_int("a.u32"), 42);
  EXPECT_EQ(r.get_int("a.i32"), -5);
  EXPECT_EQ(r.get_float("a.f32"), 1.5);
  EXPECT_EQ(r.get_bool("a.bool"), true);
  EXPECT_EQ(r.get_string("a.str"), "héllo");
  EXPECT_EQ(*r.get_strings("a.strs"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(*r.get_floats("a.f32s"), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(*r.get_ints("a.i32s"), (std::vector<int64_t>{3, -4, 5}));
  EXPECT_FALSE(r.get_int("absent").has_value());
  ASSERT_EQ(r.tensors().size(), 3u);
  const TensorEntry* f = r.find_tensor("t.f32");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(f->nbytes, 2u * 64 * 4);
  EXPECT_EQ(std::memcmp(f->data, x.data(), f->nbytes), 0);
  EXPECT_EQ(f->offset % 32, 0u);
  const TensorEntry* q = r.find_tensor("t.q8");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->type, TensorType::Q8_0);
  EXPECT_EQ(q->nbytes, 4 * kQ8Bytes);
  std::vector<float> y(128);
  dequantize_q8_0(q->data, 128, y.data());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], x[i], 2.0f / 127) << i;
  EXPECT_EQ(r.find_tensor("t.bf16")->shape, (std::vector<int64_t>{128}));
}

// Each tensor type from bytes laid out by hand as ggml lays them out (not by our writer), one
// [2, 32] tensor per type: shape (ne reversed), type, size, offset, and the values they decode to.
TEST(GgufReader, EveryTensorTypeFromBytes) {
  test::TempDir dir;
  Bytes b;
  b.header(5, 0);
  // sizes: f32 256, f16 128, bf16 128, q8_0 2 blocks * 34 = 68, q4_0 2 * 18 = 36; offsets aligned to 32
  b.tensor("f32", {32, 2}, 0, 0).tensor("f16", {32, 2}, 1, 256).tensor("bf16", {32, 2}, 30, 384);
  b.tensor("q8", {32, 2}, 8, 512).tensor("q4", {32, 2}, 2, 608).align();
  const size_t base = b.b.size();
  std::vector<float> want(64);
  for (int i = 0; i < 64; ++i) want[i] = float(i - 20) * 0.5f;  // -10 .. 21.5: exact in f16, bf16
  for (float v : want) b.put<float>(v);
  b.align();
  for (float v : want) b.put<uint16_t>(f32_to_f16(v));
  b.align();
  for (float v : want) b.put<uint16_t>(f32_to_bf16(v));
  b.align();
  // q8_0: 2 blocks of (f16 scale 0.5, 32 int8 q) decode to 0.5 * q
  std::vector<float> want_q8(64), want_q4(64);
  for (int blk = 0; blk < 2; ++blk) {
    b.put<uint16_t>(0x3800);  // 0.5
    for (int j = 0; j < 32; ++j) {
      const int8_t q = int8_t(blk * 40 - 70 + j * 3);
      b.put<int8_t>(q);
      want_q8[blk * 32 + j] = 0.5f * q;
    }
  }
  b.align();
  // q4_0: 2 blocks of (f16 scale 2, 16 bytes): byte j holds element j (low nibble) and j + 16
  // (high nibble), each decoding to 2 * (nibble - 8)
  for (int blk = 0; blk < 2; ++blk) {
    b.put<uint16_t>(0x4000);  // 2.0
    for (int j = 0; j < 16; ++j) {
      const int lo = (j + blk) % 16, hi = (15 - j + 3 * blk) % 16;
      b.put<uint8_t>(uint8_t(lo | hi << 4));
      want_q4[blk * 32 + j] = 2.0f * (lo - 8), want_q4[blk * 32 + j + 16] = 2.0f * (hi - 8);
    }
  }
  const Reader r(write(dir, "t.gguf", b.b));
  ASSERT_EQ(r.tensors().size(), 5u);
  EXPECT_EQ(r.data_offset(), base);
  struct Want { const char* name; TensorType type; uint64_t offset, nbytes; };
  for (const Want& w : {Want{"f32", TensorType::F32, 0, 256}, Want{"f16", TensorType::F16, 256, 128},
                        Want{"bf16", TensorType::BF16, 384, 128}, Want{"q8", TensorType::Q8_0, 512, 68},
                        Want{"q4", TensorType::Q4_0, 608, 36}}) {
    const TensorEntry* t = r.find_tensor(w.name);
    ASSERT_TRUE(t) << w.name;
    EXPECT_EQ(t->type, w.type) << w.name;
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 32})) << w.name;
    EXPECT_EQ(t->numel(), 64) << w.name;
    EXPECT_EQ(t->offset, base + w.offset) << w.name;
    EXPECT_EQ(t->nbytes, w.nbytes) << w.name;
    EXPECT_EQ(t->data, r.file()->data() + t->offset) << w.name;
  }
  std::vector<float> got(64);
  convert_to_f32(got.data(), r.find_tensor("f32")->data, DType::F32, 64);
  EXPECT_EQ(got, want);
  convert_to_f32(got.data(), r.find_tensor("f16")->data, DType::F16, 64);
  EXPECT_EQ(got, want);
  convert_to_f32(got.data(), r.find_tensor("bf16")->data, DType::BF16, 64);
  EXPECT_EQ(got, want);
  dequantize_q8_0(r.find_tensor("q8")->data, 64, got.data());
  EXPECT_EQ(got, want_q8);
  dequantize_q4_0(r.find_tensor("q4")->data, 64, got.data());
  EXPECT_EQ(got, want_q4);
}

TEST(GgufReader, EveryValueTypeAndNestedArrays) {
  test::TempDir dir;
  Bytes b;
  b.header(0, 14);
  b.str("u8").put<uint32_t>(0).put<uint8_t>(200);
  b.str("i8").put<uint32_t>(1).put<int8_t>(-100);
  b.str("u16").put<uint32_t>(2).put<uint16_t>(60000);
  b.str("i16").put<uint32_t>(3).put<int16_t>(-30000);
  b.str("u32").put<uint32_t>(4).put<uint32_t>(4000000000u);
  b.str("i32").put<uint32_t>(5).put<int32_t>(-2000000000);
  b.str("f32").put<uint32_t>(6).put<float>(0.25f);
  b.str("bool").put<uint32_t>(7).put<uint8_t>(0);
  b.str("string").put<uint32_t>(8).str("s");
  b.str("u64").put<uint32_t>(10).put<uint64_t>(1ull << 40);
  b.str("i64").put<uint32_t>(11).put<int64_t>(-(1ll << 40));
  b.str("f64").put<uint32_t>(12).put<double>(-0.125);
  // [[1, 2], []] as arrays of u16
  b.str("nested").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(2);
  b.put<uint32_t>(2).put<uint64_t>(2).put<uint16_t>(1).put<uint16_t>(2);
  b.put<uint32_t>(2).put<uint64_t>(0);
  b.str("u64s").put<uint32_t>(9).put<uint32_t>(10).put<uint64_t>(1).put<uint64_t>(~0ull);
  const Reader r(write(dir, "v.gguf", b.b));
  EXPECT_EQ(r.get_int("u8"), 200);
  EXPECT_EQ(r.get_int("i8"), -100);
  EXPECT_EQ(r.get_int("u16"), 60000);
  EXPECT_EQ(r.get_int("i16"), -30000);
  EXPECT_EQ(r.get_int("u32"), 4000000000ll);
  EXPECT_EQ(r.get_int("i32"), -2000000000);
  EXPECT_EQ(r.get_float("f32"), 0.25);
  EXPECT_EQ(r.get_bool("bool"), false);
  EXPECT_EQ(r.get_string("string"), "s");
  EXPECT_EQ(r.get_int("u64"), 1ll << 40);
  EXPECT_EQ(r.get_int("i64"), -(1ll << 40));
  EXPECT_EQ(r.get_float("f64"), -0.125);
  const Value* n = r.find("nested");
  ASSERT_TRUE(n);
  ASSERT_EQ(n->arrays.size(), 2u);
  EXPECT_EQ(n->arrays[0].count, 2u);
  EXPECT_EQ(n->arrays[1].count, 0u);
  // typed getters name the key, the expected and the found type
  EXPECT_LT_ERROR(r.get_string("u8"), {"v.gguf", "'u8'", "expected a string", "found a u8"});
  EXPECT_LT_ERROR(r.get_int("f32"), {"'f32'", "expected an integer", "found a f32"});
  EXPECT_LT_ERROR(r.get_strings("nested"), {"'nested'", "expected an array of string", "found an array of array"});
  EXPECT_LT_ERROR(r.get_ints("u64s"), {"'u64s'", "out of range"});
}

TEST(GgufReader, TruncatedAtEveryByte) {
  test::TempDir dir;
  const std::string full = valid().b;
  EXPECT_NO_THROW(Reader(write(dir, "full.gguf", full)));
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string p = write(dir, "cut.gguf", full.substr(0, n));
    const std::string msg = test::error_of([&] { Reader r(p); });
    EXPECT_NE(msg.find("cut.gguf"), std::string::npos) << n << ": " << msg;
    const bool named = msg.find("truncated") != std::string::npos || msg.find("past the end") != std::string::npos ||
                       msg.find("too short") != std::string::npos || msg.find("cannot fit") != std::string::npos;
    EXPECT_TRUE(named) << n << ": " << msg;
  }
}

TEST(GgufReader, HeaderErrors) {
  test::TempDir dir;
  std::string b = valid().b;
  b.replace(0, 4, "GGML");
  EXPECT_LT_ERROR(Reader(write(dir, "m.gguf", b)), {"m.gguf", "not a GGUF file", "'GGML'", "expected 'GGUF'"});
  for (uint32_t v : {1u, 4u}) {
    Bytes x = valid();
    std::memcpy(x.b.data() + 4, &v, 4);
    EXPECT_LT_ERROR(Reader(write(dir, "v.gguf", x.b)), {"v.gguf", "version " + std::to_string(v), "expected 2 or 3"});
  }
  Bytes be = valid();
  const uint32_t v3be = 0x03000000u;
  std::memcpy(be.b.data() + 4, &v3be, 4);
  EXPECT_LT_ERROR(Reader(write(dir, "be.gguf", be.b)), {"big-endian"});
  EXPECT_LT_ERROR(Reader(write(dir, "n.gguf", Bytes().header(1ull << 60, 0).b)), {"n.gguf", "tensor infos cannot fit"});
  EXPECT_LT_ERROR(Reader(write(dir, "k.gguf", Bytes().header(0, 1ull << 60).b)), {"k.gguf", "key/values cannot fit"});
  // version 2 reads like version 3
  Bytes v2 = valid();
  const uint32_t two = 2;
  std::memcpy(v2.b.data() + 4, &two, 4);
  EXPECT_EQ(Reader(write(dir, "v2.gguf", v2.b)).version(), 2u);
}

TEST(GgufReader, MetadataErrors) {
  test::TempDir dir;
  auto read = [&](const Bytes& b) { Reader r(write(dir, "md.gguf", b.b)); };
  EXPECT_LT_ERROR(read(Bytes().header(0, 2).kv_u32("k", 1).kv_u32("k", 2)), {"md.gguf", "'k' appears twice"});
  EXPECT_LT_ERROR(read(Bytes().header(0, 1).str("k").put<uint32_t>(13).put<uint32_t>(0)),
                  {"'k'", "unknown value type 13"});
  EXPECT_LT_ERROR(read(Bytes().header(0, 1).str("k").put<uint32_t>(8).put<uint64_t>(1ull << 62)),
                  {"truncated", "'k'", "string value needs 4611686018427387904 bytes"});
  EXPECT_LT_ERROR(read(Bytes().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(6).put<uint64_t>(1ull << 61)),
                  {"truncated", "'k'", "array of 2305843009213693952 f32 elements"});
  EXPECT_LT_ERROR(read(Bytes().header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2)), {"'k'", "0 or 1", "found 2"});
  Bytes deep;
  deep.header(0, 1).str("deep").put<uint32_t>(9);
  for (int i = 0; i < kMaxArrayDepth + 2; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
  deep.put<uint32_t>(4).put<uint64_t>(0);
  EXPECT_LT_ERROR(read(deep), {"'deep'", "nested more than"});
  EXPECT_LT_ERROR(read(Bytes().header(0, 1).str("general.alignment").put<uint32_t>(4).put<uint32_t>(24)),
                  {"general.alignment is 24", "power of two"});
  EXPECT_LT_ERROR(read(Bytes().header(0, 1).str("general.alignment").put<uint32_t>(10).put<uint64_t>(32)),
                  {"general.alignment", "expected a u32", "found u64"});
}

TEST(GgufReader, TensorInfoErrors) {
  test::TempDir dir;
  auto read = [&](const Bytes& b) { Reader r(write(dir, "t.gguf", b.b)); };
  EXPECT_LT_ERROR(read(Bytes().header(1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0).align().data(4)),
                  {"t.gguf", "tensor 0 ('w')", "5 dimensions", "at most 4"});
  EXPECT_LT_ERROR(read(Bytes().header(1, 0).tensor("w", {1ull << 32, 1ull << 32}, 0, 0).align()),
                  {"'w'", "overflow", "2^63"});
  EXPECT_LT_ERROR(read(Bytes().header(1, 0).tensor("w", {~0ull}, 0, 0).align()), {"'w'", "overflow"});
  // 2^61 f32 elements: the count fits, the bytes (2^63) do not fit in the file
  EXPECT_LT_ERROR(read(Bytes().header(1, 0).tensor("w", {1ull << 61}, 0, 0).align()),
                  {"'w'", "past the end of the file"});
  EXPECT_LT_ERROR(read(Bytes().header(1, 0).tensor("w", {4}, 0, 64).align().data(32)),
                  {"t.gguf", "'w'", "16 bytes at data offset 64", "past the end of the file"});
  EXPECT_LT_ERROR(read(Bytes().header(1, 0).tensor("w", {4}, 0, 8).align().data(32)),
                  {"'w'", "data offset 8", "not a multiple of the alignment 32"});
  EXPECT_LT_ERROR(read(Bytes().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).align().data(64)),
                  {"'a'", "'b'", "overlap"});
  EXPECT_LT_ERROR(read(Bytes().header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).align().data(64)),
                  {"tensor 'w' appears twice"});
  EXPECT_LT_ERROR(read(Bytes().header(1, 0).tensor("w", {256}, 12, 0).align().data(144)),
                  {"'w'", "ggml type 12 (q4_K)", "not supported", "f32, f16, bf16, q8_0, q4_0"});
  EXPECT_LT_ERROR(read(Bytes().header(1, 0).tensor("w", {4}, 99, 0).align().data(32)),
                  {"'w'", "ggml type 99 (not a ggml type)", "f32, f16, bf16, q8_0, q4_0"});
  EXPECT_LT_ERROR(read(Bytes().header(1, 0).tensor("w", {40}, 8, 0).align().data(64)),
                  {"'w'", "q8_0 row holds blocks of 32", "is 40"});
  // a custom alignment places the data section and the offsets
  Bytes a;
  a.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {4}, 0, 0).align(64).data(16);
  const Reader r(write(dir, "a.gguf", a.b));
  EXPECT_EQ(r.alignment(), 64u);
  EXPECT_EQ(r.data_offset() % 64, 0u);
  EXPECT_EQ(r.find_tensor("w")->offset, r.data_offset());
}

// ---- the llama model loader ---------------------------------------------------------------------

ModelConfig tiny_config() {
  ModelConfig c;
  c.dim = 32, c.n_layers = 1, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8, c.hidden_dim = 64;
  c.vocab_size = 40, c.max_seq_len = 64, c.tie_embeddings = false;
  return c;
}

// The tiny model's tensors: values distinct per tensor and element, none exact in f16 or bf16.
std::map<std::string, std::vector<float>> tiny_weights(const ModelConfig& c) {
  std::map<std::string, std::vector<float>> w;
  auto add = [&](const std::string& n, int64_t numel) {
    std::vector<float>& v = w[n];
    for (int64_t i = 0; i < numel; ++i) v.push_back(float((i * 31 + int64_t(n.size()) * 7) % 23 - 11) * 0.0632f);
  };
  add("model.embed_tokens.weight", int64_t(c.vocab_size) * c.dim);
  add("lm_head.weight", int64_t(c.vocab_size) * c.dim);
  add("model.norm.weight", c.dim);
  add("model.layers.0.input_layernorm.weight", c.dim);
  add("model.layers.0.post_attention_layernorm.weight", c.dim);
  for (Proj p : kProjs) {
    auto [in, out] = c.linear_shape(p);
    add(proj_hf_name(0, p, "weight"), in * out);
  }
  return w;
}

Vocab tiny_vocab(int n) {
  Vocab v;
  v.model = "gpt2";
  for (int i = 0; i < n; ++i) v.tokens.push_back(std::string(1, char('a' + i % 26)) + std::to_string(i));
  v.types.assign(size_t(n), kTokNormal);
  return v;
}

std::string write_tiny(const test::TempDir& dir, const std::string& name, TensorType type) {
  const ModelConfig c = tiny_config();
  auto w = tiny_weights(c);
  write_model_gguf(dir / name, c, [&](const std::string& n) { return w.at(n).data(); }, tiny_vocab(c.vocab_size),
                   type, "tiny");
  return dir / name;
}

// The values `x` holds once written as `type`: norms (1-D) stay f32, matrices are rounded to f16 /
// bf16 or quantized in blocks of 32 along their rows (every row of the tiny model is 32 or 64 long).
std::vector<float> stored_as(const std::vector<float>& x, bool matrix, TensorType type) {
  std::vector<float> y = x;
  if (!matrix) return y;
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(type_bytes(TensorType::Q8_0, n));
  switch (type) {
    case TensorType::F32: break;
    case TensorType::F16: for (float& v : y) v = f16_to_f32(f32_to_f16(v)); break;
    case TensorType::BF16: for (float& v : y) v = bf16_to_f32(f32_to_bf16(v)); break;
    case TensorType::Q8_0: quantize_q8_0(x.data(), n, q.data()), dequantize_q8_0(q.data(), n, y.data()); break;
    case TensorType::Q4_0: quantize_q4_0(x.data(), n, q.data()), dequantize_q4_0(q.data(), n, y.data()); break;
  }
  return y;
}

TEST(GgufModel, LoadsConfigNamesAndUnpermutedRows) {
  test::TempDir dir;
  const ModelConfig c = tiny_config();
  const auto w = tiny_weights(c);
  for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0}) {
    SCOPED_TRACE(type_name(type));
    const std::string path = write_tiny(dir, "m.gguf", type);
    const ModelFiles m = load_model_files(path);
    EXPECT_EQ(m.config.dim, 32);
    EXPECT_EQ(m.config.n_kv_heads, 2);
    EXPECT_EQ(m.config.head_dim, 8);
    EXPECT_EQ(m.config.vocab_size, 40);
    EXPECT_FALSE(m.config.tie_embeddings);
    EXPECT_EQ(m.config.rope_layout, RopeLayout::Halves);
    EXPECT_EQ(m.tensors.all().size(), w.size());
    for (const auto& [name, ref] : w) {
      const TensorInfo* t = m.tensors.find(name);
      ASSERT_TRUE(t) << name;
      std::vector<float> got(ref.size());
      convert_to_f32(got.data(), t->data, t->dtype, got.size());
      // exactly the values the file holds, the q/k rows back in HF order (quantizing whole rows,
      // the permutation and the blocks commute)
      const bool matrix = name.find("norm") == std::string::npos;
      ASSERT_EQ(got, stored_as(ref, matrix, type)) << name;
      if (type != TensorType::F32 && matrix) {
        EXPECT_NE(got, ref) << name;  // the rounding happened
      }
    }
    EXPECT_EQ(load_model_config(path).n_layers, 1);
  }
}

TEST(GgufModel, Refusals) {
  test::TempDir dir;
  const std::string good = write_tiny(dir, "m.gguf", TensorType::F32);
  const std::string bytes = [&] {
    std::ifstream f(good, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  auto patched = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    const size_t at = b.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    b.replace(at, from.size(), to);
    return write(dir, "p.gguf", b);
  };
  EXPECT_LT_ERROR(load_model_files(patched("llama.block_count", "llama.block_cou_t")),
                  {"p.gguf", "'llama.block_count' is missing"});
  EXPECT_LT_ERROR(load_model_files(patched("blk.0.ffn_up.weight", "blk.0.ffn_xx.weight")),
                  {"p.gguf", "'blk.0.ffn_xx.weight'", "not one a llama model has"});
  // llama.block_count (a u32 after its key and value type) against the blocks the file holds
  auto with_blocks = [&](uint32_t n) {
    std::string b = bytes;
    const size_t at = b.find("llama.block_count") + std::strlen("llama.block_count") + 4;
    std::memcpy(b.data() + at, &n, 4);
    return write(dir, "b.gguf", b);
  };
  EXPECT_NO_THROW(load_model_files(with_blocks(1)));
  EXPECT_LT_ERROR(load_model_files(with_blocks(65536)), {"b.gguf", "llama.block_count is 65536", "holds 12 tensors",
                                                         "at least 589826"});
  EXPECT_LT_ERROR(load_model_config(with_blocks(2)), {"b.gguf", "llama.block_count is 2", "at least 20"});
  EXPECT_LT_ERROR(load_model_files(patched("blk.0.attn_norm.weight", "blk.1.attn_norm.weight")),
                  {"p.gguf", "GGUF tensor 'blk.0.attn_norm.weight' is missing", "blk.0 to blk.0"});
  Writer w;
  w.add_string("general.architecture", "qwen2");
  w.write(dir / "q.gguf");
  EXPECT_LT_ERROR(load_model_files(dir / "q.gguf"), {"q.gguf", "'qwen2' is not supported", "architecture: llama"});
  Writer moe;
  moe.add_string("general.architecture", "llama");
  moe.add_u32("llama.expert_count", 8);
  moe.write(dir / "moe.gguf");
  EXPECT_LT_ERROR(load_model_files(dir / "moe.gguf"), {"moe.gguf", "mixture-of-experts", "8 experts"});
  Writer ad;
  ad.add_string("general.architecture", "llama");
  ad.add_string("general.type", "adapter");
  ad.write(dir / "ad.gguf");
  EXPECT_LT_ERROR(load_model_files(dir / "ad.gguf"), {"ad.gguf", "LoRA adapter GGUF"});
}

TEST(GgufTokenizer, Refusals) {
  Vocab v = tiny_vocab(8);
  EXPECT_NO_THROW(make_gguf_tokenizer(v, "t.gguf"));
  v.pre = "falcon";
  EXPECT_LT_ERROR(make_gguf_tokenizer(v, "t.gguf"), {"t.gguf", "tokenizer.ggml.pre 'falcon'", "llama-bpe", "smollm"});
  v.pre = "", v.model = "bert";
  EXPECT_LT_ERROR(make_gguf_tokenizer(v, "t.gguf"), {"t.gguf", "tokenizer.ggml.model 'bert'", "llama", "gpt2"});
  v.model = "llama";
  EXPECT_LT_ERROR(make_gguf_tokenizer(v, "t.gguf"), {"t.gguf", "scores has 0 entries for 8 tokens"});
  v.scores.assign(8, 0.0f), v.bos = 8;
  EXPECT_LT_ERROR(make_gguf_tokenizer(v, "t.gguf"), {"t.gguf", "bos_token_id 8 is outside the vocabulary"});
  v.bos = 1, v.types.resize(3);
  EXPECT_LT_ERROR(make_gguf_tokenizer(v, "t.gguf"), {"t.gguf", "token_type has 3 entries for 8 tokens"});
  Vocab g = tiny_vocab(8);
  g.merges = {"nospace"};
  EXPECT_LT_ERROR(make_gguf_tokenizer(g, "t.gguf"), {"t.gguf", "merges[0] 'nospace'"});
}

TEST(GgufNames, OneTableBothWays) {
  EXPECT_EQ(gguf_name("model.layers.12.self_attn.k_proj.bias"), "blk.12.attn_k.bias");
  EXPECT_EQ(hf_name("blk.3.ffn_down.weight"), "model.layers.3.mlp.down_proj.weight");
  EXPECT_EQ(hf_name("blk.0.attn_norm.weight"), "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(hf_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(gguf_name("model.embed_tokens.weight"), "token_embd.weight");
  for (const char* bad : {"blk.x.attn_q.weight", "blk.01.attn_q.weight", "blk.1.attn_rot_embd", "rope_freqs.weight",
                          "blk..attn_q.weight"})
    EXPECT_EQ(hf_name(bad), "") << bad;
  for (Proj p : kProjs)
    for (const char* what : {"weight", "bias"}) EXPECT_EQ(hf_name(gguf_name(proj_hf_name(7, p, what))), proj_hf_name(7, p, what));
}

}  // namespace
}  // namespace lt::gguf
