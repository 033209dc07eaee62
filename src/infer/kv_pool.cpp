// The paged KV pool (kv_pool.h): block reference counts, the free list, and the prefix cache of
// published blocks with LRU reuse.
#include "infer/kv_pool.h"

#include <algorithm>

#include "core/error.h"

namespace lt {

MemoryPlan plan_kv_pool(const ModelConfig& c, int block_size, int num_blocks) {
  LT_CHECK(block_size >= 1 && num_blocks >= 1, "KV pool: {} blocks of {} positions; both must be at least 1",
           num_blocks, block_size);
  MemoryPlan p;
  const size_t per = size_t(c.n_layers) * size_t(num_blocks) * size_t(block_size) * size_t(c.kv_dim()) * sizeof(float);
  p.add("kv_pool.k", Category::KVCache, per);
  p.add("kv_pool.v", Category::KVCache, per);
  return p;
}

size_t kv_block_bytes(const ModelConfig& c, int block_size) {
  return 2 * size_t(c.n_layers) * size_t(block_size) * size_t(c.kv_dim()) * sizeof(float);
}

// FNV-1a over the parent hash, the salt and the token ids, then a splitmix64 finalizer.
uint64_t kv_block_hash(uint64_t parent, std::span<const int> tokens, uint64_t salt) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t x) {
    for (int i = 0; i < 8; ++i) {
      h ^= (x >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  mix(salt);
  for (int t : tokens) mix(uint64_t(uint32_t(t)));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return (h ^ (h >> 31)) | 1;  // never 0 (0 is "no parent")
}

KvPool::KvPool(const ModelConfig& c, int block_size, int num_blocks)
    : bs_(block_size), nb_(num_blocks), kvd_(c.kv_dim()), nl_(c.n_layers), plan_(plan_kv_pool(c, block_size, num_blocks)) {
  arenas_.allocate(plan_);
  k_ = arenas_.get_as<float>("kv_pool.k");
  v_ = arenas_.get_as<float>("kv_pool.v");
  blocks_.resize(size_t(nb_));
  free_.reserve(size_t(nb_));
  for (int b = nb_ - 1; b >= 0; --b) free_.push_back(b);  // hand out 0, 1, 2, ... first
}

int KvPool::allocate() {
  int b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    unpublish(b);
  } else {
    return -1;
  }
  blocks_[size_t(b)].refs = 1;
  return b;
}

void KvPool::retain(int block) {
  Block& B = blocks_.at(size_t(block));
  if (B.refs == 0) {
    LT_CHECK(B.published, "KV pool: retain of free block {}", block);
    lru_.erase(B.lru);
  }
  ++B.refs;
}

void KvPool::release(int block) {
  Block& B = blocks_.at(size_t(block));
  LT_CHECK(B.refs > 0, "KV pool: release of block {} with no reference", block);
  if (--B.refs > 0) return;
  if (B.published) {
    B.lru = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void KvPool::copy_rows(int dst, int src, int rows) {
  LT_CHECK(rows >= 0 && rows <= bs_, "KV pool: copy of {} rows of a block of {}", rows, bs_);
  const size_t n = size_t(rows) * size_t(kvd_);
  for (int l = 0; l < nl_; ++l) {
    std::copy(k(l, src), k(l, src) + n, k(l, dst));
    std::copy(v(l, src), v(l, src) + n, v(l, dst));
  }
}

int KvPool::lookup(uint64_t hash, std::span<const int> tokens) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const Block& B = blocks_[size_t(it->second)];
  if (!std::equal(B.tokens.begin(), B.tokens.end(), tokens.begin(), tokens.end())) return -1;
  retain(it->second);
  return it->second;
}

void KvPool::publish(int block, uint64_t hash, std::span<const int> tokens) {
  Block& B = blocks_.at(size_t(block));
  if (B.published || by_hash_.count(hash)) return;
  B.published = true;
  B.hash = hash;
  B.tokens.assign(tokens.begin(), tokens.end());
  by_hash_[hash] = block;
}

void KvPool::unpublish(int block) {
  Block& B = blocks_[size_t(block)];
  by_hash_.erase(B.hash);
  B.published = false;
  B.tokens.clear();
}

}  // namespace lt
