// Batching (src/train/data_loader.h) on hand-made examples whose token ids are unique, so every
// batch token can be traced back to (example, index): shifted labels equal the next token's label
// in the same document and are ignored at document ends, doc_start/positions describe exactly the
// document segment (no attention across documents), packing fills rows and covers every token once
// per epoch, padding is inert, the shuffle is deterministic and platform-independent (golden
// values), seek() reproduces an uninterrupted run, and the train/eval split is disjoint.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "train/data_loader.h"

namespace {

using lt::Batch;
using lt::DataLoader;
using lt::Example;
using lt::kIgnoreLabel;

// n examples; example k has ids 1000*(k+1) + j, length 2 + (k*7) % maxextra; the first k % 3
// tokens are "prompt" (ignored labels).
std::vector<Example> make_examples(int n, int maxextra = 11) {
  std::vector<Example> v;
  for (int k = 0; k < n; ++k) {
    Example e;
    int len = 2 + (k * 7) % maxextra;
    for (int j = 0; j < len; ++j) {
      int id = 1000 * (k + 1) + j;
      e.ids.push_back(id);
      e.labels.push_back(j < k % 3 ? kIgnoreLabel : id);
    }
    v.push_back(e);
  }
  return v;
}

// Checks every invariant of one batch against the source examples; returns (example, index) of
// each non-pad token in order, via `seen`.
void check_batch(const Batch& b, const std::vector<Example>& ex, int pad_id,
                 std::vector<std::pair<int, int>>* seen) {
  ASSERT_EQ(b.tokens.size(), size_t(b.B) * b.T);
  ASSERT_EQ(b.labels.size(), b.tokens.size());
  ASSERT_EQ(b.positions.size(), b.tokens.size());
  ASSERT_EQ(b.doc_start.size(), b.tokens.size());
  int n_labels = 0;
  for (int i = 0; i < b.B * b.T; ++i) {
    int row = i / b.T;
    n_labels += b.labels[i] != kIgnoreLabel;
    int ds = b.doc_start[i];
    ASSERT_GE(ds, row * b.T) << "token " << i << " attends into another row";
    ASSERT_LE(ds, i);
    ASSERT_EQ(b.positions[i], i - ds) << i;
    int id = b.tokens[i];
    if (id == pad_id && b.labels[i] == kIgnoreLabel && ds == i && b.positions[i] == 0 && id < 1000) continue;  // pad
    int k = id / 1000 - 1, j = id % 1000;
    ASSERT_GE(k, 0);
    ASSERT_LT(k, int(ex.size()));
    const Example& e = ex[k];
    ASSERT_LT(j, int(e.ids.size()));
    // The segment start is the same document, and every token between is the document's run.
    for (int s = ds; s <= i; ++s) ASSERT_EQ(b.tokens[s], e.ids[j - (i - s)]) << "cross-document attention at " << i;
    // Shifted label: next token's label within the same document, ignored at its end.
    int expect = j + 1 < int(e.ids.size()) ? e.labels[j + 1] : kIgnoreLabel;
    ASSERT_EQ(b.labels[i], expect) << "token " << i << " (example " << k << ", index " << j << ")";
    if (seen) seen->push_back({k, j});
  }
  EXPECT_EQ(b.n_label_tokens, n_labels);
}

std::vector<Batch> epoch_batches(DataLoader& dl) {
  std::vector<Batch> v;
  Batch b;
  while (dl.next(b)) v.push_back(b);
  return v;
}

bool same(const Batch& a, const Batch& b) {
  return a.tokens == b.tokens && a.labels == b.labels && a.positions == b.positions && a.doc_start == b.doc_start &&
         a.n_label_tokens == b.n_label_tokens;
}

TEST(TrainDataBatch, HandMadeLabelsPositionsDocStart) {
  Example a{{5, 6, 7}, {kIgnoreLabel, kIgnoreLabel, 7}};  // prompt 5 6, completion 7
  Example b{{8, 9}, {8, 9}};
  DataLoader dl({a, b}, 2, 4, /*packing=*/true, 0, /*pad_id=*/0, /*shuffle=*/false);
  ASSERT_EQ(dl.batches_per_epoch(), 1u);
  Batch out;
  ASSERT_TRUE(dl.next(out));
  const int I = kIgnoreLabel;
  EXPECT_EQ(out.tokens, (std::vector<int>{5, 6, 7, 8, /**/ 9, 0, 0, 0}));
  // 5 -> 6 (prompt, ignored), 6 -> 7 (trained), 7 ends doc a, 8 -> 9 across the row cut (known target),
  // 9 ends doc b, pads ignored.
  EXPECT_EQ(out.labels, (std::vector<int>{I, 7, I, 9, /**/ I, I, I, I}));
  EXPECT_EQ(out.positions, (std::vector<int>{0, 1, 2, 0, /**/ 0, 0, 0, 0}));
  EXPECT_EQ(out.doc_start, (std::vector<int>{0, 0, 0, 3, /**/ 4, 5, 6, 7}));
  EXPECT_EQ(out.n_label_tokens, 2);
  EXPECT_FALSE(dl.next(out));
  EXPECT_EQ(dl.position(), 1u);
}

TEST(TrainDataBatch, PackingFillsRowsAndCoversEveryTokenOnce) {
  std::vector<Example> ex = make_examples(37);
  size_t total = 0;
  for (const Example& e : ex) total += e.ids.size();
  const int B = 3, T = 16;
  DataLoader dl(ex, B, T, true, 42);
  EXPECT_EQ(dl.batches_per_epoch(), (total + B * T - 1) / (B * T));
  for (int epoch = 0; epoch < 2; ++epoch) {
    dl.start_epoch(epoch);
    std::vector<Batch> batches = epoch_batches(dl);
    ASSERT_EQ(batches.size(), dl.batches_per_epoch());
    std::vector<std::pair<int, int>> seen;
    for (size_t n = 0; n < batches.size(); ++n) {
      size_t before = seen.size();
      check_batch(batches[n], ex, 0, &seen);
      if (n + 1 < batches.size()) {
        EXPECT_EQ(seen.size() - before, size_t(B * T)) << "batch " << n << " not full";
      }
    }
    ASSERT_EQ(seen.size(), total);
    std::set<std::pair<int, int>> uniq(seen.begin(), seen.end());
    EXPECT_EQ(uniq.size(), total);
    // Tokens of one document come in order (a split continues where it stopped).
    std::map<int, int> last;
    for (auto [k, j] : seen) {
      auto it = last.find(k);
      EXPECT_EQ(j, it == last.end() ? 0 : it->second + 1);
      last[k] = j;
    }
  }
}

TEST(TrainDataBatch, NoPackingPadsAndTruncates) {
  std::vector<Example> ex = make_examples(10, 20);  // lengths 2..21
  const int B = 4, T = 8, pad = 3;
  DataLoader dl(ex, B, T, false, 7, pad);
  ASSERT_EQ(dl.batches_per_epoch(), 3u);
  std::vector<Batch> batches = epoch_batches(dl);
  ASSERT_EQ(batches.size(), 3u);
  std::set<int> examples_seen;
  int pad_rows = 0;
  for (const Batch& b : batches) {
    std::vector<std::pair<int, int>> seen;
    check_batch(b, ex, pad, &seen);
    for (int r = 0; r < B; ++r) {
      int first = b.tokens[r * T];
      if (first == pad) {
        ++pad_rows;
        continue;
      }
      int k = first / 1000 - 1;
      EXPECT_TRUE(examples_seen.insert(k).second);
      int len = std::min<int>(T, ex[k].ids.size());
      for (int t = 0; t < T; ++t) {
        int i = r * T + t;
        if (t < len) {
          EXPECT_EQ(b.tokens[i], ex[k].ids[t]);
          EXPECT_EQ(b.doc_start[i], r * T);
        } else {
          EXPECT_EQ(b.tokens[i], pad);
          EXPECT_EQ(b.labels[i], kIgnoreLabel);
          EXPECT_EQ(b.doc_start[i], i);
        }
      }
      // Truncated: the last kept token is trained on the first dropped one.
      if (int(ex[k].ids.size()) > T) {
        EXPECT_EQ(b.labels[r * T + T - 1], ex[k].labels[T]);
      }
    }
  }
  EXPECT_EQ(examples_seen.size(), ex.size());
  EXPECT_EQ(pad_rows, 2);
}

TEST(TrainDataBatch, NextReusesBuffers) {
  DataLoader dl(make_examples(20), 2, 8, true, 1);
  Batch b;
  ASSERT_TRUE(dl.next(b));
  const int* t = b.tokens.data();
  const int* l = b.labels.data();
  const int* p = b.positions.data();
  const int* d = b.doc_start.data();
  while (dl.next(b)) {
    ASSERT_EQ(b.tokens.data(), t);
    ASSERT_EQ(b.labels.data(), l);
    ASSERT_EQ(b.positions.data(), p);
    ASSERT_EQ(b.doc_start.data(), d);
  }
}

TEST(TrainDataShuffle, GoldenValuesAndDeterminism) {
  // splitmix64 from state 0: the published first outputs.
  uint64_t s = 0;
  EXPECT_EQ(lt::splitmix64(s), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(lt::splitmix64(s), 0x6E789E6AA1B965F4ULL);
  lt::Rng r(123);
  for (int i = 0; i < 1000; ++i) ASSERT_LT(r.below(7), 7u);

  std::vector<size_t> a = lt::shuffled_indices(50, 9), b = lt::shuffled_indices(50, 9), c = lt::shuffled_indices(50, 10);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<size_t> perm(a.begin(), a.end());
  EXPECT_EQ(perm.size(), 50u);

  std::vector<Example> ex = make_examples(30);
  DataLoader d1(ex, 2, 8, true, 5), d2(ex, 2, 8, true, 5), d3(ex, 2, 8, true, 6);
  std::vector<Batch> e1 = epoch_batches(d1), e2 = epoch_batches(d2), e3 = epoch_batches(d3);
  ASSERT_EQ(e1.size(), e2.size());
  for (size_t i = 0; i < e1.size(); ++i) EXPECT_TRUE(same(e1[i], e2[i]));
  bool differs = false;
  for (size_t i = 0; i < e1.size(); ++i) differs = differs || !same(e1[i], e3[i]);
  EXPECT_TRUE(differs) << "different seeds gave the same order";
  d1.start_epoch(1);
  std::vector<Batch> e1b = epoch_batches(d1);
  differs = false;
  for (size_t i = 0; i < e1.size(); ++i) differs = differs || !same(e1[i], e1b[i]);
  EXPECT_TRUE(differs) << "epoch 1 repeated epoch 0's order";
}

TEST(TrainDataShuffle, SeekReproducesUninterruptedRun) {
  std::vector<Example> ex = make_examples(41);
  for (bool packing : {true, false}) {
    DataLoader full(ex, 3, 8, packing, 77);
    std::vector<std::vector<Batch>> epochs;
    for (int e = 0; e < 3; ++e) {
      full.start_epoch(e);
      epochs.push_back(epoch_batches(full));
    }
    DataLoader resumed(ex, 3, 8, packing, 77);
    for (int e = 0; e < 3; ++e) {
      for (size_t p = 0; p <= epochs[e].size(); ++p) {
        resumed.seek(e, p);
        EXPECT_EQ(resumed.position(), p);
        Batch b;
        for (size_t q = p; q < epochs[e].size(); ++q) {
          ASSERT_TRUE(resumed.next(b));
          ASSERT_TRUE(same(b, epochs[e][q])) << "packing " << packing << " epoch " << e << " from " << p << " batch " << q;
        }
        EXPECT_FALSE(resumed.next(b));
      }
    }
    EXPECT_THROW(resumed.seek(0, epochs[0].size() + 1), lt::Error);
  }
}

TEST(TrainDataSplit, ValidationSplitIsDisjointAndDeterministic) {
  std::vector<Example> ex = make_examples(50);
  lt::DataSplit s = lt::split_train_eval(ex, 0.1, 3);
  ASSERT_EQ(s.eval.size(), 5u);
  ASSERT_EQ(s.train.size(), 45u);
  std::set<int> tr, ev;
  for (const Example& e : s.train) tr.insert(e.ids[0]);
  for (const Example& e : s.eval) ev.insert(e.ids[0]);
  EXPECT_EQ(tr.size(), 45u);
  EXPECT_EQ(ev.size(), 5u);
  for (int id : ev) EXPECT_EQ(tr.count(id), 0u);
  lt::DataSplit s2 = lt::split_train_eval(ex, 0.1, 3);
  for (size_t i = 0; i < s.eval.size(); ++i) EXPECT_EQ(s2.eval[i].ids, s.eval[i].ids);
  EXPECT_EQ(lt::split_train_eval(make_examples(3), 0.01, 1).eval.size(), 1u);
  EXPECT_THROW(lt::split_train_eval(make_examples(1), 0.5, 1), lt::Error);
  EXPECT_THROW(lt::split_train_eval(ex, 1.0, 1), lt::Error);

  // The eval batches cover each eval example once, in order, with no shuffle.
  std::vector<Batch> eb = lt::make_eval_batches(s.eval, 2, 32, false);
  ASSERT_EQ(eb.size(), 3u);
  for (size_t i = 0; i < s.eval.size(); ++i) EXPECT_EQ(eb[i / 2].tokens[(i % 2) * 32], s.eval[i].ids[0]);
  for (const Batch& b : eb) check_batch(b, ex, 0, nullptr);
}

TEST(TrainDataBatch, EmptyDatasetIsAnError) {
  std::string msg;
  try {
    DataLoader dl({}, 1, 8, true, 0);
  } catch (const lt::Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("empty"), std::string::npos);
  EXPECT_THROW(DataLoader(make_examples(2), 0, 8, true, 0), lt::Error);
}

}  // namespace
