// The model's unit store (train/unit_store.h).
#include "train/unit_store.h"

#include "core/error.h"
#include "train/train_model.h"

namespace lt {

UnitStore::UnitStore(std::unique_ptr<ShardingStrategy> strategy) : strategy_(std::move(strategy)) {}
UnitStore::~UnitStore() = default;

float* UnitStore::load_buffer(size_t i, size_t n, float* own) {
  return holds_params() ? strategy_->load_buffer(i, n) : own;
}

void UnitStore::add_pointers(size_t i, float** param, float** grad) {
  if (pref_.size() <= i) {
    pref_.resize(i + 1);
    gref_.resize(i + 1);
  }
  pref_[i].push_back(param);
  gref_[i].push_back(grad);
}

void UnitStore::loaded(size_t i) {
  if (!holds_params()) return;
  strategy_->loaded(i);
  for (float** r : pref_[i]) *r = nullptr;
}

void UnitStore::attach(std::vector<TrainParam>& params, int n_units) {
  params_ = &params;
  first_.assign(size_t(n_units), 0);
  end_.assign(size_t(n_units), 0);
  for (size_t u = 0, i = 0; u < first_.size(); ++u) {
    first_[u] = i;
    while (i < params.size() && params[i].unit == int(u)) ++i;
    end_[u] = i;
  }
  LT_CHECK(end_.back() == params.size(), "TrainModel: trainable tensors out of unit order");
  backward_reads_params_.assign(size_t(n_units), true);
  seen_.reserve(4 * first_.size());  // a pass acquires each unit at most twice (+ the head)
  if (strategy_) strategy_->attach(params);
}

void UnitStore::bind(int u, float* base, bool grads) {
  size_t off = 0;
  for (size_t i = first_[size_t(u)]; i < end_[size_t(u)]; ++i) {
    float* ptr = base ? base + off : nullptr;
    ((*params_)[i].*(grads ? &TrainParam::g : &TrainParam::p)) = ptr;
    for (float** r : (grads ? gref_ : pref_)[i]) *r = ptr;
    off += (*params_)[i].n;
  }
}

void UnitStore::acquire_params(int u) {
  // the hint: what followed u the last time a pass of this kind got this far the same way
  const auto& order = order_[backward_];
  const size_t at = seen_.size();
  int next = -1;
  if (order_known_[backward_] && at < order.size() && order[at] == u && at + 1 < order.size()) next = order[at + 1];
  if (seen_.size() < seen_.capacity()) seen_.push_back(u);
  bind(u, strategy_->acquire_params(u, next), false);
}

void UnitStore::begin_pass(bool backward) {
  flush();  // left by a pass an exception ended
  backward_ = backward;
  seen_.clear();
}

void UnitStore::before(int u, Pass p) {
  if (!strategy_) return;
  if (held_.unit != u) flush();
  held_.unit = u;
  if (empty(u)) return;
  const bool params = p != Pass::Backward || backward_reads_params_[size_t(u)], grads = p != Pass::Forward;
  if (params && !held_.params) {
    if (holds_params()) acquire_params(u);
    held_.params = true;
  }
  if (grads && !held_.grads) {
    if (holds_grads()) bind(u, strategy_->acquire_grads(u), true);
    held_.grads = true;
  }
}

void UnitStore::after(int u, Pass p) {
  if (!strategy_) return;
  LT_ASSERT(held_.unit == u);
  held_.complete = p == Pass::Backward;  // kept until the next hook for another unit (flush)
}

void UnitStore::flush() {
  const Held h = held_;
  held_ = {};
  if (h.unit < 0 || empty(h.unit)) return;
  if (h.params && holds_params()) {
    strategy_->release_params(h.unit);
    bind(h.unit, nullptr, false);
  }
  if (!h.grads) return;
  if (holds_grads()) {
    strategy_->release_grads(h.unit);
    bind(h.unit, nullptr, true);
  } else if (h.complete) {
    strategy_->grads_ready(h.unit);
  }
}

void UnitStore::end_pass() {
  if (!strategy_) return;
  flush();
  if (!holds_params() || order_known_[backward_]) return;
  order_[backward_] = seen_;  // once, on the first pass of each kind
  order_known_[backward_] = true;
}

}  // namespace lt
