// The measured ledger: at named phases of a run (model loaded, forward of layer l, the loss,
// backward of layer l, the optimizer step) it records the resident bytes of every arena category
// (mincore over the arena's pages), the process's resident memory (VmRSS) and its peak (VmHWM).
// Set against the plan's prediction, it shows category by category that the plan was right and
// in which phase the peak fell. Storage is reserved at construction: mark() allocates nothing.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "core/memory_plan.h"

namespace lt {

struct LedgerSample {
  const char* phase;  // a string literal: "loaded", "forward", "loss", "backward", "optimizer", ...
  int layer;          // -1 when the phase is not per layer
  double seconds;     // since the ledger was created
  size_t rss, peak_rss;
  std::array<size_t, kNumCategories> resident;  // per category
};

class Ledger {
 public:
  // capacity: samples kept; later marks only update the peak.
  Ledger(const Arenas& arenas, size_t capacity);
  void mark(const char* phase, int layer = -1);
  bool recording() const { return samples_.size() < samples_.capacity(); }
  const std::vector<LedgerSample>& samples() const { return samples_; }
  // The largest resident bytes seen per category, and the sample where VmRSS peaked.
  std::array<size_t, kNumCategories> max_resident() const;
  const LedgerSample* peak_sample() const;
  // {"samples": [...], "max_resident": {...}, "peak_rss_bytes": N} (category names as in the plan).
  std::string to_json() const;

 private:
  const Arenas& arenas_;
  std::vector<LedgerSample> samples_;
  std::vector<unsigned char> pages_;
  double t0_;
};

}  // namespace lt
