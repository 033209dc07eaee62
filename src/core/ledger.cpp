#include "core/ledger.h"

#include <chrono>
#include <nlohmann/json.hpp>

namespace lt {

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Ledger::Ledger(const Arenas& arenas, size_t capacity) : arenas_(arenas), pages_(arenas.max_pages()), t0_(now_s()) {
  samples_.reserve(capacity);
}

void Ledger::mark(const char* phase, int layer) {
  if (!recording()) return;
  LedgerSample s{phase, layer, now_s() - t0_, process_rss_bytes(), process_peak_rss_bytes(), {}};
  for (size_t c = 0; c < kNumCategories; ++c) s.resident[c] = arenas_.resident_bytes(Category(c), pages_);
  samples_.push_back(s);
}

std::array<size_t, kNumCategories> Ledger::max_resident() const {
  std::array<size_t, kNumCategories> m{};
  for (const auto& s : samples_)
    for (size_t c = 0; c < kNumCategories; ++c) m[c] = std::max(m[c], s.resident[c]);
  return m;
}

const LedgerSample* Ledger::peak_sample() const {
  const LedgerSample* p = nullptr;
  for (const auto& s : samples_)
    if (!p || s.rss > p->rss) p = &s;
  return p;
}

std::string Ledger::to_json() const {
  nlohmann::json j;
  j["samples"] = nlohmann::json::array();
  for (const auto& s : samples_) {
    nlohmann::json r{{"phase", s.phase}, {"seconds", s.seconds}, {"rss_bytes", s.rss}, {"peak_rss_bytes", s.peak_rss}};
    if (s.layer >= 0) r["layer"] = s.layer;
    for (size_t c = 0; c < kNumCategories; ++c)
      if (s.resident[c]) r["resident"][std::string(category_name(Category(c)))] = s.resident[c];
    j["samples"].push_back(r);
  }
  auto m = max_resident();
  for (size_t c = 0; c < kNumCategories; ++c)
    if (arenas_.allocated_bytes(Category(c)))
      j["max_resident"][std::string(category_name(Category(c)))] = m[c];
  if (const auto* p = peak_sample()) {
    j["peak_phase"] = p->phase;
    // always present (null: the peak was not inside a layer), so every ledger.json has the same keys
    j["peak_layer"] = p->layer >= 0 ? nlohmann::json(p->layer) : nlohmann::json(nullptr);
  }
  j["peak_rss_bytes"] = process_peak_rss_bytes();
  return j.dump(1);
}

}  // namespace lt
