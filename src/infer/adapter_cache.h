// AdapterCache: the LoRA adapters a server knows by name, and which of them are resident. Each
// registered adapter keeps its folder; its weights (LoraWeights, unmerged) are loaded when first
// used and stay resident while the total stays within a byte budget; past it, the least recently
// used resident adapters are evicted (running requests keep theirs alive through their shared_ptr)
// and loaded again from the folder on their next use, giving the same weights.
//
// Thread-safe: every member takes the cache's mutex (loading from disk happens under it).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infer/lora_weights.h"

namespace lt {

struct AdapterStats {
  uint64_t loads = 0, evictions = 0;
  size_t resident_bytes = 0;
  int registered = 0, resident = 0;
};

class AdapterCache {
 public:
  // budget_bytes 0: no limit.
  AdapterCache(const ModelConfig& c, size_t budget_bytes) : cfg_(c), budget_(budget_bytes) {}

  // Registers `name` for `dir` and loads it now (so a bad folder fails here, with its lt::Error).
  // lt::Error when the name is taken or empty.
  void add(const std::string& name, const std::string& dir);
  // Forgets `name` (requests running with it finish with it); false when unknown.
  bool remove(const std::string& name);
  // The weights of `name`, loaded if evicted, and a salt unique to this registration (for the
  // prefix cache); lt::Error when unknown.
  std::shared_ptr<const LoraWeights> get(const std::string& name, uint64_t* salt);
  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;
  AdapterStats stats() const;

 private:
  struct Entry {
    std::string dir;
    uint64_t salt = 0;
    uint64_t last_use = 0;
    std::shared_ptr<const LoraWeights> weights;  // null while evicted
  };
  void load(Entry& e);     // under mu_
  void fit_budget(const std::string& keep);

  ModelConfig cfg_;
  size_t budget_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  uint64_t clock_ = 0, next_salt_ = 1;
  AdapterStats st_;
};

}  // namespace lt
