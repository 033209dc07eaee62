// CPU attention vs ref and vs a double-precision softmax, once per ISA: decode (T = 1) into a
// cache, prefill (T = 37), NH == NKV and GQA ratio 4, odd head sizes, several key blocks, and
// large scores that need the online-softmax rescaling; both one head per work item and GQA groups
// of 4, 6 and 8 heads per item (the kernel groups heads when there are enough tokens); sliding
// windows over a plain and a rolling cache.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
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
    cpu().attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.T, c.pos0, c.NH, c.NKV, c.HS, 0, 0);
    ref().attention_forward(rout.data(), rlse.data(), q.data(), k.data(), v.data(), c.T, c.pos0, c.NH, c.NKV, c.HS, 0, 0);
    attention_double(dout, dlse, q, k, v, c.T, c.pos0, c.NH, c.NKV, c.HS);
    std::string tag = "attention T=" + std::to_string(c.T) + " pos0=" + std::to_string(c.pos0) +
                      " NH=" + std::to_string(c.NH) + " NKV=" + std::to_string(c.NKV) + " HS=" + std::to_string(c.HS);
    expect_close(out, rout, 1e-5, 1e-5, tag + " vs ref");
    expect_close(out, dout, 1e-5, 1e-5, tag + " vs double");
    expect_close(lse, rlse, 1e-5, 1e-5, tag + " lse vs ref");
    expect_close(lse, dlse, 1e-5, 1e-5, tag + " lse vs double");
    std::vector<float> out2(out.size(), NAN);  // lse is optional
    cpu().attention_forward(out2.data(), nullptr, q.data(), k.data(), v.data(), c.T, c.pos0, c.NH, c.NKV, c.HS, 0, 0);
    expect_close(out2, out, 0, 0, tag + " without lse");
  }
}

TEST_P(KernelCpuAttention, DecodeEqualsLastRowOfPrefill) {
  int T = 9, NH = 8, NKV = 2, HS = 20;
  auto q = random_vec((size_t)T * NH * HS, 11), k = random_vec((size_t)T * NKV * HS, 12),
       v = random_vec((size_t)T * NKV * HS, 13);
  std::vector<float> full((size_t)T * NH * HS), last((size_t)NH * HS);
  cpu().attention_forward(full.data(), nullptr, q.data(), k.data(), v.data(), T, 0, NH, NKV, HS, 0, 0);
  std::vector<float> qlast(q.end() - NH * HS, q.end());
  cpu().attention_forward(last.data(), nullptr, qlast.data(), k.data(), v.data(), 1, T - 1, NH, NKV, HS, 0, 0);
  std::vector<float> want(full.end() - NH * HS, full.end());
  expect_close(last, want, 0, 0, "decode vs prefill");
}

// A sliding window (query at p attends p - W + 1..p) over a plain cache and over a rolling cache
// of R rows (position j in row j % R), as ref computes it and as a double-precision softmax over
// the window's keys only (attention_double of the shifted cache); blocks that cross the wrap.
TEST_P(KernelCpuAttention, SlidingWindowAndRollingCache) {
  struct WinCase { int T, pos0, NH, NKV, HS, W, R; };
  for (const WinCase c : {WinCase{1, 100, 8, 2, 16, 16, 0}, {37, 0, 4, 2, 12, 16, 0}, {37, 29, 4, 4, 9, 5, 0},
                          {1, 100, 8, 2, 16, 16, 16}, {7, 50, 4, 1, 20, 16, 22}, {20, 130, 6, 2, 33, 70, 89},
                          {5, 3, 4, 2, 8, 16, 20}, {3, 200, 2, 2, 64, 100, 200}}) {
    const int rows = c.R > 0 ? c.R : c.pos0 + c.T;
    auto q = random_vec((size_t)c.T * c.NH * c.HS, 5 + c.HS, -3, 3);
    // the cache: position j's key / value, written where the layout puts it
    std::vector<float> kpos = random_vec((size_t)(c.pos0 + c.T) * c.NKV * c.HS, 6 + c.T),
                       vpos = random_vec(kpos.size(), 7 + c.T);
    std::vector<float> k((size_t)rows * c.NKV * c.HS, NAN), v(k.size(), NAN);
    const size_t row = (size_t)c.NKV * c.HS;
    const int first = std::max(0, c.pos0 - c.W + 1);  // the oldest position any query needs
    for (int j = first; j < c.pos0 + c.T; j++) {
      const size_t r = (size_t)(c.R > 0 ? j % c.R : j);
      std::copy(kpos.begin() + j * row, kpos.begin() + (j + 1) * row, k.begin() + r * row);
      std::copy(vpos.begin() + j * row, vpos.begin() + (j + 1) * row, v.begin() + r * row);
    }
    std::vector<float> out((size_t)c.T * c.NH * c.HS), lse((size_t)c.NH * c.T), rout(out.size()), rlse(lse.size());
    cpu().attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.T, c.pos0, c.NH, c.NKV, c.HS, c.W,
                            c.R);
    ref().attention_forward(rout.data(), rlse.data(), q.data(), k.data(), v.data(), c.T, c.pos0, c.NH, c.NKV, c.HS,
                            c.W, c.R);
    const std::string tag = "window T=" + std::to_string(c.T) + " pos0=" + std::to_string(c.pos0) +
                            " W=" + std::to_string(c.W) + " R=" + std::to_string(c.R);
    expect_close(out, rout, 1e-5, 1e-5, tag + " vs ref");
    expect_close(lse, rlse, 1e-5, 1e-5, tag + " lse vs ref");
    // per query, the double softmax over exactly its window's keys
    for (int t = 0; t < c.T; t++) {
      const int p = c.pos0 + t, j0 = std::max(0, p - c.W + 1), n = p - j0 + 1;
      std::vector<float> qt(q.begin() + (size_t)t * c.NH * c.HS, q.begin() + (size_t)(t + 1) * c.NH * c.HS);
      std::vector<float> kw(kpos.begin() + j0 * row, kpos.begin() + (p + 1) * row),
                         vw(vpos.begin() + j0 * row, vpos.begin() + (p + 1) * row), dout, dlse;
      attention_double(dout, dlse, qt, kw, vw, 1, n - 1, c.NH, c.NKV, c.HS);
      std::vector<float> got(out.begin() + (size_t)t * c.NH * c.HS, out.begin() + (size_t)(t + 1) * c.NH * c.HS);
      expect_close(got, dout, 1e-5, 1e-5, tag + " query " + std::to_string(t) + " vs double");
    }
  }
  // a rolling cache too short for the block is refused
  std::vector<float> x(64 * 16, 0.0f), o(64);
  EXPECT_THROW(cpu().attention_forward(o.data(), nullptr, x.data(), x.data(), x.data(), 4, 10, 1, 1, 16, 8, 10),
               Error);
}

LT_INSTANTIATE_ISAS(KernelCpuAttention);

}  // namespace
}  // namespace lt::test
