// KvPool: the paged KV cache of the batch engine. One arena (the plan's KVCache category) holds
// num_blocks blocks of block_size positions for every layer's keys and values; a sequence owns a
// block table (block ids in position order), so sequences of any length share one pool without
// reserving a whole context each (vLLM's PagedAttention layout).
//
// Blocks are reference counted. A full block can be published under the hash of its token prefix
// (prefix caching): a later sequence whose prompt starts with the same tokens (and adapter) takes
// the block instead of computing it. A published block whose count drops to zero stays cached,
// in LRU order, until allocate() needs it back.
//
// Layout of layer l's keys: k(l, b) points at block b's (block_size, KVD) rows; values alike.
// Not thread-safe: the scheduler's thread owns it.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/memory_plan.h"
#include "core/model_config.h"

namespace lt {

// The pool's buffers: "kv_pool.k" and "kv_pool.v", each n_layers * num_blocks * block_size * KVD f32.
MemoryPlan plan_kv_pool(const ModelConfig& c, int block_size, int num_blocks);
// Bytes one block takes over all layers (keys and values).
size_t kv_block_bytes(const ModelConfig& c, int block_size);

// The hash of a full block of tokens after the block whose hash is `parent` (0 for the first
// block); `salt` separates caches that must not share (e.g. the adapter a sequence runs with).
uint64_t kv_block_hash(uint64_t parent, std::span<const int> tokens, uint64_t salt);

class KvPool {
 public:
  KvPool(const ModelConfig& c, int block_size, int num_blocks);

  int block_size() const { return bs_; }
  int num_blocks() const { return nb_; }
  float* k(int layer, int block) const { return k_ + (size_t(layer) * nb_ + block) * bs_ * kvd_; }
  float* v(int layer, int block) const { return v_ + (size_t(layer) * nb_ + block) * bs_ * kvd_; }

  // A fresh block (count 1), taken from the free list or else from the least recently used cached
  // block (which is unpublished); -1 when every block is in use.
  int allocate();
  // Blocks allocate() can hand out now (free + cached with count 0).
  int available() const { return int(free_.size() + lru_.size()); }
  int in_use() const { return nb_ - available(); }
  int cached() const { return int(lru_.size()); }

  void retain(int block);
  int refs(int block) const { return blocks_.at(size_t(block)).refs; }
  // Copies the first `rows` positions of every layer's keys and values from block src to dst.
  void copy_rows(int dst, int src, int rows);
  // Drops one reference; at zero a published block goes to the LRU cache, another to the free list.
  void release(int block);

  // Prefix caching: the block published under `hash` with these tokens, retained (count + 1); -1
  // when there is none.
  int lookup(uint64_t hash, std::span<const int> tokens);
  // Publishes a full, computed block under `hash` (ignored when that hash already has a block).
  void publish(int block, uint64_t hash, std::span<const int> tokens);

  const MemoryPlan& plan() const { return plan_; }
  const Arenas& arenas() const { return arenas_; }

 private:
  struct Block {
    int refs = 0;
    bool published = false;
    uint64_t hash = 0;
    std::vector<int> tokens;              // the block's tokens while published (checked on lookup)
    std::list<int>::iterator lru;         // position in lru_ while cached with no reference
  };
  void unpublish(int block);

  int bs_, nb_, kvd_, nl_;
  MemoryPlan plan_;
  Arenas arenas_;
  float *k_ = nullptr, *v_ = nullptr;
  std::vector<Block> blocks_;
  std::vector<int> free_;                      // unpublished blocks with no reference
  std::list<int> lru_;                         // published blocks with no reference, oldest first
  std::unordered_map<uint64_t, int> by_hash_;  // published blocks
};

}  // namespace lt
