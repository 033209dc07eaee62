// Adaptive rank's release at the final budget: the OptimizerState arena compacted in place, its
// tail returned to the OS, AdamW over the active components, and the plan's bound on what stays
// (train/adaptive_rank.h).
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include "core/error.h"
#include "train/adaptive_rank.h"
#include "train/train_model.h"

namespace lt {

void RankAllocator::set_arena(Arenas& arenas, const MemoryPlan& optimizer_rows) {
  arenas_ = &arenas;
  rows_ = optimizer_rows;
  for (const BufferSpec& b : rows_.buffers)
    if (!b.name.starts_with("adam_m.") && !b.name.starts_with("adam_v.") && !b.name.starts_with("rank_"))
      stats_.skipped = fmt::format("the optimizer state holds '{}' (grad_topk), which is not moved", b.name);
}

// Module k's A (a) or B moment `src` (r·in or out·r floats) into `dst` (active·in or out·active):
// dst never passes src, so copying forward is safe in place.
void RankAllocator::compact_moment(size_t k, bool a, const float* src, float* dst) const {
  const RankModule& m = modules_[k];
  const size_t r = size_t(m.r), in = size_t(m.in), act = size_t(m.active());
  if (a) {
    for (size_t i = 0, j = 0; i < r; ++i)
      if (m.keep[i]) std::memmove(dst + in * j++, src + in * i, in * sizeof(float));
    return;
  }
  for (size_t o = 0; o < size_t(m.out); ++o)
    for (size_t i = 0, j = 0; i < r; ++i)
      if (m.keep[i]) dst[o * act + j++] = src[o * r + i];
}

void RankAllocator::release(int step) {
  if (stats_.released || !arenas_ || !o_.release || !stats_.skipped.empty()) return;
  std::vector<unsigned char> scratch(arenas_->max_pages());
  stats_.resident_before = arenas_->resident_bytes(Category::OptimizerState, scratch);
  std::map<std::string, std::pair<size_t, bool>, std::less<>> moments;  // row -> (tensor, first moment)
  for (size_t i = 0; i < params_->size(); ++i) {
    moments["adam_m." + (*params_)[i].name] = {i, true};
    moments["adam_v." + (*params_)[i].name] = {i, false};
  }
  std::map<std::string, size_t, std::less<>> masks;
  for (size_t k = 0; k < modules_.size(); ++k) masks["rank_mask." + modules_[k].name] = k;
  uint8_t* base = rows_.buffers.empty() ? nullptr : static_cast<uint8_t*>(arenas_->get(rows_.buffers[0].name));
  size_t off = 0, cursor = 0;  // the row's planned offset, and where it goes
  for (const BufferSpec& b : rows_.buffers) {
    auto* src = static_cast<float*>(arenas_->get(b.name));
    LT_ASSERT(reinterpret_cast<uint8_t*>(src) == base + off);
    off += align_up(b.bytes);
    if (b.name.starts_with("rank_ema")) continue;  // never read after the final budget
    auto* dst = reinterpret_cast<float*>(base + cursor);
    size_t bytes = b.bytes;
    if (auto it = moments.find(b.name); it != moments.end()) {
      TrainParam& p = (*params_)[it->second.first];
      const int role = role_[it->second.first];
      if (role >= 0) {
        const RankModule& k = modules_[size_t(role / 2)];
        compact_moment(size_t(role / 2), role % 2 == 0, src, dst);
        bytes = size_t(k.active()) * size_t(role % 2 == 0 ? k.in : k.out) * sizeof(float);
      } else {
        std::memmove(dst, src, bytes);
      }
      (it->second.second ? p.m : p.v) = dst;
    } else {
      std::memmove(dst, src, bytes);
      if (auto mk = masks.find(b.name); mk != masks.end()) {
        state_[mk->second].mask = dst;
        (*params_)[modules_[mk->second].a].rank.mask = dst;
      }
    }
    cursor += align_up(bytes);
  }
  for (size_t k = 0; k < modules_.size(); ++k) {
    state_[k].ema1 = state_[k].ema2 = nullptr;
    (*params_)[modules_[k].a].rank.ema1 = (*params_)[modules_[k].a].rank.ema2 = nullptr;
  }
  stats_.kept_bytes = cursor;
  stats_.released_bytes = arenas_->release_tail(Category::OptimizerState, cursor);
  stats_.resident_after = arenas_->resident_bytes(Category::OptimizerState, scratch);
  stats_.released = true;
  stats_.step = step;
}

size_t RankAllocator::moment_floats(size_t i) const {
  size_t n = 1;
  for (int64_t d : moment_shape(i)) n *= size_t(d);
  return n;
}

std::vector<int64_t> RankAllocator::moment_shape(size_t i) const {
  const TrainParam& p = (*params_)[i];
  if (!stats_.released || role_[i] < 0) return p.shape;
  const RankModule& m = modules_[size_t(role_[i] / 2)];
  return role_[i] % 2 == 0 ? std::vector<int64_t>{m.active(), m.in} : std::vector<int64_t>{m.out, m.active()};
}

std::vector<ParamGroup> RankAllocator::optimizer_groups(const std::vector<ParamGroup>& full) const {
  if (!stats_.released) return full;
  std::vector<ParamGroup> gs;
  for (size_t t = 0; t < full.size(); ++t) {
    const ParamGroup& g = full[t];
    if (role_[t] < 0) {
      gs.push_back(g);
      continue;
    }
    const RankModule& m = modules_[size_t(role_[t] / 2)];
    const bool a = role_[t] % 2 == 0;
    const size_t r = size_t(m.r), act = size_t(m.active());
    // the runs of active components of one A (all rows at once) or one row of B
    const size_t lines = a ? 1 : size_t(m.out), width = a ? size_t(m.in) : 1;
    for (size_t o = 0; o < lines; ++o)
      for (size_t i = 0, j = 0; i < r;) {
        if (!m.keep[i]) {
          ++i;
          continue;
        }
        size_t e = i;
        while (e < r && m.keep[e]) ++e;
        ParamGroup run = g;
        const size_t pf = (a ? i * width : o * r + i), mf = (a ? j * width : o * act + j);
        run.param = g.param + pf;
        run.grad = g.grad + pf;
        run.m = g.m + mf;
        run.v = g.v + mf;
        run.n = (e - i) * width;
        gs.push_back(run);
        j += e - i;
        i = e;
      }
  }
  return gs;
}

size_t released_optimizer_bound(const MemoryPlan& plan, int init_r, int target_r) {
  std::map<std::string, size_t> width;  // module -> in + out, from its A's and B's first moments
  size_t other = 0, moment_rows = 0;
  const std::string sa = ".lora_A.weight", sb = ".lora_B.weight";
  bool adaptive = false;
  for (const BufferSpec& b : plan.buffers) {
    if (b.cat != Category::OptimizerState) continue;
    adaptive |= b.name.starts_with("rank_mask.");
    if (b.name.starts_with("rank_ema")) continue;
    const bool m = b.name.starts_with("adam_m."), v = b.name.starts_with("adam_v.");
    const std::string n = b.name.substr(7);
    const bool lora = (m || v) && (n.ends_with(sa) || n.ends_with(sb));
    if (!lora) {
      other += align_up(b.bytes);
      continue;
    }
    ++moment_rows;
    if (m) width[n.substr(0, n.size() - sa.size())] += b.bytes / sizeof(float) / size_t(init_r);
  }
  if (!adaptive || width.empty()) return 0;
  std::vector<size_t> w;
  size_t floats = 0;  // per moment: one component of every module, then the widest modules filled
  for (const auto& [name, x] : width) {
    floats += x;
    w.push_back(x);
  }
  std::sort(w.rbegin(), w.rend());
  size_t extra = size_t(target_r - 1) * w.size();
  for (size_t x : w) {
    const size_t take = std::min(extra, size_t(init_r - 1));
    floats += take * x;
    extra -= take;
  }
  return align_up(other + 2 * floats * sizeof(float) + moment_rows * kArenaAlign, kPage);
}

}  // namespace lt
