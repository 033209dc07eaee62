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
// AdamW after error feedback: an entry sent once in s steps carries s steps' worth of gradient, so
// its square is ~s times the dense one's per step and v grows ~1/k: the update shrinks ~sqrt(k)
// (measured: the held-out loss +2.5% at k = 15%). With variance_correction (the default with
// error feedback) each trainable element keeps an age (steps since its summed sparse gradient was
// last nonzero) and AdamW counts g²/(age+1) into v (train/optimizer.h, ParamGroup::age).
// The residuals ("topk_residual.<w>.<name>", W per tensor) and ages ("topk_age.<name>") are
// OptimizerState rows of the training plan (plan_training), allocated up front with the model.
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
  bool variance_correction = true;  // with Residual: ages for AdamW's second moment
  bool residuals() const { return fraction > 0 && feedback == TopkFeedback::Residual; }
  bool ages() const { return residuals() && variance_correction; }
};

// The plan rows of tensor `name` (n floats): its residuals, one per worker, and its age.
std::string topk_residual_name(int worker, const std::string& name);
std::string topk_age_name(const std::string& name);

// Where a GradTopK keeps its state: residual[w][i] (n_i floats each; empty with "scale") and
// age[i] (empty without ages), in the model's planned buffers.
struct TopkBuffers {
  std::vector<std::vector<float*>> residual;
  std::vector<float*> age;
};

// Entries kept of n: max(1, ceil(fraction·n)), at most n.
size_t topk_keep(size_t n, double fraction);

class GradTopK {
 public:
  // The state in buffers of its own (zeroed), or in planned ones (zero-filled by their arena).
  GradTopK(const TopkOptions& o, std::vector<size_t> counts);
  GradTopK(const TopkOptions& o, std::vector<size_t> counts, TopkBuffers buffers);
  const TopkOptions& options() const { return o_; }
  size_t keep(size_t i) const { return topk_keep(counts_[i], o_.fraction); }
  // Tensor i's gradient g (counts[i] floats) as worker w sends it: keep(i) indices (ascending)
  // and values; updates w's residual.
  void select(size_t i, int w, const float* g, uint32_t* idx, float* val);
  // Worker w's residual of tensor i (counts[i] floats; null with feedback "scale").
  float* residual(size_t i, int w);
  // Tensor i's ages (counts[i] floats; null without ages).
  float* age(size_t i) { return buf_.age.empty() ? nullptr : buf_.age[i]; }

 private:
  TopkOptions o_;
  void init();  // checks the options, sizes the scratch
  std::vector<size_t> counts_;
  size_t total_ = 0;
  TopkBuffers buf_;
  std::vector<float> own_;  // the state when no buffers were given
  std::vector<float> acc_;
  std::vector<uint32_t> order_;
};

// g[idx[j]] += val[j] for j in order.
void scatter_add(float* g, const uint32_t* idx, const float* val, size_t k);

}  // namespace lt
