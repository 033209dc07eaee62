// The memory plan and its arenas: aligned carving in order, per-category totals, errors.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/error.h"
#include "core/memory_plan.h"

using namespace lt;

TEST(CoreMemoryPlan, ArenasCarveAlignedBuffersPerCategory) {
  MemoryPlan p;
  p.add("w0", Category::FrozenWeights, 100);
  p.add("w1", Category::FrozenWeights, 64);
  p.add("kv", Category::KVCache, 1000);
  p.add("x", Category::Activations, 1, Lifetime::Step);
  EXPECT_EQ(p.arena_bytes(Category::FrozenWeights), 128u + 64u);
  EXPECT_EQ(p.arena_bytes(Category::KVCache), 1024u);
  EXPECT_EQ(p.total_bytes(), 128u + 64u + 1024u + 64u);
  Arenas a(p);
  auto w0 = reinterpret_cast<uintptr_t>(a.get("w0"));
  auto w1 = reinterpret_cast<uintptr_t>(a.get("w1"));
  EXPECT_EQ(w0 % kArenaAlign, 0u);
  EXPECT_EQ(w1 - w0, 128u);
  EXPECT_EQ(a.allocated_bytes(Category::FrozenWeights), 192u);
  EXPECT_EQ(a.allocated_total(), p.total_bytes());
  EXPECT_EQ(*a.get_as<uint8_t>("kv"), 0);  // zeroed
  EXPECT_THROW(a.get("nope"), Error);
  EXPECT_NE(p.format_table(true).find("kv_cache"), std::string::npos);
}

TEST(CoreMemoryPlan, DuplicateNamesAreRejected) {
  MemoryPlan p;
  p.add("a", Category::Workspace, 8);
  p.add("a", Category::Workspace, 8);
  Arenas a;
  EXPECT_THROW(a.allocate(p), Error);
}
