// Shuffling, train/eval splitting and batching of tokenized Examples (data.h) for training.
// Dimension letters: B rows per batch, T tokens per row; every batch buffer is (B*T) row-major.
// A Batch carries, per token, the input id, the SHIFTED label (labels[t] = the label of the next
// token of the same document: its id when trained, kIgnoreLabel for prompt tokens, document ends
// and padding), the RoPE position (0 at every document segment start) and doc_start, the flat
// index of the first token of its segment: token i may attend to keys doc_start[i]..i only.
// Packing (packing=true): the epoch's shuffled examples are concatenated and cut into rows of T.
//   A document cut at a row end continues in the next row as a NEW segment starting at position 0
//   (it cannot see the part in the previous row); the last token before the cut still gets its
//   true target (the document's next token) since that target is known. The final batch of an
//   epoch is padded. batches_per_epoch = ceil(total tokens / (B*T)).
// No packing (packing=false): one example per row, truncated to T (warning once per loader; the
//   last kept token is labelled with the first dropped one), padded with pad_id; pads have
//   kIgnoreLabel, position 0 and doc_start = their own index (they attend only themselves). The
//   final batch's missing rows are all padding. batches_per_epoch = ceil(examples / B).
// Shuffling is a Fisher-Yates driven by xoshiro256** seeded through splitmix64 from (seed, epoch),
// so the order is the same on every platform and standard library.
// Usage: DataLoader dl(train, B, T, true, seed); Batch b; for (dl.start_epoch(e); dl.next(b);) step(b);
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "train/data.h"

namespace lt {

// splitmix64: one step of the generator (also used as a 64-bit mixer).
uint64_t splitmix64(uint64_t& state);

// xoshiro256**, seeded from a uint64 through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  uint64_t below(uint64_t n);  // uniform in [0, n), n > 0 (Lemire's method with rejection: unbiased)

 private:
  uint64_t s_[4];
};

// Fisher-Yates: i from n-1 down to 1 swaps v[i] with v[below(i + 1)].
template <class T>
void shuffle_in_place(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

// 0..n-1 shuffled by a generator seeded from seed.
std::vector<size_t> shuffled_indices(size_t n, uint64_t seed);

struct DataSplit {
  std::vector<Example> train;
  std::vector<Example> eval;
};
// Shuffles (seed) and holds out the last round(n * eval_fraction) examples (at least 1 when
// eval_fraction > 0) as eval. eval_fraction in [0, 1); lt::Error if either side would be empty.
DataSplit split_train_eval(std::vector<Example> all, double eval_fraction, uint64_t seed);

struct Batch {
  int B = 0, T = 0;
  std::vector<int> tokens;     // (B*T) input ids
  std::vector<int> labels;     // (B*T) shifted targets, kIgnoreLabel where none
  std::vector<int> positions;  // (B*T) RoPE positions, 0 at each segment start
  std::vector<int> doc_start;  // (B*T) flat index of the first token of the token's segment
  int n_label_tokens = 0;      // labels that are not kIgnoreLabel
};

class DataLoader {
 public:
  // examples must be non-empty; B, T >= 1. pad_id fills padding; shuffle=false keeps the given
  // order every epoch (eval).
  DataLoader(std::vector<Example> examples, int B, int T, bool packing, uint64_t seed, int pad_id = 0,
             bool shuffle = true);

  // Fills out (sized on first use; later calls reuse its buffers, no allocation) with the next
  // batch of the current epoch; false at the end of the epoch (out untouched).
  bool next(Batch& out);
  // Reshuffles deterministically from (seed, epoch) and rewinds to the epoch's first batch.
  void start_epoch(int epoch);
  int epoch() const { return epoch_; }
  // Batches already returned in the current epoch.
  size_t position() const { return position_; }
  // Exact resume: the next call to next() returns what an uninterrupted run would return as batch
  // `position` of `epoch`. lt::Error if position > batches_per_epoch().
  void seek(int epoch, size_t position);
  size_t batches_per_epoch() const;
  size_t num_examples() const { return examples_.size(); }
  size_t total_tokens() const { return total_tokens_; }

 private:
  void fill_packed(Batch& out);
  void fill_rows(Batch& out);
  void locate_token(size_t offset);  // packing: set cursor_ex_/cursor_tok_ to the offset-th token of the epoch

  std::vector<Example> examples_;
  int B_, T_;
  bool packing_;
  uint64_t seed_;
  int pad_id_;
  bool shuffle_;
  size_t total_tokens_ = 0;
  int epoch_ = 0;
  size_t position_ = 0;
  std::vector<size_t> order_;   // (n) example indices of this epoch
  std::vector<size_t> cum_;     // (n+1) packing: tokens before order_[k] in this epoch
  size_t cursor_ex_ = 0;        // packing: index into order_ of the next token
  size_t cursor_tok_ = 0;       // packing: token within that example
  bool warned_truncation_ = false;
};

// How many examples keep no trained label once batched with rows of T tokens: with packing off
// an example is cut to its first T tokens (and its label targets to positions 1..T); with packing
// nothing is cut, so only examples without any trained label count.
struct LabelLoss {
  size_t examples = 0;       // examples looked at
  size_t no_labels = 0;      // examples with no trained label at all
  size_t lost_to_cut = 0;    // examples whose every trained label lies past the first T tokens
};
LabelLoss count_label_loss(const std::vector<Example>& examples, int T, bool packing);
// lt::Error naming `dataset`, T and the counts when no example keeps a trained label (training
// would report a loss of 0 and learn nothing); a warning on stderr when some examples lose all.
void check_labels_survive(const std::vector<Example>& examples, int T, bool packing, const std::string& dataset);

// The eval set as batches, in the given order (no shuffle), covering every example once.
std::vector<Batch> make_eval_batches(const std::vector<Example>& eval, int B, int T, bool packing, int pad_id = 0);

}  // namespace lt
