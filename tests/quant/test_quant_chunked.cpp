// Quantizing on load, chunk by chunk (quantize_weight_chunked), gives the same bytes as quantizing
// the whole f32 matrix (quantize_weight) for every format, including matrices of several chunks
// with a short last block and an odd element count; copy_quant_tensor reproduces the view.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/error.h"
#include "quant/quant_tensor.h"

namespace lt {
namespace {

struct Aligned {
  std::unique_ptr<void, decltype(&std::free)> p;
  explicit Aligned(size_t n) : p(std::aligned_alloc(64, (n + 63) / 64 * 64), &std::free) { std::memset(p.get(), 0, (n + 63) / 64 * 64); }
  void* get() const { return p.get(); }
};

TEST(QuantChunked, SameBytesAsWholeMatrixQuantization) {
  const QuantSpec specs[] = {{QuantType::NF4, 64, true}, {QuantType::NF4, 4096, false}, {QuantType::FP4, 128, true},
                             {QuantType::Int8, 64, false}};
  const std::pair<int64_t, int64_t> shapes[] = {{301, 701}, {3, 5}, {1024, 64}};  // 211001 elements: 4 chunks, odd
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  for (const auto& spec : specs)
    for (auto [rows, cols] : shapes) {
      std::vector<float> w(size_t(rows * cols));
      for (auto& v : w) v = nd(rng);
      const size_t bytes = quant_storage_bytes(spec, rows, cols);
      Aligned a(bytes), b(bytes);
      const QuantTensor qa = quantize_weight(a.get(), bytes, w.data(), rows, cols, spec);
      std::vector<float> scratch(quantize_chunked_scratch_floats(spec, rows, cols));
      int calls = 0;
      const QuantTensor qb = quantize_weight_chunked(b.get(), bytes, rows, cols, spec, scratch.data(), scratch.size(),
                                                     [&](float* dst, int64_t first, int64_t count) {
                                                       ++calls;
                                                       std::memcpy(dst, w.data() + first, size_t(count) * 4);
                                                     });
      const std::string what = fmt::format("{} bs {} dq {} {}x{}", quant_type_name(spec.type), spec.blocksize,
                                           spec.double_quant, rows, cols);
      EXPECT_EQ(std::memcmp(a.get(), b.get(), bytes), 0) << what;
      EXPECT_EQ(qa.offset, qb.offset) << what;
      if (rows * cols > 65536) {
        EXPECT_GT(calls, 1) << what;
      }
      Aligned c(bytes);
      const QuantTensor qc = copy_quant_tensor(c.get(), bytes, qb);
      EXPECT_EQ(std::memcmp(c.get(), b.get(), bytes), 0) << what;
      std::vector<float> da(w.size()), dc(w.size());
      dequantize_weight(da.data(), qa);
      dequantize_weight(dc.data(), qc);
      EXPECT_EQ(da, dc) << what;
      EXPECT_THROW(quantize_weight_chunked(b.get(), bytes, rows, cols, spec, scratch.data(), scratch.size() - 1,
                                           [](float*, int64_t, int64_t) {}), Error) << what;
    }
}

}  // namespace
}  // namespace lt
