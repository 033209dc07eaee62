// The defaults of ShardingStrategy (train/sharding.h): a strategy that holds no parameters or
// gradients is never asked for their buffers.
#include "train/sharding.h"

#include "core/error.h"

namespace lt {

float* ShardingStrategy::load_buffer(size_t i, size_t n) {
  fail("internal: load_buffer({}, {}) on a sharding strategy that holds no parameters", i, n);
}

float* ShardingStrategy::acquire_params(int u, int) {
  fail("internal: acquire_params({}) on a sharding strategy that holds no parameters", u);
}

float* ShardingStrategy::acquire_grads(int u) {
  fail("internal: acquire_grads({}) on a sharding strategy that holds no gradients", u);
}

void ShardingStrategy::set_grad_topk(const TopkOptions&) {
  fail("grad_topk: this run's sharding ({}) does not sparsify gradients; leave grad_topk at 0", describe());
}

void ShardingStrategy::set_adaptive_rank(const AdaptiveRankOptions&, Arenas&, const MemoryPlan&) {
  fail("lora_rank_policy: adaptive runs in one process without ZeRO; this run's sharding ({}) does not mask rank "
       "components. Use lora_rank_policy: fixed, or train in one process", describe());
}

}  // namespace lt
