// Top-k gradient sparsification (the 000 seed, §5; Deep Gradient Compression's error feedback):
// per trainable tensor, each step keeps the k = ceil(fraction·n) entries of largest magnitude and
// drops the rest. With error feedback (the default) the dropped remainder is kept in a residual
// and added to the next step's gradient before selecting (acc = g + e; kept = acc on the selected
// entries; e = acc - kept); with "scale" there is no residual and the kept entries are scaled so
// their 2-norm equals the dense gradient's (the seed's compensation scaling).
// Under data parallelism each worker (rank) sparsifies its own gradient with its own residual and
// the workers exchange only (index, value) pairs, summed in worker order; one process emulates W
// workers (grad_topk_workers) by sparsifying each run of accumulation/W micro-batches on its own,
// so it computes exactly what W ranks compute. The selection is deterministic (ties: lower index
// first) and the kept indices come out ascending.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lt {

enum class TopkFeedback { Residual, Scale };
// "residual" | "scale"; lt::Error naming the key otherwise.
TopkFeedback parse_topk_feedback(const std::string& s);

struct TopkOptions {
  double fraction = 0;  // (0, 1]; 0: off
  TopkFeedback feedback = TopkFeedback::Residual;
  int workers = 1;      // residuals kept: one per emulated worker
};

// Entries kept of n: max(1, ceil(fraction·n)), at most n.
size_t topk_keep(size_t n, double fraction);

class GradTopK {
 public:
  GradTopK(const TopkOptions& o, std::vector<size_t> counts);
  const TopkOptions& options() const { return o_; }
  size_t keep(size_t i) const { return topk_keep(counts_[i], o_.fraction); }
  // Tensor i's gradient g (counts[i] floats) as worker w sends it: keep(i) indices (ascending)
  // and values; updates w's residual.
  void select(size_t i, int w, const float* g, uint32_t* idx, float* val);
  // Worker w's residual of tensor i (counts[i] floats; null with feedback "scale").
  float* residual(size_t i, int w);
  size_t residual_floats() const { return residual_.size(); }

 private:
  TopkOptions o_;
  std::vector<size_t> counts_, offset_;
  size_t total_ = 0;
  std::vector<float> residual_, acc_;
  std::vector<uint32_t> order_;
};

// g[idx[j]] += val[j] for j in order.
void scatter_add(float* g, const uint32_t* idx, const float* val, size_t k);

}  // namespace lt
