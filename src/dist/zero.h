// ZeRO data parallelism (Rajbhandari et al., 2020) over a Communicator. The trainable tensors, in
// TrainModel::params() order, are one logical flat vector of Ψ floats, cut into R contiguous
// shards of S = ceil(Ψ/R) floats (the last padded with virtual zeros); rank r owns [r·S, r·S+S).
// The tensors also form units in execution order (train/sharding.h: the embedding, each
// decoder layer, the final norm and lm_head), each a contiguous flat range; M = the largest unit.
// Each rank divides its micro-batches' summed token-loss gradients by the label-token count of the
// whole step (all ranks, all accumulation steps: all-reduced before the first backward), so a SUM
// over ranks is the gradient of the mean loss over the step's label tokens. By stage:
//   0: the model holds parameters and gradients; the step all-reduces the gradients and every
//      rank runs AdamW on everything (moments: Ψ each).
//   1: as 0, but each rank runs AdamW on its shard only (moments: S each); the parameters are then
//      all-gathered.
//   2: the model holds no gradient buffers: each unit's gradients go to a slot of M floats during
//      its backward and are reduced to their owners as soon as the unit is done (every
//      micro-batch), accumulating into a gradient shard of S floats; update, all-gather.
//   3: as 2, and the model holds no trainable parameters either: the fp32 master parameters live
//      in a shard of S floats, and each unit is gathered into a slot of M floats from its owners
//      just before it runs (forward, and again in backward) and released right after.
//   The model acquires one unit at a time (a tied embedding and the final norm take turns at the
//   loss; the lm_head part of the embedding's gradient is reduced right after the loss, its
//   embedding part at the end), so one slot of M floats of each kind suffices; with overlap
//   (ZeroOptions) a second slot, of M_L floats (the largest decoder layer), holds a unit being
//   prefetched or reduced (one larger than that, an embedding or an lm_head, waits instead). So
//   per rank, in floats, with X = M_L with overlap and 0 without: gradients S + M + X (stages
//   2-3), parameters S + M + X (stage 3).
// Clipping uses the global norm (sum of squares of each shard, all-reduced in double). AdamW is
// adamw_step (train/optimizer.h) on the pieces of the shard, so a step equals one rank's step.
// Not done: sharding the frozen weights of a LoRA or QLoRA model (every rank holds them whole).
// The engine's own buffers (moments, gradient shard, master shard, slots, communication bucket)
// come from plan_zero_state() and live in its Arenas, or, with offload to disk, in a file
// (dist/offload.h).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/memory_plan.h"
#include "dist/comm.h"
#include "train/optimizer.h"
#include "train/sharding.h"
#include "train/train_config.h"
#include "train/train_model.h"

namespace lt {

class OffloadFile;

enum class OptimizerOffload { None, Disk };
// "none" | "disk"; lt::Error naming the key otherwise.
OptimizerOffload parse_optimizer_offload(const std::string& s);

struct ZeroOptions {
  int stage = 0;                                      // 0 | 1 | 2 | 3
  // Communication overlapped with computation (nonblocking collectives): stages 0-1 all-reduce
  // each unit's gradients as soon as its backward ends on the step's last micro-batch; stages 2-3
  // reduce a unit's gradients while the next unit's backward runs (a second gradient slot);
  // stage 3 gathers the next unit while one runs (a second parameter slot: prefetch). Off by
  // default: on a CPU whose cores all compute, measured slower than blocking collectives (nothing
  // is left to progress them), and MPI's nonblocking all-reduce allocates temporaries of the
  // message's size that the plan does not count.
  bool overlap = false;
  OptimizerOffload offload = OptimizerOffload::None;  // disk: moments (and stage 3's master shard) in a file
  std::string offload_dir;                            // where the offload file goes (disk)
};

// The flat vector over the trainable tensors and its shards.
struct FlatLayout {
  std::vector<size_t> offset;  // (P) first flat element of each tensor
  std::vector<size_t> count;   // (P) elements of each tensor
  size_t total = 0;            // Ψ
  int ranks = 1;
  size_t shard = 0;            // S = ceil(Ψ / R)
  size_t begin(int r) const { return std::min(total, size_t(r) * shard); }
  size_t end(int r) const { return std::min(total, size_t(r + 1) * shard); }
};
FlatLayout flat_layout(std::span<const size_t> counts, int ranks);

// Elements a collective moves at once: the bucket holds R of them (min(S, comm_bucket_elems()/R)).
size_t zero_bucket_elems(const FlatLayout& l);

// The trainable tensors of a (single-process) training plan, in params() order, with their units.
struct ZeroTensors {
  std::vector<size_t> counts;  // floats per tensor
  std::vector<int> units;      // trainable_unit() per tensor
  size_t total = 0;            // Ψ
  size_t unit_max = 0;         // M: the largest unit, in floats
  size_t layer_max = 0;        // M_L: the largest decoder-layer unit (the overlap slot's size)
  size_t tied_floats = 0;      // a trained embedding that is also lm_head: its floats (reduced twice), else 0
  int n_units = 0;             // n_layers + 2 (empty ones included)
};
ZeroTensors zero_tensors(const MemoryPlan& single_process, int n_layers);

// The engine's own buffers on one rank (moments, gradient shard and slots, master shard and slots,
// bucket). With offload to disk the file-backed ones are not listed: see zero_offloaded_bytes.
MemoryPlan plan_zero_state(const ZeroTensors& t, int ranks, const ZeroOptions& o);
// The sizes of the slots of each kind, in floats: {M, M_L} with overlap, else {M}.
std::vector<size_t> zero_slot_floats(const ZeroTensors& t, const ZeroOptions& o);
size_t zero_offloaded_bytes(size_t total, int ranks, const ZeroOptions& o);

// One rank's whole plan: the single-process training plan without its AdamW moments, without its
// gradients (stages 2-3) and trainable parameters (stage 3), plus plan_zero_state. Per category,
// against one process (Ψ, S, M, X as above; each buffer rounded up to 64 bytes, as in every arena):
//   OptimizerState  stage 0: 2·Ψ·4     stages 1-3: 2·S·4            (disk offload: 0)
//   Grads           stages 0-1: Ψ·4    stages 2-3: (S + M + X)·4
//   TrainableParams stages 0-2: Ψ·4    stage 3: (S + M + X)·4       (disk offload: (M + X)·4)
//   Workspace       + the bucket R·K·4 (stages 0-2)
MemoryPlan plan_zero_rank(const MemoryPlan& single_process, int n_layers, int ranks, const ZeroOptions& o);

// Trainable floats Ψ of a training plan (its TrainableParams buffers).
size_t trainable_floats(const MemoryPlan& plan);

// `leantune plan --ranks N --zero S`: one process's bytes per category against one rank's
// (plan_zero_rank), the sharded buffers with their formulas, and the bytes offloaded to disk.
std::string format_zero_plan(const MemoryPlan& single_process, int n_layers, int ranks, const ZeroOptions& o);

// The ZeRO options of a config: zero_stage (-1 counts as 0), offload_optimizer, offload_dir, zero_overlap.
ZeroOptions zero_options(const TrainConfig& config);

// ZeRO as the sharding strategy of a training run (train/sharding.h): the engine's buffers, the
// units' collectives during a pass, the sharded optimizer step, sharded checkpoints
// (dist/shard_checkpoint.h) and each rank's ledger-rank<r>.json.
class ZeroOptimizer final : public ShardingStrategy {
 public:
  // t: the trainable tensors (zero_tensors of the single-process plan). Allocates the engine's
  // buffers. Build the model next with this as its strategy (stage 3 fills the master shard
  // through load_buffer / loaded); the model's UnitStore attach()es its params.
  ZeroOptimizer(const ZeroTensors& t, Communicator& comm, const ZeroOptions& o);
  ~ZeroOptimizer() override;
  // The model's trainable tensors (names, decay; p and g where the model holds them). lt::Error
  // when they differ from the tensors the engine was built for, or between ranks.
  void attach(std::vector<TrainParam>& params) override;

  // One optimizer step over the accumulated gradients: reduce (stages 0-1), global norm, clip
  // (max_grad_norm > 0), AdamW at lr on this rank's part, gather (stages 1-2). frozen / lr_factor
  // per tensor (staged unfreezing) as in ParamGroup. Returns the global gradient norm before
  // clipping; lt::Error (on every rank) when it is not finite. Stages 0-1 leave the model's
  // gradients as they are (call zero_grads()); stages 2-3 zero the gradient shard.
  // fp16 (dynamic loss scaling): the gradients are first multiplied by 1/grad_scale; with
  // skip_nonfinite a non-finite global norm skips the update on every rank (they all see the same
  // norm) and is returned, for the LossScaler to back off.
  float step(const AdamWOptions& ao, float lr, int step, float max_grad_norm, float grad_scale = 1.0f,
             bool skip_nonfinite = false);
  // Per tensor, as ParamGroup::frozen / lr_factor.
  void set_frozen(size_t i, bool frozen, float lr_factor) override { frozen_[i] = frozen; lr_factor_[i] = lr_factor; }

  // ShardingStrategy (stage 2: gradients; stage 3: parameters and gradients; always the moments)
  bool holds_params() const override { return opts_.stage == 3; }
  bool holds_grads() const override { return opts_.stage >= 2; }
  bool holds_moments() const override { return true; }
  // step() with skip_nonfinite: a non-finite global norm is returned as !finite for the caller.
  OptimizerStepResult optimizer_step(const OptimizerStepArgs& a) override;
  void save_checkpoint(const std::string& out_dir, const TrainerState& state, const TrainedModelInfo& info,
                       const TrainHooks& hooks) override;
  TrainerState load_checkpoint(const std::string& path, const std::string& out_dir) override;
  TrainedTensorFn trained_tensors() override;  // stage 3: gathered unit by unit, whole on rank 0
  const MemoryPlan* rank_plan() const override { return &rank_plan_; }
  const Arenas* engine_arenas() const override { return &arenas_; }
  std::string describe() const override;
  void write_rank_outputs(const std::string& out_dir, const Arenas& model, size_t fixed_bytes,
                          double comm_bytes_per_step) override;
  // The per-rank plan (plan_zero_rank) that rank_plan() returns.
  void set_rank_plan(MemoryPlan p) { rank_plan_ = std::move(p); }
  float* load_buffer(size_t i, size_t n) override;
  void loaded(size_t i) override;
  float* acquire_params(int u, int next) override;
  void release_params(int u) override;
  float* acquire_grads(int u) override;
  void release_grads(int u) override;
  void grads_ready(int u) override;
  // Stages 0-1 with overlap: whether the micro-batch about to run is the step's last (its gradients
  // are then all-reduced unit by unit during its backward).
  void set_last_micro_batch(bool last) override { last_micro_batch_ = last; }
  // Top-k sparsification (train/grad_topk.h), stages 0-1 without overlap: each rank sparsifies its
  // gradient with its own residual and the ranks all-gather (value, index) pairs instead of
  // all-reducing the dense gradient; every rank then adds them up in rank order.
  void set_grad_topk(const TopkOptions& o) override;
  // Completes every collective in flight (reductions into the shard, prefetches).
  void drain();
  // How the units' collectives ran: parameters found prefetched / gathered on demand (stage 3),
  // gradient reductions started while the backward went on / run blocking (all stages).
  struct OverlapStats {
    uint64_t prefetched = 0, gathered = 0, reductions_overlapped = 0, reductions_blocking = 0;
  };
  const OverlapStats& overlap_stats() const { return ostats_; }
  // Bytes this rank sent all-gathering updated parameters (stages 1-2), per step() so far: ZeRO's
  // own traffic, the same with dense or sparse gradients (ledger-rank<r>.json reports it apart).
  double param_gather_bytes_per_step() const { return steps_ ? double(gather_bytes_) / steps_ : 0.0; }

  const FlatLayout& layout() const { return layout_; }
  const ZeroTensors& tensors() const { return tensors_; }
  const ZeroOptions& options() const { return opts_; }
  Communicator& comm() override { return comm_; }
  const Arenas& arenas() const { return arenas_; }
  size_t offloaded_bytes() const;
  size_t unit_begin(int u) const { return unit_begin_[size_t(u)]; }
  size_t unit_end(int u) const { return unit_end_[size_t(u)]; }
  int units() const { return int(unit_begin_.size()); }
  // This rank's part of the flat vector [begin, end) (stage 0: everything) and its moments /
  // master parameters there (m, v: (end-begin) floats; master: null before stage 3).
  size_t own_begin() const;
  size_t own_end() const;
  float* moment1() { return m_; }
  float* moment2() { return v_; }
  float* master() { return master_; }
  // Copies flat elements [lo, hi) of the parameters into out / from in: the model's (stages 0-2);
  // at stage 3 the master shard's, so read only this rank's part and write what of it in holds.
  void read_params(float* out, size_t lo, size_t hi) const;
  // fn(pointer, count) over the model's parameter memory holding flat [lo, hi), in order (stages 0-2).
  void visit_params(size_t lo, size_t hi, const std::function<void(const float*, size_t)>& fn) const;
  void write_params(const float* in, size_t lo, size_t hi);

 private:
  // fn(tensor index, flat lo, flat hi, pointer offset into the tensor) over the tensors meeting [lo, hi).
  template <class F> void for_pieces(size_t lo, size_t hi, F&& fn) const;
  void reduce_gradients();
  void reduce_sparse_gradients();  // grad_topk
  void gather_parameters();
  float* grad_at(size_t i, size_t off);     // the gradient AdamW reads for element off of tensor i
  float* param_at(size_t i, size_t off);    // the parameter AdamW updates
  // A slot of M floats: free, in use by a unit, or busy with a unit's collective in flight.
  struct Slot {
    float* data = nullptr;
    size_t capacity = 0;  // floats
    int unit = -1;
    enum State { Free, InUse, Prefetching, Reducing } state = Free;
    std::vector<Communicator::Handle> handles;  // capacity R: one per owner's piece
    uint64_t since = 0;                         // when it became busy (oldest first)
  };
  Slot* slot_of(std::vector<Slot>& slots, int u, Slot::State st);
  Slot* free_slot(std::vector<Slot>& slots, size_t need);
  void gather_unit(Slot& s, int u, bool nonblocking);
  void finish(Slot& s);  // waits for its collectives; a reduction is added into the gradient shard

  std::vector<TrainParam>* params_ = nullptr;
  MemoryPlan rank_plan_;
  std::vector<float> gathered_;  // stage 3, rank 0: the trained parameters, gathered at the end
  Communicator& comm_;
  ZeroOptions opts_;
  ZeroTensors tensors_;
  FlatLayout layout_;
  std::vector<size_t> unit_begin_, unit_end_;  // per unit: its flat range
  Arenas arenas_;
  std::unique_ptr<OffloadFile> offload_;
  std::vector<bool> frozen_;
  std::vector<float> lr_factor_;
  std::vector<bool> decay_;
  uint64_t gather_bytes_ = 0;
  int steps_ = 0;
  float *m_ = nullptr, *v_ = nullptr, *grad_shard_ = nullptr, *master_ = nullptr, *bucket_ = nullptr;
  std::vector<Slot> param_slots_, grad_slots_;  // zero_slot_floats each (stage 3 / stages 2-3)
  uint64_t busy_clock_ = 0;
  OverlapStats ostats_;
  bool last_micro_batch_ = true;
  std::vector<Communicator::Handle> overlap_handles_;  // stages 0-1: per tensor, its all-reduce
  std::vector<bool> reduced_;                          // stages 0-1: tensors already all-reduced this step
  size_t bucket_elems_ = 0;
  std::optional<GradTopK> topk_;
  std::vector<float> topk_send_, topk_recv_;  // one tensor's k values and k indices (bits), and R of those
};

// The ZeRO strategy of a run: the engine for the trainable tensors of `single_process` (the
// single-process training plan) on comm's ranks, with its per-rank plan (plan_zero_rank).
std::unique_ptr<ZeroOptimizer> make_zero_strategy(const MemoryPlan& single_process, int n_layers, Communicator& comm,
                                                  const ZeroOptions& o);

}  // namespace lt
