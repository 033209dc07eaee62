// CPU attention vs ref and vs a double-precision softmax, once per ISA: decode (T = 1) into a
// cache, prefill (T = 37), NH == NKV and GQA ratio 4, odd head sizes, several key blocks, and
// large scores that need the online-softmax rescaling; both one head per work item and GQA groups
// of 4, 6 and 8 heads per item (the kernel groups heads when there are enough tokens).
#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace lt::test {
namespace {

struct AttnCase {
  int T, pos0, NH, NKV, HS;
  float qscale;  // spread of q: large values make peaked softmaxes
};

class KernelCpuAttention : public KernelIsaTest {};

TEST_P(KernelCpuAttention, MatchesRefAndDouble) {
  AttnCase cases[] = {
      {1, 0, 4, 4, 12, 1},     {1, 100, 8, 2, 64, 1},   {37, 0, 8, 2, 12, 1}, {37, 29, 6, 6, 67, 1},
      {5, 130, 4, 1, 16, 1},   {70, 0, 2, 2, 32, 1},    {3, 200, 8, 2, 64, 8}, {37, 64, 4, 1, 7, 20},
      {1, 127, 4, 4, 128, 1},  {2, 63, 1, 1, 1, 5},    {16, 70, 16, 2, 20, 3}, {8, 5, 12, 1, 9, 2},
  };
  for (const auto& c : cases) {
    int P = c.pos0 + c.T + 3;  // the cache may be longer than pos0 + T; extra rows must be ignored
    auto q = random_vec((size_t)c.T * c.NH * c.HS, 1 + c.HS, -c.qscale, c.qscale),
         k = random_vec((size_t)P * c.NKV * c.HS, 2 + c.T), v = random_vec((size_t)P * c.NKV * c.HS, 3 + c.pos0);
    std::vector<float> out((size_t)c.T * c.NH * c.HS, NAN), lse((size_t)c.NH * c.T, NAN);
    std::vector<float> rout(out.size()), rlse(lse.size()), dout, dlse;
    cpu().attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.T, c.pos0, c.NH, c.NKV, c.HS);
    ref().attention_forward(rout.data(), rlse.data(), q.data(), k.data(), v.data(), c.T, c.pos0, c.NH, c.NKV, c.HS);
    attention_double(dout, dlse, q, k, v, c.T, c.pos0, c.NH, c.NKV, c.HS);
    std::string tag = "attention T=" + std::to_string(c.T) + " pos0=" + std::to_string(c.pos0) +
                      " NH=" + std::to_string(c.NH) + " NKV=" + std::to_string(c.NKV) + " HS=" + std::to_string(c.HS);
    expect_close(out, rout, 1e-5, 1e-5, tag + " vs ref");
    expect_close(out, dout, 1e-5, 1e-5, tag + " vs double");
    expect_close(lse, rlse, 1e-5, 1e-5, tag + " lse vs ref");
    expect_close(lse, dlse, 1e-5, 1e-5, tag + " lse vs double");
    std::vector<float> out2(out.size(), NAN);  // lse is optional
    cpu().attention_forward(out2.data(), nullptr, q.data(), k.data(), v.data(), c.T, c.pos0, c.NH, c.NKV, c.HS);
    expect_close(out2, out, 0, 0, tag + " without lse");
  }
}

TEST_P(KernelCpuAttention, DecodeEqualsLastRowOfPrefill) {
  int T = 9, NH = 8, NKV = 2, HS = 20;
  auto q = random_vec((size_t)T * NH * HS, 11), k = random_vec((size_t)T * NKV * HS, 12),
       v = random_vec((size_t)T * NKV * HS, 13);
  std::vector<float> full((size_t)T * NH * HS), last((size_t)NH * HS);
  cpu().attention_forward(full.data(), nullptr, q.data(), k.data(), v.data(), T, 0, NH, NKV, HS);
  std::vector<float> qlast(q.end() - NH * HS, q.end());
  cpu().attention_forward(last.data(), nullptr, qlast.data(), k.data(), v.data(), 1, T - 1, NH, NKV, HS);
  std::vector<float> want(full.end() - NH * HS, full.end());
  expect_close(last, want, 0, 0, "decode vs prefill");
}

LT_INSTANTIATE_ISAS(KernelCpuAttention);

}  // namespace
}  // namespace lt::test
