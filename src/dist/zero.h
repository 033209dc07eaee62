// ZeRO data parallelism (Rajbhandari et al., 2020) over a Communicator. The trainable tensors, in
// TrainModel::params() order, are one logical flat vector of Ψ floats, cut into R contiguous
// shards of S = ceil(Ψ/R) floats (the last padded with virtual zeros); rank r owns [r·S, r·S+S).
// Each rank scales its micro-batch gradients by 1/(R·accumulation), so a SUM over ranks is the
// global mean gradient. One optimizer step, by stage:
//   0: all-reduce the gradients; every rank runs AdamW on everything (moments: Ψ each).
//   1: all-reduce the gradients; each rank runs AdamW on its shard only (moments: S each), then the
//      parameters are all-gathered.
//   2: the gradients are reduce-scattered to their owners (a gradient shard of S floats), update,
//      all-gather.
//   3: as 2, and the fp32 master parameters live in a shard of S floats too; the model's full
//      parameters are a gather buffer refilled by the all-gather before the next forward.
// Clipping uses the global norm (sum of squares of each shard, all-reduced in double). AdamW is
// adamw_step (train/optimizer.h) on the pieces of the shard, so a step equals one rank's step.
// What this engine does not do (yet): the model's full gradient and parameter buffers stay
// allocated (the reduce-scatter source and the all-gather destination); layer-by-layer
// gather/release and overlap with the backward need per-layer hooks inside TrainModel.
// The engine's own buffers (moments, gradient shard, master shard, communication bucket) come from
// plan_zero_state() and live in its Arenas, or, with offload to disk, in a file (dist/offload.h).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/memory_plan.h"
#include "dist/comm.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace lt {

class OffloadFile;

enum class OptimizerOffload { None, Disk };
// "none" | "disk"; lt::Error naming the key otherwise.
OptimizerOffload parse_optimizer_offload(const std::string& s);

struct ZeroOptions {
  int stage = 0;                                      // 0 | 1 | 2 | 3
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

// The engine's own buffers on one rank (moments, gradient shard, master shard, bucket), for Ψ
// trainable floats. With offload to disk the file-backed ones are not listed: see
// zero_offloaded_bytes.
MemoryPlan plan_zero_state(size_t total, int ranks, const ZeroOptions& o);
size_t zero_offloaded_bytes(size_t total, int ranks, const ZeroOptions& o);

// One rank's whole plan: the single-process training plan without its AdamW moments (the model
// does not allocate them under ZeRO) plus plan_zero_state. Per category, against one process:
//   OptimizerState  stage 0: 2·Ψ·4     stages 1-3: 2·S·4            (disk offload: 0)
//   Grads           model's Ψ·4        + stages 2-3: S·4 (the shard the optimizer reads)
//   TrainableParams model's Ψ·4        + stage 3: S·4 (master shard; disk offload: in the file)
//   Workspace       + the bucket R·K·4
// (each buffer rounded up to 64 bytes, as in every arena).
MemoryPlan plan_zero_rank(const MemoryPlan& single_process, int ranks, const ZeroOptions& o);

// Trainable floats Ψ of a training plan (its TrainableParams buffers).
size_t trainable_floats(const MemoryPlan& plan);

// `leantune plan --ranks N --zero S`: one process's bytes per category against one rank's
// (plan_zero_rank), the sharded buffers with their formulas, and the bytes offloaded to disk.
std::string format_zero_plan(const MemoryPlan& single_process, int ranks, const ZeroOptions& o);

class ZeroOptimizer {
 public:
  // params: the model's trainable tensors (p and g used; m and v ignored). Allocates the engine's
  // buffers; with stage 3 copies this rank's part of the parameters into its master shard.
  ZeroOptimizer(std::vector<TrainParam>& params, Communicator& comm, const ZeroOptions& o);
  ~ZeroOptimizer();

  // One optimizer step over the accumulated gradients: reduce, global norm, clip (max_grad_norm >
  // 0), AdamW at lr on this rank's part, gather. frozen / lr_factor per tensor (staged unfreezing)
  // as in ParamGroup. Returns the global gradient norm before clipping; lt::Error (on every rank)
  // when it is not finite. The model's gradients are left as they are (call zero_grads()).
  float step(const AdamWOptions& ao, float lr, int step, float max_grad_norm);
  // Per tensor, as ParamGroup::frozen / lr_factor.
  void set_frozen(size_t i, bool frozen, float lr_factor) { frozen_[i] = frozen; lr_factor_[i] = lr_factor; }

  const FlatLayout& layout() const { return layout_; }
  const ZeroOptions& options() const { return opts_; }
  Communicator& comm() { return comm_; }
  const Arenas& arenas() const { return arenas_; }
  size_t offloaded_bytes() const;
  // This rank's part of the flat vector [begin, end) (stage 0: everything) and its moments /
  // master parameters there (m, v: (end-begin) floats; master: null before stage 3).
  size_t own_begin() const;
  size_t own_end() const;
  float* moment1() { return m_; }
  float* moment2() { return v_; }
  float* master() { return master_; }
  // Copies flat elements [lo, hi) of the model's parameters into out / from in.
  void read_params(float* out, size_t lo, size_t hi) const;
  void write_params(const float* in, size_t lo, size_t hi);
  // Stage 3: refreshes the master shard from the model's parameters (after loading them).
  void load_master_from_params();

 private:
  // fn(tensor index, flat lo, flat hi, pointer offset into the tensor) over the tensors meeting [lo, hi).
  template <class F> void for_pieces(size_t lo, size_t hi, F&& fn) const;
  void reduce_gradients();
  void gather_parameters();
  float* grad_at(size_t i, size_t off);     // the gradient AdamW reads for element off of tensor i
  float* param_at(size_t i, size_t off);    // the parameter AdamW updates

  std::vector<TrainParam>& params_;
  Communicator& comm_;
  ZeroOptions opts_;
  FlatLayout layout_;
  Arenas arenas_;
  std::unique_ptr<OffloadFile> offload_;
  std::vector<bool> frozen_;
  std::vector<float> lr_factor_;
  float *m_ = nullptr, *v_ = nullptr, *grad_shard_ = nullptr, *master_ = nullptr, *bucket_ = nullptr;
  size_t bucket_elems_ = 0;
};

}  // namespace lt
