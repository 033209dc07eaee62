// UnitStore: where TrainModel's trainable tensors are while a pass runs. The model calls one hook
// before and one after each unit it runs (train/sharding.h: unit 0 the embedding, l+1 decoder
// layer l, L+1 the final norm and lm_head), saying for which pass:
//   Forward   the unit's parameters are read;
//   Loss      lm_head + cross-entropy: parameters read and gradients written, and the unit's
//             gradients are not complete yet (a tied embedding's lm_head part comes first);
//   Backward  parameters read (unless the unit declared its backward reads none: the embedding)
//             and gradients written; after it the unit's gradients of this micro-batch are complete.
// The store owns the ShardingStrategy and does the bookkeeping the model used to do: it points the
// model's tensor pointers (every pointer aimed at a tensor, registered at construction) into the
// buffers the strategy hands out and back at null when they are released, records the order a pass
// acquires units in so the next pass can pass a prefetch hint, and releases a unit lazily — at the
// next hook for another unit or at the end of the pass — so that consecutive hooks for one unit
// (the final norm's forward, the loss, the final norm's backward) hold it once.
// Without a strategy (or with one that holds nothing) every hook is a no-op.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "train/sharding.h"

namespace lt {

enum class Pass { Forward, Loss, Backward };

class UnitStore {
 public:
  explicit UnitStore(std::unique_ptr<ShardingStrategy> strategy = nullptr);
  ~UnitStore();
  UnitStore(const UnitStore&) = delete;
  UnitStore& operator=(const UnitStore&) = delete;

  ShardingStrategy* strategy() { return strategy_.get(); }
  bool holds_params() const { return strategy_ && strategy_->holds_params(); }
  bool holds_grads() const { return strategy_ && strategy_->holds_grads(); }

  // ---- Construction, by the model, trainable tensor by tensor in params() order.
  // Where tensor i (n floats) is filled: `own` (the model's buffer), or the strategy's load buffer
  // when it holds the parameters.
  float* load_buffer(size_t i, size_t n, float* own);
  // The model's pointers aimed at tensor i's parameter and gradient (called again for an alias:
  // a tied embedding is also lm_head).
  void add_pointers(size_t i, float** param, float** grad);
  // Tensor i is filled: a strategy holding the parameters takes it, and the pointers go null.
  void loaded(size_t i);
  // Every tensor registered: the units' ranges (lt::Error when a unit's tensors are not
  // contiguous), then the strategy's attach().
  void attach(std::vector<TrainParam>& params, int n_units);
  // Unit u's backward reads no parameters (the embedding's: a scatter of gradients).
  void set_backward_reads_params(int u, bool reads) { backward_reads_params_[size_t(u)] = reads; }

  // ---- A pass.
  void begin_pass(bool backward);
  void before(int u, Pass p);
  void after(int u, Pass p);
  void end_pass();

 private:
  struct Held {
    int unit = -1;
    bool params = false, grads = false, complete = false;
  };
  void flush();  // releases the unit the last after() left held
  void bind(int u, float* base, bool grads);
  void acquire_params(int u);
  bool empty(int u) const { return first_[size_t(u)] == end_[size_t(u)]; }

  std::unique_ptr<ShardingStrategy> strategy_;
  std::vector<TrainParam>* params_ = nullptr;
  std::vector<std::vector<float**>> pref_, gref_;  // per trainable tensor: the pointers aimed at p / g
  std::vector<size_t> first_, end_;                // per unit: its tensors [first, end) in params
  std::vector<bool> backward_reads_params_;        // per unit
  Held held_;
  // the order a pass acquires units' parameters (index: backward), recorded for prefetch hints
  std::vector<int> order_[2], seen_;
  bool order_known_[2] = {false, false};
  bool backward_ = false;
};

}  // namespace lt
