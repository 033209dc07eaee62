// Memory plan tables and the tagged arenas that allocate it.
#include "core/memory_plan.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

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

namespace {

[[noreturn]] void too_large(std::string_view what, std::string_view name, size_t bytes) {
  fail("the configuration is too large: {} at buffer '{}' ({} bytes) would pass {} bytes (2^62, 4 EiB), beyond "
       "any machine; use a smaller model, batch or context", what, name, bytes, kMaxPlanBytes);
}

}  // namespace

void MemoryPlan::add(std::string name, Category cat, size_t bytes, Lifetime life) {
  if (bytes > kMaxPlanBytes) too_large("the buffer itself", name, bytes);
  buffers.push_back({std::move(name), cat, bytes, life});
}

size_t MemoryPlan::arena_bytes(Category c) const {
  size_t n = 0;  // every term <= kMaxPlanBytes and n <= kMaxPlanBytes before each sum: no wrap
  for (const auto& b : buffers) {
    if (b.cat != c) continue;
    if (b.bytes > kMaxPlanBytes) too_large("the buffer itself", b.name, b.bytes);
    n += align_up(b.bytes);
    if (n > kMaxPlanBytes) too_large(fmt::format("the {} arena", category_name(c)), b.name, b.bytes);
  }
  return n;
}

size_t MemoryPlan::total_bytes() const {
  size_t n = 0;
  for (size_t c = 0; c < kNumCategories; ++c) {
    if (Category(c) == Category::MappedWeights) continue;
    n += arena_bytes(Category(c));  // each <= kMaxPlanBytes, so the sum of two cannot wrap
    if (n > kMaxPlanBytes) {
      const BufferSpec* last = nullptr;
      for (const auto& b : buffers)
        if (b.cat == Category(c)) last = &b;
      too_large("the plan's total", last ? last->name : std::string_view(category_name(Category(c))),
                last ? last->bytes : 0);
    }
  }
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

MemoryPlan category_plan(const MemoryPlan& plan, Category c) {
  MemoryPlan p;
  for (const auto& b : plan.buffers)
    if (b.cat == c) p.buffers.push_back(b);
  return p;
}

Arenas::~Arenas() {
  for (size_t c = 0; c < kNumCategories; ++c)
    if (bases_[c] && !borrowed_[c]) munmap(bases_[c], align_up(sizes_[c], kPage));
}

void Arenas::allocate(const MemoryPlan& plan, const Arenas& lender, Category lent) {
  const size_t lc = size_t(lent);
  LT_CHECK(lender.sizes_[lc] == plan.arena_bytes(lent), "the lent {} arena holds {} bytes; this plan needs {}",
           category_name(lent), lender.sizes_[lc], plan.arena_bytes(lent));
  bases_[lc] = lender.bases_[lc];
  sizes_[lc] = lender.sizes_[lc];
  borrowed_[lc] = true;
  allocate(plan);
  for (const auto& b : plan.buffers) {
    if (b.cat != lent) continue;
    const auto it = lender.by_name_.find(b.name);
    LT_CHECK(it != lender.by_name_.end() && it->second == by_name_.at(b.name),
             "the lent {} arena does not hold buffer '{}' where this plan puts it", category_name(lent), b.name);
  }
}

void Arenas::seal(Category c) {
  const size_t n = align_up(sizes_[size_t(c)], kPage);
  if (n) LT_CHECK(mprotect(bases_[size_t(c)], n, PROT_READ) == 0, "mprotect of the {} arena failed", category_name(c));
}

void Arenas::allocate(const MemoryPlan& plan) {
  LT_ASSERT(by_name_.empty());
  for (size_t c = 0; c < kNumCategories; ++c) {
    if (Category(c) == Category::MappedWeights || borrowed_[c]) continue;
    size_t n = plan.arena_bytes(Category(c));
    sizes_[c] = n;
    if (!n) continue;
    // anonymous zero pages: reserved now, resident once touched, so the ledger sees when each
    // category's bytes become resident (mincore) and a load never holds untouched activations
    void* p = mmap(nullptr, align_up(n, kPage), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    LT_CHECK(p != MAP_FAILED, "out of memory allocating the {} arena ({} bytes)", category_name(Category(c)), n);
    bases_[c] = static_cast<uint8_t*>(p);
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

size_t Arenas::resident_bytes(Category c, std::vector<unsigned char>& scratch) const {
  size_t n = align_up(sizes_[size_t(c)], kPage);
  if (!n) return 0;
  scratch.resize(std::max(scratch.size(), n / kPage));  // callers size it once (max_pages())
  if (mincore(bases_[size_t(c)], n, scratch.data()) != 0) return 0;
  size_t pages = 0;
  for (size_t i = 0; i < n / kPage; ++i) pages += scratch[i] & 1;
  return std::min(pages * kPage, sizes_[size_t(c)]);
}

size_t Arenas::release_tail(Category c, size_t keep) {
  LT_CHECK(!borrowed_[size_t(c)], "internal: release_tail on the borrowed {} arena", category_name(c));
  const size_t from = align_up(keep, kPage), end = align_up(sizes_[size_t(c)], kPage);
  if (from >= end) return 0;
  LT_CHECK(madvise(bases_[size_t(c)] + from, end - from, MADV_DONTNEED) == 0, "madvise of the {} arena failed",
           category_name(c));
  return end - from;
}

size_t Arenas::max_pages() const {
  size_t m = 0;
  for (auto s : sizes_) m = std::max(m, align_up(s, kPage) / kPage);
  return m;
}

size_t Arenas::allocated_total() const {
  size_t n = 0;
  for (auto s : sizes_) n += s;
  return n;
}

// Reads one "Key:   N kB" field of /proc/self/status without allocating (the ledger calls it mid-step).
static size_t status_field(const char* key) {
  char buf[8192];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  size_t klen = std::strlen(key);
  for (char* line = buf; line && *line; line = std::strchr(line, '\n') ? std::strchr(line, '\n') + 1 : nullptr)
    if (std::strncmp(line, key, klen) == 0 && line[klen] == ':') return size_t(std::strtoull(line + klen + 1, nullptr, 10)) * 1024;
  return 0;
}

size_t process_rss_bytes() { return status_field("VmRSS"); }
size_t process_peak_rss_bytes() { return status_field("VmHWM"); }

}  // namespace lt
