// train_ops_cpu() against train_ops_ref(), op by op, once per ISA (LEANTUNE_ISA), on odd shapes:
// C=67, HS=12/9, T=1/5/37/130, MHA and GQA ratio 4, documents restarting every 17 tokens or at
// irregular places, both RoPE layouts. "+=" outputs are pre-filled with random values and compared
// after accumulation; "written" outputs are pre-filled with garbage. Also: two runs give identical
// bits, and the attention kernels give identical bits on 1 thread and on all threads.
#include <gtest/gtest.h>

#include "core/dtype.h"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::test {
namespace {

using VecF = std::vector<float>;

// Closeness scaled by the tensor's magnitude: |got - want| <= rel * (|want| + max|want|).
void expect_close_mag(const VecF& got, const VecF& want, double rel, const std::string& what) {
  double mx = 0;
  for (float w : want) mx = std::max(mx, (double)std::fabs(w));
  expect_close(got, want, rel, rel * mx + 1e-30, what);
}

void expect_bits_equal(const VecF& a, const VecF& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); i++) bad += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements differ between runs";
}

// Room for every kept dS row of a call (attention_stored_ds.h): at most kBk = 32 floats per
// (head, query, key tile) pair of a query and a tile it sees, so NH * T * (T + 32) floats.
VecF ds_rows_for(int T, int NH) { return VecF((size_t)NH * T * (T + 32)); }

class KernelTrainCpu : public KernelIsaTest {
 protected:
  void SetUp() override {
    KernelIsaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    tops_ = &train_ops_cpu();
    ASSERT_EQ(std::string(tops_->name), std::string("train-cpu-") + isa_name(GetParam()));
  }
  const TrainOps& tcpu() const { return *tops_; }
  const TrainOps& tref() const { return train_ops_ref(); }

 private:
  const TrainOps* tops_ = nullptr;
};

struct AttnCase {
  int T, NH, NKV, HS;
  std::string docs;
  std::string name() const {
    return "T=" + std::to_string(T) + " NH=" + std::to_string(NH) + " NKV=" + std::to_string(NKV) +
           " HS=" + std::to_string(HS) + " docs=" + docs;
  }
};

std::vector<AttnCase> attn_cases() {
  std::vector<AttnCase> cs;
  for (int T : {1, 5, 37, 130})
    for (int HS : {12, 9})
      for (auto [NH, NKV] : {std::pair{3, 3}, std::pair{8, 2}})
        for (const char* docs : {"one", "every17", "irregular", "window20", "unsorted"})
          cs.push_back({T, NH, NKV, HS, docs});
  return cs;
}

TEST_P(KernelTrainCpu, AttentionForward) {
  for (const AttnCase& c : attn_cases()) {
    auto ds = make_doc_start(c.T, c.docs);
    size_t nq = (size_t)c.T * c.NH * c.HS, nk = (size_t)c.T * c.NKV * c.HS;
    auto q = random_vec(nq, 11 + c.T, -2, 2), k = random_vec(nk, 12 + c.T, -2, 2), v = random_vec(nk, 13 + c.T);
    VecF out(nq, 7.0f), lse((size_t)c.NH * c.T, 7.0f), out_r(nq), lse_r(lse.size());
    tcpu().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), c.T, c.NH,
                                   c.NKV, c.HS);
    tref().attention_train_forward(out_r.data(), lse_r.data(), q.data(), k.data(), v.data(), ds.data(), c.T, c.NH,
                                   c.NKV, c.HS);
    expect_close_mag(out, out_r, 1e-5, "attention out " + c.name());
    expect_close_mag(lse, lse_r, 1e-5, "attention lse " + c.name());
    VecF out2(nq, -3.0f);  // lse may be null
    tcpu().attention_train_forward(out2.data(), nullptr, q.data(), k.data(), v.data(), ds.data(), c.T, c.NH, c.NKV,
                                   c.HS);
    expect_bits_equal(out2, out, "attention out without lse " + c.name());
  }
}

TEST_P(KernelTrainCpu, AttentionBackward) {
  for (const AttnCase& c : attn_cases()) {
    auto ds = make_doc_start(c.T, c.docs);
    size_t nq = (size_t)c.T * c.NH * c.HS, nk = (size_t)c.T * c.NKV * c.HS;
    auto q = random_vec(nq, 21 + c.T, -2, 2), k = random_vec(nk, 22 + c.T, -2, 2), v = random_vec(nk, 23 + c.T);
    auto dout = random_vec(nq, 24 + c.T);
    VecF out(nq), lse((size_t)c.NH * c.T);
    tref().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), c.T, c.NH,
                                   c.NKV, c.HS);
    auto dq = random_vec(nq, 25), dk = random_vec(nk, 26), dv = random_vec(nk, 27);  // "+=" targets
    VecF dq_r = dq, dk_r = dk, dv_r = dv;
    VecF rows = ds_rows_for(c.T, c.NH);  // the kept dS rows, as a training run has them
    tcpu().attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                              lse.data(), ds.data(), c.T, c.NH, c.NKV, c.HS, rows.data(), rows.size() * 4);
    tref().attention_backward(dq_r.data(), dk_r.data(), dv_r.data(), dout.data(), q.data(), k.data(), v.data(),
                              out.data(), lse.data(), ds.data(), c.T, c.NH, c.NKV, c.HS, nullptr, 0);
    expect_close_mag(dq, dq_r, 1e-5, "attention dq " + c.name());
    expect_close_mag(dk, dk_r, 1e-5, "attention dk " + c.name());
    expect_close_mag(dv, dv_r, 1e-5, "attention dv " + c.name());
  }
}

// A larger case (several tiles per document, HS = 64 = whole vectors) and bit-identical results
// across two runs and across thread counts.
TEST_P(KernelTrainCpu, AttentionDeterministicAcrossRunsAndThreads) {
  int T = 300, NH = 8, NKV = 2, HS = 64;
  auto ds = make_doc_start(T, "irregular");
  size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS;
  auto q = random_vec(nq, 31), k = random_vec(nk, 32), v = random_vec(nk, 33), dout = random_vec(nq, 34);
  auto run = [&](VecF& out, VecF& lse, VecF& dq, VecF& dk, VecF& dv) {
    out.assign(nq, 0.0f), lse.assign((size_t)NH * T, 0.0f);
    dq.assign(nq, 0.5f), dk.assign(nk, 0.25f), dv.assign(nk, -0.5f);
    tcpu().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), T, NH, NKV, HS);
    VecF rows = ds_rows_for(T, NH);
    tcpu().attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                              lse.data(), ds.data(), T, NH, NKV, HS, rows.data(), rows.size() * 4);
  };
  VecF o1, l1, q1, k1, v1, o2, l2, q2, k2, v2, o3, l3, q3, k3, v3;
  run(o1, l1, q1, k1, v1);
  run(o2, l2, q2, k2, v2);
  int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  run(o3, l3, q3, k3, v3);
  omp_set_num_threads(nt);
  for (auto [a, b, what] : {std::tuple{&o1, &o2, "out"}, {&l1, &l2, "lse"}, {&q1, &q2, "dq"}, {&k1, &k2, "dk"},
                            {&v1, &v2, "dv"}})
    expect_bits_equal(*a, *b, std::string("rerun ") + what);
  for (auto [a, b, what] : {std::tuple{&o1, &o3, "out"}, {&l1, &l3, "lse"}, {&q1, &q3, "dq"}, {&k1, &k3, "dk"},
                            {&v1, &v3, "dv"}})
    expect_bits_equal(*a, *b, std::string("1 thread vs ") + std::to_string(nt) + ": " + what);
  // And still right against ref at this size.
  VecF out_r(nq), lse_r((size_t)NH * T), dq_r(nq, 0.5f), dk_r(nk, 0.25f), dv_r(nk, -0.5f);
  tref().attention_train_forward(out_r.data(), lse_r.data(), q.data(), k.data(), v.data(), ds.data(), T, NH, NKV, HS);
  tref().attention_backward(dq_r.data(), dk_r.data(), dv_r.data(), dout.data(), q.data(), k.data(), v.data(),
                            o1.data(), l1.data(), ds.data(), T, NH, NKV, HS, nullptr, 0);
  expect_close_mag(o1, out_r, 1e-5, "T=300 out");
  expect_close_mag(q1, dq_r, 1e-5, "T=300 dq");
  expect_close_mag(k1, dk_r, 1e-5, "T=300 dk");
  expect_close_mag(v1, dv_r, 1e-5, "T=300 dv");
}

// Pass 1 keeps its dS rows for pass 2 where document starts are sorted and the caller's ds_rows
// hold them (attention_stored_ds.h), else pass 2 recomputes them. The same f32 dS computed in the
// same order either way, so the same bits.
TEST_P(KernelTrainCpu, AttentionStoredAndRecomputedDsGiveTheSameBits) {
  for (const AttnCase& c : {AttnCase{1, 3, 3, 12, "one"}, AttnCase{37, 8, 2, 9, "every17"},
                            AttnCase{130, 3, 3, 12, "irregular"}, AttnCase{130, 8, 2, 64, "window20"},
                            AttnCase{300, 8, 2, 64, "one"}}) {
    auto ds = make_doc_start(c.T, c.docs);
    size_t nq = (size_t)c.T * c.NH * c.HS, nk = (size_t)c.T * c.NKV * c.HS;
    auto q = random_vec(nq, 41 + c.T, -2, 2), k = random_vec(nk, 42 + c.T, -2, 2), v = random_vec(nk, 43 + c.T);
    auto dout = random_vec(nq, 44 + c.T);
    VecF out(nq), lse((size_t)c.NH * c.T);
    tref().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), c.T, c.NH,
                                   c.NKV, c.HS);
    auto run = [&](bool stored) {
      VecF g(nq + 2 * nk, 0.5f), rows = stored ? ds_rows_for(c.T, c.NH) : VecF();
      tcpu().attention_backward(g.data(), g.data() + nq, g.data() + nq + nk, dout.data(), q.data(), k.data(),
                                v.data(), out.data(), lse.data(), ds.data(), c.T, c.NH, c.NKV, c.HS,
                                stored ? rows.data() : nullptr, rows.size() * 4);
      return g;
    };
    expect_bits_equal(run(true), run(false), "stored vs recomputed dS " + c.name());
  }
}

// attention_ds_rows_bytes sizes the training plan's buffer for documents within sequences of seq
// tokens: with exactly that many bytes the kernel keeps its rows there (for the widest layout, one
// document per sequence, and for finer ones), with 4 bytes fewer it leaves the buffer untouched
// and recomputes; the same bits every way.
TEST_P(KernelTrainCpu, AttentionPlannedDsRowsAreUsedWhenTheyFit) {
  const int T = 300, seq = 100, NH = 8, NKV = 2, HS = 24;
  const size_t bytes = attention_ds_rows_bytes(T, seq, NH, sizeof(float));
  ASSERT_GT(bytes, 0u);
  ASSERT_EQ(bytes % sizeof(float), 0u);
  EXPECT_EQ(attention_ds_rows_bytes(T, seq, NH, 2), bytes / 2);
  EXPECT_EQ(attention_ds_rows_bytes(1 << 16, 1 << 16, 32, 2), 0u);  // quadratic rows past the cap: recompute
  for (int doc : {seq, 17}) {
    std::vector<int> ds(T);
    for (int t = 0; t < T; t++) ds[(size_t)t] = std::max(t - t % seq, t - t % doc);
    size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS;
    auto q = random_vec(nq, 61, -2, 2), k = random_vec(nk, 62, -2, 2), v = random_vec(nk, 63);
    auto dout = random_vec(nq, 64);
    VecF out(nq), lse((size_t)NH * T);
    tref().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), T, NH, NKV, HS);
    auto run = [&](size_t room, size_t* untouched) {
      VecF g(nq + 2 * nk, 0.5f), rows(bytes / sizeof(float), std::nanf(""));
      tcpu().attention_backward(g.data(), g.data() + nq, g.data() + nq + nk, dout.data(), q.data(), k.data(),
                                v.data(), out.data(), lse.data(), ds.data(), T, NH, NKV, HS, rows.data(), room);
      *untouched = (size_t)std::count_if(rows.begin(), rows.end(), [](float x) { return std::isnan(x); });
      return g;
    };
    size_t fit = 0, short_by_one = 0, none = 0;
    const VecF a = run(bytes, &fit), b = run(bytes - 4, &short_by_one), c = run(0, &none);
    const std::string tag = "documents of " + std::to_string(doc);
    EXPECT_LT(fit, bytes / sizeof(float)) << tag << ": rows kept in the planned bytes";
    if (doc == seq) {
      EXPECT_EQ(short_by_one, bytes / sizeof(float)) << tag << ": one float short, recomputed";
    }
    expect_bits_equal(a, c, "kept vs recomputed, " + tag);
    expect_bits_equal(b, c, "short buffer vs recomputed, " + tag);
  }
}

// A bound workspace of attention_workspace_bytes is where the kernels put their tiles and rows (it
// is written, and nothing else is needed), and the results are the same bits as with their own
// vectors (nothing bound) or a workspace too small for some pieces.
TEST_P(KernelTrainCpu, AttentionBoundWorkspaceIsUsedAndGivesTheSameBits) {
  const int T = 133, NH = 6, NKV = 3, HS = 20;
  std::vector<int> ds(T);
  for (int t = 0; t < T; t++) ds[(size_t)t] = t - t % 50;
  const size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS;
  auto q = random_vec(nq, 71, -2, 2), k = random_vec(nk, 72, -2, 2), v = random_vec(nk, 73), dout = random_vec(nq, 74);
  const size_t bytes = attention_workspace_bytes(T, NH, NKV, HS, false);
  ASSERT_GT(bytes, 0u);
  EXPECT_GE(attention_workspace_bytes(T, NH, NKV, HS, true), bytes);
  auto run = [&](size_t room, size_t* untouched) {
    std::vector<float> ws(bytes / sizeof(float) + 16, std::nanf(""));
    float* buf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t(63));
    bind_attention_workspace(room ? buf : nullptr, room);
    VecF out(nq), lse((size_t)NH * T), g(nq + 2 * nk, 0.5f);
    tcpu().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), T, NH, NKV, HS);
    tcpu().attention_backward(g.data(), g.data() + nq, g.data() + nq + nk, dout.data(), q.data(), k.data(), v.data(),
                              out.data(), lse.data(), ds.data(), T, NH, NKV, HS, nullptr, 0);
    bind_attention_workspace(nullptr, 0);
    *untouched = (size_t)std::count_if(buf, buf + bytes / sizeof(float), [](float x) { return std::isnan(x); });
    out.insert(out.end(), g.begin(), g.end());
    return out;
  };
  size_t used = 0, part = 0, none = 0;
  const VecF a = run(bytes, &used), b = run(bytes / 3, &part), c = run(0, &none);
  EXPECT_LT(used, bytes / sizeof(float) / 4) << "the bound workspace holds the call's scratch";
  EXPECT_EQ(none, bytes / sizeof(float));
  expect_bits_equal(a, c, "bound workspace vs the kernels' own vectors");
  expect_bits_equal(b, c, "a workspace too small for some pieces vs the kernels' own vectors");
}

// HS = 1 (a whole tile row is one float) and HS above the tiled kernels' limit (ref fallback).
TEST_P(KernelTrainCpu, AttentionTinyAndHugeHeads) {
  for (int HS : {1, 260}) {
    int T = 37, NH = 4, NKV = 2;
    auto ds = make_doc_start(T, "every17");
    size_t nq = (size_t)T * NH * HS, nk = (size_t)T * NKV * HS;
    auto q = random_vec(nq, 35, -2, 2), k = random_vec(nk, 36, -2, 2), v = random_vec(nk, 37), dout = random_vec(nq, 38);
    VecF out(nq), lse((size_t)NH * T), out_r(nq), lse_r(lse.size());
    tcpu().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), T, NH, NKV, HS);
    tref().attention_train_forward(out_r.data(), lse_r.data(), q.data(), k.data(), v.data(), ds.data(), T, NH, NKV,
                                   HS);
    std::string tag = " HS=" + std::to_string(HS);
    expect_close_mag(out, out_r, 1e-5, "out" + tag);
    expect_close_mag(lse, lse_r, 1e-5, "lse" + tag);
    auto dq = random_vec(nq, 39), dk = random_vec(nk, 40), dv = random_vec(nk, 41);
    VecF dq_r = dq, dk_r = dk, dv_r = dv;
    VecF rows = ds_rows_for(T, NH);
    tcpu().attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                              out_r.data(), lse_r.data(), ds.data(), T, NH, NKV, HS, rows.data(), rows.size() * 4);
    tref().attention_backward(dq_r.data(), dk_r.data(), dv_r.data(), dout.data(), q.data(), k.data(), v.data(),
                              out_r.data(), lse_r.data(), ds.data(), T, NH, NKV, HS, nullptr, 0);
    expect_close_mag(dq, dq_r, 1e-5, "dq" + tag);
    expect_close_mag(dk, dk_r, 1e-5, "dk" + tag);
    expect_close_mag(dv, dv_r, 1e-5, "dv" + tag);
  }
}

TEST_P(KernelTrainCpu, AttentionRejectsBadDocStart) {
  int T = 5, NH = 2, NKV = 1, HS = 4;
  std::vector<int> ds = {0, 0, 3, 0, 0};  // doc_start[2] > 2
  VecF q((size_t)T * NH * HS, 0.1f), kv((size_t)T * NKV * HS, 0.2f), out(q.size()), lse((size_t)NH * T);
  VecF dq(q.size()), dk(kv.size()), dv(kv.size());
  EXPECT_THROW(tcpu().attention_train_forward(out.data(), lse.data(), q.data(), kv.data(), kv.data(), ds.data(), T,
                                              NH, NKV, HS),
               Error);
  EXPECT_THROW(tcpu().attention_backward(dq.data(), dk.data(), dv.data(), q.data(), q.data(), kv.data(), kv.data(),
                                         q.data(), lse.data(), ds.data(), T, NH, NKV, HS, nullptr, 0),
               Error);
}

TEST_P(KernelTrainCpu, RmsnormBackward) {
  for (int C : {1, 7, 16, 67, 600})
    for (int T : {1, 5, 37, 130}) {
      auto x = random_vec((size_t)T * C, 41 + C, -3, 3), w = random_vec(C, 42 + C), dout = random_vec(x.size(), 43);
      VecF rstd(T);
      for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[(size_t)t * C + c] * x[(size_t)t * C + c];
        rstd[t] = (float)(1.0 / std::sqrt(ss / C + 1e-6));
      }
      auto dx = random_vec(x.size(), 44), dw = random_vec(C, 45);
      VecF dx_r = dx, dw_r = dw, dx2 = dx, dx3 = dx, dw3 = dw;
      std::string tag = "rmsnorm_backward C=" + std::to_string(C) + " T=" + std::to_string(T);
      tcpu().rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), T, C);
      tref().rmsnorm_backward(dx_r.data(), dw_r.data(), dout.data(), x.data(), w.data(), rstd.data(), T, C);
      expect_close_mag(dx, dx_r, 1e-5, tag + " dx");
      expect_close_mag(dw, dw_r, 1e-5, tag + " dw");
      tcpu().rmsnorm_backward(dx2.data(), nullptr, dout.data(), x.data(), w.data(), rstd.data(), T, C);  // frozen w
      expect_bits_equal(dx2, dx, tag + " dx with dw null");
      tcpu().rmsnorm_backward(dx3.data(), dw3.data(), dout.data(), x.data(), w.data(), rstd.data(), T, C);
      expect_bits_equal(dx3, dx, tag + " rerun dx");
      expect_bits_equal(dw3, dw, tag + " rerun dw");
    }
}

TEST_P(KernelTrainCpu, RopeBackwardBothLayouts) {
  for (int HS : {12, 64, 6})
    for (int T : {1, 37, 130}) {
      int NH = 3;
      auto dx = random_vec((size_t)T * NH * HS, 51);
      VecF inv_freq(HS / 2);
      for (int i = 0; i < HS / 2; i++) inv_freq[i] = 1.0f / std::pow(10000.0f, 2.0f * i / HS);
      std::vector<int> pos(T);
      for (int t = 0; t < T; t++) pos[t] = (t % 17) * 61 + 3;  // packed documents, large angles
      for (bool interleaved : {false, true}) {
        auto got = dx, want = dx;
        tcpu().rope_backward(got.data(), pos.data(), inv_freq.data(), T, NH, HS, interleaved);
        tref().rope_backward(want.data(), pos.data(), inv_freq.data(), T, NH, HS, interleaved);
        expect_close(got, want, 1e-6, 1e-7,
                     "rope_backward HS=" + std::to_string(HS) + " T=" + std::to_string(T) +
                         (interleaved ? " interleaved" : " halves"));
      }
    }
}

// rope_apply_backward with Ops::rope_table's cos / sin gives rope_backward's bits (cpu and ref).
TEST_P(KernelTrainCpu, RopeBackwardFromTableEqualsRopeBackward) {
  for (int HS : {12, 64, 6})
    for (int T : {1, 37, 130}) {
      int NH = 3;
      auto dx = random_vec((size_t)T * NH * HS, 52);
      VecF inv_freq(HS / 2), table((size_t)T * HS, -1.0f);
      for (int i = 0; i < HS / 2; i++) inv_freq[i] = 1.0f / std::pow(10000.0f, 2.0f * i / HS);
      std::vector<int> pos(T);
      for (int t = 0; t < T; t++) pos[t] = (t % 17) * 61 + 3;
      ops_ref().rope_table(table.data(), pos.data(), inv_freq.data(), T, HS);
      for (bool interleaved : {false, true})
        for (const TrainOps* o : {&tcpu(), &tref()}) {
          auto got = dx, want = dx;
          o->rope_apply_backward(got.data(), table.data(), T, NH, HS, interleaved);
          o->rope_backward(want.data(), pos.data(), inv_freq.data(), T, NH, HS, interleaved);
          expect_bits_equal(got, want, std::string(o->name) + " rope_backward from table HS=" +
                                           std::to_string(HS) + " T=" + std::to_string(T) +
                                           (interleaved ? " interleaved" : " halves"));
        }
    }
}

TEST_P(KernelTrainCpu, SwigluBackward) {
  for (int F : {1, 13, 67, 5000}) {
    int T = F > 1000 ? 5 : 37;  // 5x5000 crosses the parallel threshold and chunk boundaries
    size_t n = (size_t)T * F;
    auto g = random_vec(n, 61, -12, 12), u = random_vec(n, 62, -2, 2), d = random_vec(n, 63);
    VecF dg(n, 9.0f), du(n, 9.0f), dg_r(n, -9.0f), du_r(n, -9.0f);  // WRITTEN: garbage beforehand
    tcpu().swiglu_backward(dg.data(), du.data(), d.data(), g.data(), u.data(), T, F);
    tref().swiglu_backward(dg_r.data(), du_r.data(), d.data(), g.data(), u.data(), T, F);
    expect_close(dg, dg_r, 1e-5, 1e-7, "swiglu_backward dgate F=" + std::to_string(F));
    expect_close(du, du_r, 1e-5, 1e-7, "swiglu_backward dup F=" + std::to_string(F));
  }
}

// The training step writes dup over dout (train_model.cpp's layer_backward): in place must give the
// same bits as separate buffers, each element read before it is written (F = 5000 crosses chunks).
TEST_P(KernelTrainCpu, SwigluBackwardInPlaceGivesTheSameBits) {
  for (int F : {13, 5000}) {
    const int T = 5;
    const size_t n = size_t(T) * F;
    auto g = random_vec(n, 64, -12, 12), u = random_vec(n, 65, -2, 2), d = random_vec(n, 66);
    for (const TrainOps* t : {&tcpu(), &tref()}) {
      VecF dg(n), du(n), dg2(n), io = d;
      t->swiglu_backward(dg.data(), du.data(), d.data(), g.data(), u.data(), T, F);
      t->swiglu_backward(dg2.data(), io.data(), io.data(), g.data(), u.data(), T, F);
      EXPECT_EQ(0, std::memcmp(dg.data(), dg2.data(), n * sizeof(float))) << "dgate F=" << F;
      EXPECT_EQ(0, std::memcmp(du.data(), io.data(), n * sizeof(float))) << "dup F=" << F;
    }
  }
}

// From bf16 gate and up (the bf16 step's saved roundings): swiglu_backward's bits on the widened
// values, in each table (cpu at this ISA level, ref); F = 5000 crosses chunks, 13 leaves a tail.
TEST_P(KernelTrainCpu, SwigluBackwardFromBf16IsItsBitsOnTheWidenedValues) {
  for (int F : {1, 13, 67, 5000}) {
    const int T = F > 1000 ? 5 : 37;
    const size_t n = size_t(T) * F;
    auto g = random_vec(n, 67, -12, 12), u = random_vec(n, 68, -2, 2), d = random_vec(n, 69);
    std::vector<uint16_t> g16(n), u16(n);
    for (size_t i = 0; i < n; ++i) g16[i] = f32_to_bf16(g[i]), u16[i] = f32_to_bf16(u[i]), g[i] = bf16_to_f32(g16[i]),
                                   u[i] = bf16_to_f32(u16[i]);
    for (const TrainOps* t : {&tcpu(), &tref()}) {
      VecF dg(n, 9.0f), du(n, 9.0f), dg2(n, -9.0f), du2(n, -9.0f);
      t->swiglu_backward(dg.data(), du.data(), d.data(), g.data(), u.data(), T, F);
      t->swiglu_backward_bf16(dg2.data(), du2.data(), d.data(), g16.data(), u16.data(), T, F);
      EXPECT_EQ(0, std::memcmp(dg.data(), dg2.data(), n * sizeof(float))) << t->name << " dgate F=" << F;
      EXPECT_EQ(0, std::memcmp(du.data(), du2.data(), n * sizeof(float))) << t->name << " dup F=" << F;
    }
  }
}

TEST_P(KernelTrainCpu, SwigluBackwardExtremeInputs) {
  VecF g = {-200, -100, -88, -87, -50, -20, -1e-3f, 0, 1e-3f, 20, 50, 87, 88, 89, 100, 200};
  VecF u(g.size(), 1.5f), d(g.size(), -0.75f), dg(g.size()), du(g.size()), dg_r(g.size()), du_r(g.size());
  tcpu().swiglu_backward(dg.data(), du.data(), d.data(), g.data(), u.data(), 1, (int)g.size());
  tref().swiglu_backward(dg_r.data(), du_r.data(), d.data(), g.data(), u.data(), 1, (int)g.size());
  expect_close(dg, dg_r, 1e-5, 1e-30, "swiglu_backward extremes dgate");
  expect_close(du, du_r, 1e-5, 1e-30, "swiglu_backward extremes dup");
}

TEST_P(KernelTrainCpu, EmbeddingBackwardRepeatedTokens) {
  int V = 11, C = 67;
  for (int T : {1, 37, 600}) {  // 600 x 67 runs in parallel over column chunks
    std::vector<int> tokens(T);
    for (int t = 0; t < T; t++) tokens[t] = (t * 7 + 3) % V;  // every token repeats
    auto dout = random_vec((size_t)T * C, 71);
    auto dt = random_vec((size_t)V * C, 72);
    VecF dt_r = dt;
    tcpu().embedding_backward(dt.data(), dout.data(), tokens.data(), T, C);
    tref().embedding_backward(dt_r.data(), dout.data(), tokens.data(), T, C);
    expect_close(dt, dt_r, 0, 0, "embedding_backward T=" + std::to_string(T));  // same order of sums as ref
  }
}

TEST_P(KernelTrainCpu, MatmulBackward) {
  for (int T : {1, 5, 37, 130}) {
    int IC = 67, OC = 29;
    auto x = random_vec((size_t)T * IC, 81), w = random_vec((size_t)OC * IC, 82), dout = random_vec((size_t)T * OC, 83);
    for (int mask = 0; mask < 8; mask++) {  // every subset of {dx, dw, db}
      auto dx = random_vec(x.size(), 84), dw = random_vec(w.size(), 85), db = random_vec(OC, 86);
      VecF dx_r = dx, dw_r = dw, db_r = db, dx0 = dx, dw0 = dw, db0 = db;
      auto sel = [&](VecF& v, int bit) { return (mask >> bit) & 1 ? v.data() : nullptr; };
      tcpu().matmul_backward(sel(dx, 0), sel(dw, 1), sel(db, 2), dout.data(), x.data(), w.data(), T, IC, OC);
      tref().matmul_backward(sel(dx_r, 0), sel(dw_r, 1), sel(db_r, 2), dout.data(), x.data(), w.data(), T, IC, OC);
      std::string tag = "matmul_backward T=" + std::to_string(T) + " mask=" + std::to_string(mask);
      expect_close_mag(dx, dx_r, 1e-5, tag + " dx");
      expect_close_mag(dw, dw_r, 1e-5, tag + " dw");
      expect_close_mag(db, db_r, 1e-5, tag + " db");
      if (!(mask & 1)) expect_bits_equal(dx, dx0, tag + " dx untouched");
      if (!(mask & 2)) expect_bits_equal(dw, dw0, tag + " dw untouched");
      if (!(mask & 4)) expect_bits_equal(db, db0, tag + " db untouched");
    }
  }
}

TEST_P(KernelTrainCpu, LmHeadLoss) {
  int T = 37, C = 67, V = 101, chunk = 16;
  auto x = random_vec((size_t)T * C, 91), w = random_vec((size_t)V * C, 92);
  std::vector<int> labels(T);
  for (int t = 0; t < T; t++) labels[t] = t % 5 == 2 ? kIgnoreLabel : (t * 13 + 1) % V;
  VecF dx((size_t)T * C, 3.0f), dx_r((size_t)T * C, -3.0f), logits((size_t)chunk * V), logits_r(logits.size());
  auto dw = random_vec((size_t)V * C, 93);
  VecF dw_r = dw;
  float loss = tcpu().lm_head_loss(dx.data(), dw.data(), logits.data(), x.data(), w.data(), labels.data(), T, C, V,
                                   chunk, 0.5f);
  float loss_r = tref().lm_head_loss(dx_r.data(), dw_r.data(), logits_r.data(), x.data(), w.data(), labels.data(), T,
                                     C, V, chunk, 0.5f);
  EXPECT_NEAR(loss, loss_r, 1e-5 * std::fabs(loss_r));
  expect_close_mag(dx, dx_r, 1e-5, "lm_head_loss dx");
  expect_close_mag(dw, dw_r, 1e-5, "lm_head_loss dw");
}

// Prefix KernelTrain (not LT_INSTANTIATE_ISAS's KernelIsa) so --gtest_filter='KernelTrain*' selects it.
INSTANTIATE_TEST_SUITE_P(KernelTrain, KernelTrainCpu, ::testing::Values(Isa::Scalar, Isa::Avx2, Isa::Avx512),
                         isa_param_name);

TEST(KernelTrainCpuDispatch, TablesAreComplete) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (!cpu_supports(isa)) continue;
    const TrainOps& t = train_ops_cpu_for(isa);
    EXPECT_TRUE(t.embedding_backward && t.rmsnorm_backward && t.rope_backward && t.attention_train_forward &&
                t.attention_backward && t.swiglu_backward && t.matmul_backward && t.lm_head_loss)
        << isa_name(isa);
  }
}

}  // namespace
}  // namespace lt::test
