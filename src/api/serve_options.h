// The scheduler options an Engine with these EngineOptions runs with (before the scheduler fills
// in its defaults): shared by the Engine and `plan --serve` so the plan is what the server allocates.
#pragma once
#include <algorithm>

#include "core/error.h"
#include "infer/kv_pool.h"
#include "infer/scheduler.h"
#include "leantune/engine.h"

namespace leantune::detail {

inline lt::SchedulerOptions scheduler_options(const lt::ModelConfig& c, const EngineOptions& o,
                                              const lt::ModelConfig* draft) {
  lt::SchedulerOptions so;
  so.block_size = o.block_size;
  so.max_seqs = o.max_seqs;
  so.max_batch_tokens = o.max_batch_tokens;
  so.max_context = o.context;
  so.max_lora_rank = o.max_lora_rank;
  so.prefix_caching = o.prefix_caching;
  so.num_blocks = o.kv_blocks;
  so.num_speculative = o.num_speculative_tokens;
  if (so.num_blocks <= 0 && o.kv_memory_bytes > 0) {  // the budget holds the model's and the draft's blocks
    const int bs = std::max(1, o.block_size);
    const size_t per = lt::kv_block_bytes(c, bs) + (draft ? lt::kv_block_bytes(*draft, bs) : 0);
    so.num_blocks = int(std::min<size_t>(o.kv_memory_bytes / per, size_t(1) << 30));
    LT_CHECK(so.num_blocks >= 1, "kv_memory_bytes {} holds no KV block of {} bytes", o.kv_memory_bytes, per);
  }
  return so;
}

}  // namespace leantune::detail
