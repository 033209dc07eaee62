// The memory plan: every buffer a run needs (name, category, bytes, lifetime), listed from the
// model and run configuration before anything is allocated. `leantune info` / `plan` print it;
// Arenas allocates exactly it, one 64-byte-aligned arena per category, buffers carved in order
// (llm.c's malloc_and_point). Nothing allocates inside a step.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lt {

enum class Category : uint8_t {
  FrozenWeights,    // base weights that are not trained (converted copies; mmapped ones are listed apart)
  MappedWeights,    // weights read in place from a memory-mapped file (not anonymous memory)
  TrainableParams,
  Grads,
  OptimizerState,
  Activations,      // saved or working activations
  Recompute,        // gradient-checkpointing scratch
  LossChunk,        // logits / loss chunk
  KVCache,
  Workspace,        // GEMM, dequantization and attention scratch
  Data,             // token batches, tokenizer tables
  Count
};
constexpr size_t kNumCategories = size_t(Category::Count);

enum class Lifetime : uint8_t { Persistent, Step, Layer, Phase };

std::string_view category_name(Category c);
std::string_view lifetime_name(Lifetime l);

constexpr size_t kArenaAlign = 64;
// No buffer, arena or plan total may exceed 2^62 bytes (4 EiB): beyond any machine, and far
// enough inside 64 bits that aligning and summing cannot wrap.
constexpr size_t kMaxPlanBytes = size_t(1) << 62;
constexpr size_t kPage = 4096;
inline size_t align_up(size_t n, size_t a = kArenaAlign) { return (n + a - 1) / a * a; }

struct BufferSpec {
  std::string name;
  Category cat;
  size_t bytes;
  Lifetime life;
};

struct MemoryPlan {
  std::vector<BufferSpec> buffers;

  // lt::Error naming the buffer when bytes > kMaxPlanBytes (the configuration is too large).
  void add(std::string name, Category cat, size_t bytes, Lifetime life = Lifetime::Persistent);
  // Bytes the arena of `c` will hold (each buffer rounded up to kArenaAlign). The sums are
  // checked: lt::Error naming the buffer at which a total would pass kMaxPlanBytes.
  size_t arena_bytes(Category c) const;
  size_t total_bytes() const;  // all anonymous arenas (MappedWeights excluded)
  // A table: one row per buffer (optionally), then one per category and the total.
  std::string format_table(bool per_buffer) const;
};

// The plan's buffers of category c only, in order (an arena allocated apart: train/base_cache.h).
MemoryPlan category_plan(const MemoryPlan& plan, Category c);

// Allocates a MemoryPlan: one page-aligned anonymous mapping (zero-filled) per category, buffers
// carved in order. Pages become resident when first written.
class Arenas {
 public:
  Arenas() = default;
  explicit Arenas(const MemoryPlan& plan) { allocate(plan); }
  ~Arenas();
  Arenas(const Arenas&) = delete;
  Arenas& operator=(const Arenas&) = delete;

  void allocate(const MemoryPlan& plan);
  // As allocate(plan), but category `lent`'s arena is `lender`'s, borrowed: not allocated, not
  // unmapped here, and the lender must outlive these arenas. The lender must hold exactly the
  // plan's buffers of that category at the same offsets (allocated from the same rows, in order);
  // lt::Error naming the buffer otherwise. Runs that share one converted base (train/base_cache.h).
  void allocate(const MemoryPlan& plan, const Arenas& lender, Category lent);
  bool borrowed(Category c) const { return borrowed_[size_t(c)]; }
  // Makes category c's arena read-only (mprotect): a write into it then faults instead of changing
  // what other borrowers read.
  void seal(Category c);
  // The buffer named `name`; lt::Error if the plan did not list it.
  void* get(std::string_view name) const;
  template <class T> T* get_as(std::string_view name) const { return static_cast<T*>(get(name)); }
  size_t allocated_bytes(Category c) const { return sizes_[size_t(c)]; }
  size_t allocated_total() const;
  // Bytes of category c's arena resident in RAM now (mincore); scratch holds max_pages() bytes.
  size_t resident_bytes(Category c, std::vector<unsigned char>& scratch) const;
  size_t max_pages() const;
  // Returns the pages of category c's arena from byte `keep` (rounded up to a page) to its end to the
  // OS (madvise MADV_DONTNEED; they read as zeros if touched again) and the bytes returned. The
  // owner compacts what it keeps below `keep` first (train/adaptive_rank.h). Not for a borrowed arena.
  size_t release_tail(Category c, size_t keep);

 private:
  std::array<uint8_t*, kNumCategories> bases_{};
  std::array<size_t, kNumCategories> sizes_{};
  std::array<bool, kNumCategories> borrowed_{};
  std::unordered_map<std::string, void*> by_name_;
};

// Process memory from /proc/self/status (VmRSS, VmHWM), in bytes; 0 when unavailable.
size_t process_rss_bytes();
size_t process_peak_rss_bytes();
std::string format_bytes(size_t bytes);

}  // namespace lt
