// Interoperability with the reference implementation: tests/io/data/python_written.safetensors
// was written by the Python `safetensors` package (0.8.0), so reading it checks our parser
// against bytes we did not produce. It was generated with:
//   from safetensors.numpy import save_file
//   save_file({"model.embed_tokens.weight": np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5,
//              "half": np.array([1.0, -2.0, 65504.0], dtype=np.float16),
//              "ids": np.array([[1, -2], [3, 2**40]], dtype=np.int64),
//              "i32": np.array([7, -7], dtype=np.int32), "bytes": np.array([0, 255, 3], dtype=np.uint8),
//              "signed": np.array([-128, 127], dtype=np.int8), "empty": np.zeros((0, 3), dtype=np.float32)},
//             path, metadata={"format": "np", "producer": "safetensors 0.8.0"})
#include <gtest/gtest.h>

#include <cstring>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace lt {
namespace {

const std::string kPythonFile = std::string(LT_SOURCE_DIR) + "/tests/io/data/python_written.safetensors";

template <class T>
std::vector<T> values(const TensorInfo& t) {
  std::vector<T> v(t.nbytes / sizeof(T));
  if (t.nbytes) std::memcpy(v.data(), t.data, t.nbytes);
  return v;
}

void expect_python_file(const TensorSet& s) {
  std::vector<float> emb = values<float>(s.get("model.embed_tokens.weight", {3, 4}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(emb[i], 0.5f * i);
  const TensorInfo& half = s.get("half", {3});
  EXPECT_EQ(half.dtype, DType::F16);
  std::vector<uint16_t> h = values<uint16_t>(half);
  EXPECT_EQ(f16_to_f32(h[0]), 1.0f);
  EXPECT_EQ(f16_to_f32(h[1]), -2.0f);
  EXPECT_EQ(f16_to_f32(h[2]), 65504.0f);
  EXPECT_EQ(values<int64_t>(s.get("ids", {2, 2})), (std::vector<int64_t>{1, -2, 3, int64_t(1) << 40}));
  EXPECT_EQ(values<int32_t>(s.get("i32", {2})), (std::vector<int32_t>{7, -7}));
  EXPECT_EQ(values<uint8_t>(s.get("bytes", {3})), (std::vector<uint8_t>{0, 255, 3}));
  EXPECT_EQ(values<int8_t>(s.get("signed", {2})), (std::vector<int8_t>{-128, 127}));
  EXPECT_EQ(s.get("empty", {0, 3}).nbytes, 0u);
  EXPECT_EQ(s.get("i32", {2}).dtype, DType::I32);
  EXPECT_EQ(s.get("signed", {2}).dtype, DType::I8);
}

TEST(SafetensorsInterop, ReadsFileWrittenByPythonSafetensors) {
  TensorSet s;
  SafetensorsMetadata meta = load_safetensors(kPythonFile, s);
  EXPECT_EQ(meta.at("format"), "np");
  EXPECT_EQ(meta.at("producer"), "safetensors 0.8.0");
  EXPECT_EQ(s.all().size(), 7u);
  expect_python_file(s);
}

TEST(SafetensorsInterop, RewriteKeepsEverything) {
  TensorSet s;
  SafetensorsMetadata meta = load_safetensors(kPythonFile, s);
  test::TempDir dir;
  save_safetensors(dir / "again.safetensors", s, meta);
  TensorSet back;
  EXPECT_EQ(load_safetensors(dir / "again.safetensors", back), meta);
  EXPECT_EQ(back.all().size(), 7u);
  expect_python_file(back);
}

}  // namespace
}  // namespace lt
