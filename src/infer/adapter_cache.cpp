// The adapter registry with LRU residency (adapter_cache.h).
#include "infer/adapter_cache.h"

#include "core/error.h"

namespace lt {

void AdapterCache::load(Entry& e) {
  e.weights = std::make_shared<const LoraWeights>(e.dir, cfg_);
  st_.resident_bytes += e.weights->bytes();
  ++st_.loads;
}

// Evicts least recently used resident adapters (other than `keep`) while over the budget.
void AdapterCache::fit_budget(const std::string& keep) {
  while (budget_ > 0 && st_.resident_bytes > budget_) {
    Entry* lru = nullptr;
    for (auto& [name, e] : entries_)
      if (e.weights && name != keep && (!lru || e.last_use < lru->last_use)) lru = &e;
    if (!lru) return;  // only `keep` is resident: it stays, over budget
    st_.resident_bytes -= lru->weights->bytes();
    lru->weights.reset();
    ++st_.evictions;
  }
}

void AdapterCache::add(const std::string& name, const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  LT_CHECK(!name.empty(), "{}: an adapter needs a name", dir);
  LT_CHECK(!entries_.count(name), "an adapter named '{}' is already loaded; unload it first or pick another name",
           name);
  Entry e;
  e.dir = dir;
  e.salt = next_salt_++;
  e.last_use = ++clock_;
  load(e);
  entries_.emplace(name, std::move(e));
  fit_budget(name);
}

bool AdapterCache::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  if (it->second.weights) st_.resident_bytes -= it->second.weights->bytes();
  entries_.erase(it);
  return true;
}

std::shared_ptr<const LoraWeights> AdapterCache::get(const std::string& name, uint64_t* salt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  LT_CHECK(it != entries_.end(), "no adapter named '{}' is loaded", name);
  Entry& e = it->second;
  e.last_use = ++clock_;
  if (!e.weights) {
    load(e);
    fit_budget(name);
  }
  if (salt) *salt = e.salt;
  return e.weights;
}

bool AdapterCache::contains(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(name) > 0;
}

std::vector<std::string> AdapterCache::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> v;
  for (const auto& [name, e] : entries_) v.push_back(name);
  return v;
}

AdapterStats AdapterCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  AdapterStats s = st_;
  s.registered = int(entries_.size());
  s.resident = 0;
  for (const auto& [name, e] : entries_) s.resident += e.weights != nullptr;
  return s;
}

}  // namespace lt
