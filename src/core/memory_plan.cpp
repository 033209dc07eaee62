// Memory plan tables and the tagged arenas that allocate it.
#include "core/memory_plan.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace lt {

std::string_view category_name(Category c) {
  static constexpr std::string_view names[] = {
      "frozen_weights", "mapped_weights", "trainable_params", "gradients", "optimizer_state", "activations",
      "recompute", "loss_chunk", "kv_cache", "workspace", "data"};
  return size_t(c) < kNumCategories ? names[size_t(c)] : "?";
}

std::string_view lifetime_name(Lifetime l) {
  static constexpr std::string_view names[] = {"persistent", "step", "layer", "phase"};
  return names[size_t(l)];
}

size_t MemoryPlan::arena_bytes(Category c) const {
  size_t n = 0;
  for (const auto& b : buffers)
    if (b.cat == c) n += align_up(b.bytes);
  return n;
}

size_t MemoryPlan::total_bytes() const {
  size_t n = 0;
  for (size_t c = 0; c < kNumCategories; ++c)
    if (Category(c) != Category::MappedWeights) n += arena_bytes(Category(c));
  return n;
}

std::string format_bytes(size_t b) {
  if (b >= (size_t(1) << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1 << 30));
  if (b >= (size_t(1) << 20)) return fmt::format("{:.2f} MiB", double(b) / double(1 << 20));
  if (b >= (size_t(1) << 10)) return fmt::format("{:.1f} KiB", double(b) / 1024.0);
  return fmt::format("{} B", b);
}

std::string MemoryPlan::format_table(bool per_buffer) const {
  std::string out;
  if (per_buffer) {
    out += fmt::format("{:<40} {:<17} {:<11} {:>14}\n", "buffer", "category", "lifetime", "bytes");
    for (const auto& b : buffers)
      out += fmt::format("{:<40} {:<17} {:<11} {:>14}\n", b.name, category_name(b.cat), lifetime_name(b.life),
                         b.bytes);
    out += "\n";
  }
  out += fmt::format("{:<20} {:>14} {:>12}\n", "category", "bytes", "");
  for (size_t c = 0; c < kNumCategories; ++c) {
    size_t n = arena_bytes(Category(c));
    if (n) out += fmt::format("{:<20} {:>14} {:>12}\n", category_name(Category(c)), n, format_bytes(n));
  }
  out += fmt::format("{:<20} {:>14} {:>12}\n", "total (anonymous)", total_bytes(), format_bytes(total_bytes()));
  return out;
}

Arenas::~Arenas() {
  for (auto* p : bases_) std::free(p);
}

void Arenas::allocate(const MemoryPlan& plan) {
  LT_ASSERT(by_name_.empty());
  for (size_t c = 0; c < kNumCategories; ++c) {
    if (Category(c) == Category::MappedWeights) continue;
    size_t n = plan.arena_bytes(Category(c));
    sizes_[c] = n;
    if (!n) continue;
    bases_[c] = static_cast<uint8_t*>(std::aligned_alloc(kArenaAlign, n));
    LT_CHECK(bases_[c], "out of memory allocating the {} arena ({} bytes)", category_name(Category(c)), n);
    std::memset(bases_[c], 0, n);
  }
  std::array<size_t, kNumCategories> off{};
  for (const auto& b : plan.buffers) {
    size_t c = size_t(b.cat);
    if (b.cat == Category::MappedWeights) continue;
    LT_CHECK(!by_name_.count(b.name), "memory plan lists buffer '{}' twice", b.name);
    by_name_[b.name] = bases_[c] + off[c];
    off[c] += align_up(b.bytes);
  }
}

void* Arenas::get(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  LT_CHECK(it != by_name_.end(), "memory plan has no buffer named '{}'", name);
  return it->second;
}

size_t Arenas::allocated_total() const {
  size_t n = 0;
  for (auto s : sizes_) n += s;
  return n;
}

static size_t status_field(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  size_t klen = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, klen, key) == 0) return size_t(std::strtoull(line.c_str() + klen + 1, nullptr, 10)) * 1024;
  return 0;
}

size_t process_rss_bytes() { return status_field("VmRSS"); }
size_t process_peak_rss_bytes() { return status_field("VmHWM"); }

}  // namespace lt
