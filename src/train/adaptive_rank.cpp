// Adaptive LoRA rank: importance, budget schedule, masks (train/adaptive_rank.h).
#include "train/adaptive_rank.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <tuple>

#include "core/error.h"
#include "train/train_model.h"

namespace lt {

RankImportance parse_rank_importance(const std::string& s) {
  if (s == "sensitivity") return RankImportance::Sensitivity;
  if (s == "variance") return RankImportance::Variance;
  fail("lora_rank_importance: '{}' is not one of sensitivity (AdaLoRA's |w·g| with its uncertainty), variance (the "
       "gradient's variance per entry)", excerpt(s));
}

int rank_budget(const AdaptiveRankOptions& o, int modules, int step, bool* prune) {
  const int init = o.init_r * modules, target = o.target_r * modules;
  if (step <= o.tinit) {
    *prune = false;
    return init;
  }
  const int end = o.total_steps - o.tfinal;
  if (step >= end) {
    *prune = true;
    return target;
  }
  const double mul = 1.0 - double(step - o.tinit) / double(end - o.tinit);
  *prune = step % o.delta_t == 0;
  return int(std::floor(double(init - target) * mul * mul * mul)) + target;
}

int RankModule::active() const { return int(std::count(keep.begin(), keep.end(), uint8_t(1))); }

RankAllocator::RankAllocator(const AdaptiveRankOptions& o, std::vector<TrainParam>& params) : o_(o), params_(&params) {
  LT_CHECK(o.target_r >= 1 && o.target_r < o.init_r, "lora_target_r: {} must be >= 1 and below lora_r ({}): it is the "
           "average rank per module that adaptive rank prunes down to", o.target_r, o.init_r);
  LT_CHECK(o.delta_t >= 1, "lora_rank_delta_t: {} must be >= 1", o.delta_t);
  LT_CHECK(o.tinit >= 0 && o.tfinal >= 0 && o.tinit + o.tfinal < o.total_steps, "lora_rank_tinit ({}) + "
           "lora_rank_tfinal ({}) must be below the run's {} steps: pruning needs a window", o.tinit, o.tfinal,
           o.total_steps);
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < params.size(); ++i) by_name[params[i].name] = i;
  const std::string sa = ".lora_A.weight", sb = ".lora_B.weight";
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& n = params[i].name;
    if (n.size() <= sa.size() || n.compare(n.size() - sa.size(), sa.size(), sa) != 0) continue;
    RankModule m;
    m.name = n.substr(0, n.size() - sa.size());
    auto it = by_name.find(m.name + sb);
    LT_CHECK(it != by_name.end(), "adaptive rank: '{}' has no '{}{}'", n, m.name, sb);
    m.a = i;
    m.b = it->second;
    const TrainParam &A = params[m.a], &B = params[m.b];
    LT_CHECK(A.shape.size() == 2 && B.shape.size() == 2 && A.shape[0] == o.init_r && B.shape[1] == o.init_r,
             "adaptive rank: '{}' / '{}' are not rank {} factors", A.name, B.name, o.init_r);
    m.r = o.init_r;
    m.in = int(A.shape[1]);
    m.out = int(B.shape[0]);
    m.keep.assign(size_t(m.r), 1);
    const State st{A.rank.ema1, A.rank.ema2, A.rank.mask};
    LT_CHECK(st.ema1 && st.ema2 && st.mask, "internal: adaptive rank's state of '{}' is not planned "
             "(TrainModelOptions::adaptive_rank)", A.name);
    std::fill(st.ema1, st.ema1 + A.n + B.n, 0.0f);
    std::fill(st.ema2, st.ema2 + A.n + B.n, 0.0f);
    std::fill(st.mask, st.mask + m.r, 1.0f);
    state_.push_back(st);
    modules_.push_back(std::move(m));
  }
  role_.assign(params.size(), -1);
  for (size_t k = 0; k < modules_.size(); ++k) {
    role_[modules_[k].a] = int(2 * k);
    role_[modules_[k].b] = int(2 * k + 1);
  }
  if (!o.release) stats_.skipped = "release disabled";
  LT_CHECK(!modules_.empty(), "lora_rank_policy: adaptive needs LoRA modules (method: lora)");
}

// Entry scores' EMAs of module k from its A and B (weights after the step, gradients of the step).
void RankAllocator::update_importance(size_t k, float* e1, float* e2) {
  const RankModule& m = modules_[k];
  const float b1 = float(o_.beta1), b2 = float(o_.beta2);
  size_t off = 0;
  for (size_t t : {m.a, m.b}) {
    const TrainParam& p = (*params_)[t];
    for (size_t j = 0; j < p.n; ++j) {
      float& x1 = e1[off + j];
      float& x2 = e2[off + j];
      if (o_.importance == RankImportance::Sensitivity) {
        const float ipt = std::fabs(p.p[j] * p.g[j]);
        x1 = b1 * x1 + (1 - b1) * ipt;
        x2 = b2 * x2 + (1 - b2) * std::fabs(ipt - x1);
      } else {
        const float g = p.g[j];
        x1 = b1 * x1 + (1 - b1) * g;
        x2 = b2 * x2 + (1 - b2) * g * g;
      }
    }
    off += p.n;
  }
}

std::vector<double> RankAllocator::scores() const {
  std::vector<double> s;
  for (size_t k = 0; k < modules_.size(); ++k) {
    const RankModule& m = modules_[k];
    const float *e1 = state_[k].ema1, *e2 = state_[k].ema2;
    auto entry = [&](size_t j) {
      return o_.importance == RankImportance::Sensitivity ? double(e1[j]) * e2[j]
                                                          : std::max(0.0, double(e2[j]) - double(e1[j]) * e1[j]);
    };
    const size_t bo = size_t(m.r) * size_t(m.in);  // B's entries follow A's
    for (int i = 0; i < m.r; ++i) {
      double sa = 0, sb = 0;
      for (int c = 0; c < m.in; ++c) sa += entry(size_t(i) * size_t(m.in) + size_t(c));
      for (int o = 0; o < m.out; ++o) sb += entry(bo + size_t(o) * size_t(m.r) + size_t(i));
      s.push_back(sa / m.in + sb / m.out);
    }
  }
  return s;
}

int RankAllocator::active_total() const {
  int n = 0;
  for (const auto& m : modules_) n += m.active();
  return n;
}

// The lowest-scoring active components masked until `budget` remain (a module keeps at least one).
void RankAllocator::prune_to(int budget) {
  int active = active_total();
  if (active <= budget) return;
  const std::vector<double> s = scores();
  std::vector<std::pair<size_t, int>> order;  // (module, component)
  for (size_t k = 0; k < modules_.size(); ++k)
    for (int i = 0; i < modules_[k].r; ++i)
      if (modules_[k].keep[size_t(i)]) order.push_back({k, i});
  auto score = [&](const std::pair<size_t, int>& c) { return s[c.first * size_t(o_.init_r) + size_t(c.second)]; };
  std::stable_sort(order.begin(), order.end(), [&](const auto& x, const auto& y) { return score(x) < score(y); });
  std::vector<int> left(modules_.size());
  for (size_t k = 0; k < modules_.size(); ++k) left[k] = modules_[k].active();
  for (const auto& [k, i] : order) {
    if (active == budget) break;
    if (left[k] == 1) continue;
    modules_[k].keep[size_t(i)] = 0;
    state_[k].mask[size_t(i)] = 0.0f;
    --left[k];
    --active;
  }
  LT_ASSERT(active == budget);
}

bool RankAllocator::update(int step) {
  const bool window = step <= o_.total_steps - o_.tfinal;
  if (window)
    for (size_t k = 0; k < modules_.size(); ++k) update_importance(k, state_[k].ema1, state_[k].ema2);
  bool prune = false;
  const int budget = rank_budget(o_, int(modules_.size()), step, &prune);
  const int before = active_total();
  if (prune) prune_to(budget);
  apply_masks();
  if (step >= o_.total_steps - o_.tfinal && !stats_.released) release(step);  // the budget is final
  return active_total() != before;
}

void RankAllocator::apply_masks() {
  for (const RankModule& m : modules_) {
    if (m.active() == m.r) continue;
    const TrainParam &A = (*params_)[m.a], &B = (*params_)[m.b];
    for (int i = 0; i < m.r; ++i) {
      if (m.keep[size_t(i)]) continue;
      const bool moments = !stats_.released;  // released: masked components have none
      for (float* t : {A.p, A.g, moments ? A.m : nullptr, moments ? A.v : nullptr})
        if (t) std::memset(t + size_t(i) * size_t(m.in), 0, size_t(m.in) * sizeof(float));
      for (float* t : {B.p, B.g, moments ? B.m : nullptr, moments ? B.v : nullptr})
        if (t)
          for (int o = 0; o < m.out; ++o) t[size_t(o) * size_t(m.r) + size_t(i)] = 0.0f;
    }
  }
}

size_t RankAllocator::active_lora_floats() const {
  size_t n = 0;
  for (const auto& m : modules_) n += size_t(m.active()) * size_t(m.in + m.out);
  return n;
}

size_t RankAllocator::init_lora_floats() const {
  size_t n = 0;
  for (const auto& m : modules_) n += size_t(m.r) * size_t(m.in + m.out);
  return n;
}

size_t RankAllocator::entries(size_t k) const { return size_t(modules_[k].r) * size_t(modules_[k].in + modules_[k].out); }

std::vector<TensorInfo> RankAllocator::state_tensors() {
  std::vector<TensorInfo> ts;
  auto add = [&](const std::string& name, size_t n, const float* v) {
    TensorInfo t;
    t.name = name;
    t.dtype = DType::F32;
    t.shape = {int64_t(n)};
    t.data = v;
    t.nbytes = n * sizeof(float);
    ts.push_back(t);
  };
  for (size_t k = 0; k < modules_.size(); ++k) {
    const RankModule& m = modules_[k];
    add("rank_mask." + m.name, size_t(m.r), state_[k].mask);
    if (stats_.released) continue;  // the EMAs are gone: only the masks matter from here on
    add("rank_ema1." + m.name, entries(k), state_[k].ema1);
    add("rank_ema2." + m.name, entries(k), state_[k].ema2);
  }
  return ts;
}

void RankAllocator::load_state(const TensorSet& ts) {
  LT_CHECK(!stats_.released, "internal: adaptive rank's state loaded after its release");
  bool released = false;  // a checkpoint written after the release holds masks without EMAs
  for (size_t k = 0; k < modules_.size(); ++k) {
    RankModule& m = modules_[k];
    if (!ts.find("rank_mask." + m.name)) continue;  // a fixed-rank run's checkpoint: fresh state
    const size_t n = entries(k);
    released = !ts.find("rank_ema1." + m.name);
    for (auto [prefix, v, len] : {std::tuple{"rank_mask.", state_[k].mask, size_t(m.r)},
                                  std::tuple{"rank_ema1.", state_[k].ema1, n}, std::tuple{"rank_ema2.", state_[k].ema2, n}}) {
      if (released && std::string_view(prefix).starts_with("rank_ema")) continue;
      const TensorInfo& t = ts.get(prefix + m.name, {int64_t(len)});
      convert_to_f32(v, t.data, t.dtype, len);
    }
    for (int i = 0; i < m.r; ++i) m.keep[size_t(i)] = state_[k].mask[size_t(i)] != 0.0f;
    LT_CHECK(m.active() >= 1, "rank_mask.{} masks every component (a module keeps at least one)", m.name);
  }
  apply_masks();
  if (released) {  // the masks first, then the release; the caller then reads the compacted moments
    LT_CHECK(arenas_ && o_.release && stats_.skipped.empty(), "{}: the checkpoint's optimizer state was compacted at "
             "adaptive rank's final budget (no rank_ema tensors); this run cannot compact it ({}): resume with the "
             "configuration that wrote it", ts.source, stats_.skipped.empty() ? "no arena" : stats_.skipped);
    release(0);
  }
}

}  // namespace lt
