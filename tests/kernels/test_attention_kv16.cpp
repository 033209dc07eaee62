// Attention over a bf16 KV cache (Ops::attention_forward_kv16), once per ISA (selected through
// LEANTUNE_ISA): it must be exactly attention_forward on the widened cache (widening bf16 is exact
// and the kernel keeps attention_forward's order of operations, so the bits are equal), and close
// to the reference's kv16 entry (the same tolerance as the f32 attention test: both are f32
// softmaxes of the same values); decode and prefill, GQA, odd head sizes, sliding windows over a
// plain and a rolling cache.
#include <gtest/gtest.h>

#include "core/dtype.h"
#include "kernel_test_util.h"

namespace lt::test {
namespace {

class KernelCpuAttentionKv16 : public KernelIsaTest {};

TEST_P(KernelCpuAttentionKv16, IsAttentionOnTheWidenedCache) {
  struct C { int T, pos0, NH, NKV, HS, window, ring; };
  const C cases[] = {{1, 0, 4, 4, 12, 0, 0}, {1, 100, 8, 2, 64, 0, 0}, {37, 29, 6, 6, 67, 0, 0}, {3, 200, 8, 2, 64, 0, 0},
                     {1, 127, 9, 3, 64, 0, 0}, {5, 40, 4, 2, 20, 16, 0}, {4, 50, 4, 2, 16, 8, 11}};
  for (const C& c : cases) {
    const int rows = c.ring > 0 ? c.ring : c.pos0 + c.T + 2;
    const size_t n = size_t(rows) * c.NKV * c.HS;
    auto q = random_vec(size_t(c.T) * c.NH * c.HS, 5 + c.HS, -2, 2), kf = random_vec(n, 6 + c.T), vf = random_vec(n, 7);
    std::vector<uint16_t> k16(n), v16(n);
    for (size_t i = 0; i < n; ++i) {
      k16[i] = f32_to_bf16(kf[i]), kf[i] = bf16_to_f32(k16[i]);
      v16[i] = f32_to_bf16(vf[i]), vf[i] = bf16_to_f32(v16[i]);
    }
    std::vector<float> out(size_t(c.T) * c.NH * c.HS, NAN), want(out.size(), NAN), rout(out.size(), NAN);
    cpu().attention_forward_kv16(out.data(), q.data(), k16.data(), v16.data(), c.T, c.pos0, c.NH, c.NKV, c.HS, c.window,
                                 c.ring);
    cpu().attention_forward(want.data(), nullptr, q.data(), kf.data(), vf.data(), c.T, c.pos0, c.NH, c.NKV, c.HS,
                            c.window, c.ring);
    ref().attention_forward_kv16(rout.data(), q.data(), k16.data(), v16.data(), c.T, c.pos0, c.NH, c.NKV, c.HS,
                                 c.window, c.ring);
    const std::string tag = "T=" + std::to_string(c.T) + " pos0=" + std::to_string(c.pos0) + " HS=" +
                            std::to_string(c.HS) + " window=" + std::to_string(c.window);
    expect_close(out, want, 0, 0, tag + " vs attention_forward on the widened cache");
    expect_close(out, rout, 1e-5, 1e-5, tag + " vs ref");
  }
}

LT_INSTANTIATE_ISAS(KernelCpuAttentionKv16);

}  // namespace
}  // namespace lt::test
