// AdamW over flat parameter groups, global-norm gradient clipping and a finiteness check.
// adamw_step is torch.optim.AdamW's single-tensor algorithm (decoupled weight decay), computed the
// way PyTorch computes it, so a step here and a step there agree to a few ulps (10 steps on
// 4099 elements: 99.6% bit-identical, at most 3 ulps apart; torch's SIMD lerp uses an FMA):
//
//   p  *= 1 - lr·wd                               (only for groups with weight_decay)
//   m   = β1·m + (1-β1)·g
//   v   = β2·v + (1-β2)·g²
//   bc1 = 1 - β1^t,  bc2 = 1 - β2^t               (t = step, 1-based; scalars in double)
//   p  -= (lr / bc1) · m / (sqrt(v) / sqrt(bc2) + ε)
//
// lr is per call (the schedule's value, train/schedule.h) times the group's lr_factor.
// clip_grad_norm is torch.nn.utils.clip_grad_norm_ (norm 2) with the sum of squares in double.
// All loops are plain element loops with OpenMP; nothing allocates.
#pragma once
#include <cstddef>
#include <span>

namespace lt {

// One contiguous trainable tensor with its gradient and AdamW moments (n floats each).
// The trainer carves these out of its TrainableParams / Grads / OptimizerState arenas.
struct ParamGroup {
  float* param = nullptr;  // (n)
  float* grad = nullptr;   // (n); may be null when frozen
  float* m = nullptr;      // (n) first moment, zero-initialised before step 1
  float* v = nullptr;      // (n) second moment, zero-initialised before step 1
  size_t n = 0;
  float lr_factor = 1.0f;     // multiplies the step's lr (staged unfreezing, per-layer lr)
  bool weight_decay = true;   // false for biases / norms, as the usual no_decay list
  bool frozen = false;        // staged unfreezing: skipped by every function here
  // Top-k sparsified gradients with error feedback (train/grad_topk.h): per element, the steps
  // since its gradient was last nonzero. When set, a nonzero g that carries the residual of a
  // steps counts g²/(a+1) into v (the mean square per step it stands for, not that of one
  // step's worth of gradient: without it v grows ~1/k and the step shrinks ~sqrt(k)); a is
  // then reset to 0, and a zero g adds 1 to a. Null: plain AdamW.
  float* age = nullptr;
};

// PyTorch's AdamW defaults. The learning rate is not here: it comes from the schedule each step
// (torch's default base lr is 1e-3; transformers.Trainer's is 5e-5).
// Doubles, like the Python floats torch keeps them in, so derived scalars (1-β1, ...) round alike.
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// One AdamW update of every non-frozen group with learning rate lr·group.lr_factor (with
// ParamGroup::age: the second moment of a sparsified gradient, as described there).
// `step` is the 1-based count of optimizer steps including this one (torch's state['step']).
void adamw_step(std::span<ParamGroup> groups, const AdamWOptions& opts, float lr, int step);

// The 2-norm over the gradients of every non-frozen group (as if concatenated), returned before
// clipping. When it is finite and max_norm / (norm + 1e-6) < 1, every such gradient is multiplied
// by that coefficient (torch.nn.utils.clip_grad_norm_). A non-finite norm leaves the gradients
// untouched: check grads_finite (or the returned value) and skip the step. The sum is accumulated
// in double in a fixed order, so the result is reproducible for a given OpenMP thread count.
float clip_grad_norm(std::span<ParamGroup> groups, float max_norm);

// True when every gradient element of every non-frozen group is finite (no inf, no NaN).
bool grads_finite(std::span<const ParamGroup> groups);

}  // namespace lt
