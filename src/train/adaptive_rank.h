// Adaptive LoRA rank (lora_rank_policy: adaptive): AdaLoRA's budget schedule and importance scores
// applied to plain LoRA factors. Every adapted module m (a lora_A (r, in) / lora_B (out, r) pair of
// trainable tensors) has r rank components: component i is row i of A and column i of B. Each
// optimizer step updates a per-entry importance of A and B from the step's gradient g and the
// updated weight w (as PEFT's AdaLoRA RankAllocator, after optimizer.step()):
//   sensitivity (AdaLoRA): I = |w·g|, Ī ← β1·Ī + (1−β1)·I, U ← β2·U + (1−β2)·|I − Ī|, entry score Ī·U
//   variance (the 004 seed): ḡ ← β1·ḡ + (1−β1)·g, q ← β2·q + (1−β2)·g², entry score max(q − ḡ², 0)
// and a component's score is the mean of its A row's entry scores plus the mean of its B column's.
// The budget (the total rank summed over modules) is AdaLoRA's: init_r·M through step tinit, then
// b(t) = ⌊(init_r − target_r)·M·(1 − (t − tinit)/(T − tfinal − tinit))³⌋ + target_r·M, applied every
// delta_t steps, and target_r·M from step T − tfinal + 1 on. Pruning is monotone: when the budget is
// below the active count, the lowest-scoring active components (ties: lower module, then lower
// index) are masked until the count equals the budget exactly, never a module's last component
// (PEFT's rank_pattern cannot hold 0). A masked component's A row, B column, their gradients and
// AdamW moments are zeroed after every step; zero in both factors, it gets zero gradients, so it
// stays zero. The saved adapter keeps only active components (train/run_outputs.cpp). The EMAs and
// the masks are memory-plan rows (TrainModelOptions::adaptive_rank), reached through each lora_A's
// TrainParam::rank.
// Release: once the budget is final (the first update at step T − tfinal or later) the allocator
// compacts the OptimizerState arena in place, in the plan's row order: the AdamW moments of each A
// keep only active rows ((active, in)), of each B only active columns ((out, active)), the EMAs
// (never read again) go, every other row moves down whole; the pages past the new end go back to
// the OS (Arenas::release_tail). From then on AdamW runs over the active rows of A and columns of B
// as groups (optimizer_groups): per element, so the bits are those of the masked run. A, B and
// their gradients keep rank r: the matrix products read them, and a smaller shape would change
// oneDNN's kernels and the bits. Checkpoints after release hold the masks and the compacted
// moments (moment_shape); a resume loads the masks, releases, then reads the moments.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory_plan.h"
#include "io/tensor_set.h"
#include "train/optimizer.h"

namespace lt {

struct TrainParam;  // train/train_model.h


enum class RankImportance { Sensitivity, Variance };
// "sensitivity" | "variance"; lt::Error naming the key otherwise.
RankImportance parse_rank_importance(const std::string& s);

struct AdaptiveRankOptions {
  int init_r = 8;        // lora_r: every module's rank at the start
  int target_r = 4;      // lora_target_r: the final average rank per module
  int tinit = 0;         // lora_rank_tinit: steps before any pruning
  int tfinal = 0;        // lora_rank_tfinal: last steps at the final budget
  int delta_t = 1;       // lora_rank_delta_t: steps between pruning events in the window
  int total_steps = 1;   // the run's optimizer steps
  double beta1 = 0.85, beta2 = 0.85;  // the importance EMAs
  RankImportance importance = RankImportance::Sensitivity;
  bool release = true;   // compact and release the optimizer state at the final budget (tests: false)
};

// An upper bound on the OptimizerState arena's bytes after the release (pages), from `plan` (a run
// at init_r with adaptive rank's rows): every other row whole, no EMAs, and the moments of the budget
// target_r·M placed where they cost most: one component per module, the rest in the widest modules
// (at most init_r each), each moment row padded to the arena's alignment. 0 when `plan` has no
// adaptive rank rows.
size_t released_optimizer_bound(const MemoryPlan& plan, int init_r, int target_r);

// What the release did (ledger.json's "adaptive_rank"): the OptimizerState arena's resident bytes
// (mincore) just before and just after, the bytes it then holds (accounted) and those returned.
struct RankReleaseStats {
  bool released = false;
  int step = 0;  // the optimizer step after which it happened (0: not released)
  size_t resident_before = 0, resident_after = 0, kept_bytes = 0, released_bytes = 0;
  std::string skipped;  // why it was not released, when it will not be
};

// The total-rank budget after optimizer step `step` (1-based) of M modules; *prune: whether this
// step is a pruning event.
int rank_budget(const AdaptiveRankOptions& o, int modules, int step, bool* prune);

// One adapted module: its A and B tensors (indices into the trainable tensors) and which of its r
// components are active.
struct RankModule {
  std::string name;        // the PEFT module key, "base_model.model.model.layers.0.self_attn.q_proj"
  size_t a = 0, b = 0;     // params index of lora_A (r, in) and lora_B (out, r)
  int r = 0, in = 0, out = 0;
  std::vector<uint8_t> keep;  // r flags
  int active() const;
};

class RankAllocator {
 public:
  // Pairs every "X.lora_A.weight" of params with its "X.lora_B.weight"; lt::Error when one is
  // missing, when ranks differ from init_r, or when the schedule does not fit total_steps.
  RankAllocator(const AdaptiveRankOptions& o, std::vector<TrainParam>& params);
  // After optimizer step `step` (1-based), with the step's gradients still in place: the
  // importance, the pruning the schedule asks for, and the masks applied. Returns whether it pruned.
  bool update(int step);
  // Zeroes every masked component's A row / B column in parameters, gradients and (before the
  // release) moments.
  void apply_masks();
  // The OptimizerState arena and its rows in plan order (category_plan), for the release; without
  // it nothing is released. Rows other than AdamW moments and adaptive rank's (grad_topk's) keep
  // the arena as it is (RankReleaseStats::skipped).
  void set_arena(Arenas& arenas, const MemoryPlan& optimizer_rows);
  // Compacts the arena and returns its tail (see the top of this file). Once.
  void release(int step);
  bool released() const { return stats_.released; }
  const RankReleaseStats& release_stats() const { return stats_; }
  // AdamW's groups: `full` (one per trainable tensor, params order) until the release, then with
  // each A and B split into the runs of active components over the compacted moments.
  std::vector<ParamGroup> optimizer_groups(const std::vector<ParamGroup>& full) const;
  // The shape of trainable tensor i's AdamW moments as they are held now (compacted after release).
  std::vector<int64_t> moment_shape(size_t i) const;
  size_t moment_floats(size_t i) const;
  // Component scores (module-major, r per module) from the current EMAs.
  std::vector<double> scores() const;
  int active_total() const;
  const std::vector<RankModule>& modules() const { return modules_; }
  const AdaptiveRankOptions& options() const { return o_; }
  // LoRA A/B floats at the current ranks, and at init_r.
  size_t active_lora_floats() const;
  size_t init_lora_floats() const;
  // Checkpoint state: "rank_mask.<module>" (r floats, 1 active / 0 masked) and "rank_ema1.<param>",
  // "rank_ema2.<param>" (the two EMAs of each A and B). Valid while the allocator lives.
  std::vector<TensorInfo> state_tensors();
  // Reads the state written by state_tensors (a checkpoint without it: the state stays fresh) and
  // re-applies the masks. lt::Error naming a tensor with the wrong shape.
  void load_state(const TensorSet& ts);

 private:
  void update_importance(size_t param, float* e1, float* e2);
  size_t entries(size_t module) const;  // A's and B's entries: r·(in + out)
  void prune_to(int budget);
  void compact_moment(size_t k, bool a, const float* src, float* dst) const;

  Arenas* arenas_ = nullptr;
  MemoryPlan rows_;               // the OptimizerState rows, in order
  std::vector<int> role_;         // per trainable tensor: 2k (module k's A), 2k + 1 (its B), or -1
  RankReleaseStats stats_;

  AdaptiveRankOptions o_;
  std::vector<TrainParam>* params_;
  std::vector<RankModule> modules_;
  // per module, the planned buffers its lora_A's TrainParam::rank points at: the EMAs of A's then B's
  // entries (r·in + out·r each) and keep as floats (r), the checkpoint's tensors
  struct State {
    float *ema1, *ema2, *mask;
  };
  std::vector<State> state_;
};

}  // namespace lt
