// The ZeRO engine (dist/zero.h): flat layout, per-rank plans, and one optimizer step per stage.
#include "dist/zero.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>

#include "core/error.h"
#include "dist/offload.h"

namespace lt {

OptimizerOffload parse_optimizer_offload(const std::string& s) {
  if (s == "none" || s.empty()) return OptimizerOffload::None;
  if (s == "disk") return OptimizerOffload::Disk;
  fail("offload_optimizer: '{}' is not one of none, disk", s);
}

FlatLayout flat_layout(std::span<const size_t> counts, int ranks) {
  LT_CHECK(ranks >= 1, "ZeRO: {} ranks", ranks);
  FlatLayout l;
  l.ranks = ranks;
  for (size_t n : counts) {
    l.offset.push_back(l.total);
    l.count.push_back(n);
    l.total += n;
  }
  l.shard = (l.total + size_t(ranks) - 1) / size_t(ranks);
  return l;
}

size_t zero_bucket_elems(const FlatLayout& l) {
  return std::max<size_t>(1, std::min(l.shard, comm_bucket_elems() / size_t(l.ranks)));
}

// bytes of the moments (and stage 3's master shard) for Ψ = total on one rank
static size_t moment_floats(size_t total, int ranks, int stage) {
  return stage == 0 ? total : (total + size_t(ranks) - 1) / size_t(ranks);
}

MemoryPlan plan_zero_state(size_t total, int ranks, const ZeroOptions& o) {
  LT_CHECK(o.stage >= 0 && o.stage <= 3, "zero_stage must be 0, 1, 2 or 3 (got {})", o.stage);
  const FlatLayout l = flat_layout(std::span<const size_t>(&total, 1), ranks);
  const size_t f = sizeof(float), mom = moment_floats(total, ranks, o.stage);
  const bool disk = o.offload == OptimizerOffload::Disk;
  MemoryPlan p;
  if (!disk) {
    p.add("zero.adam_m", Category::OptimizerState, mom * f);
    p.add("zero.adam_v", Category::OptimizerState, mom * f);
  }
  if (o.stage >= 2) p.add("zero.grad_shard", Category::Grads, l.shard * f);
  if (o.stage == 3 && !disk) p.add("zero.master_shard", Category::TrainableParams, l.shard * f);
  p.add("zero.bucket", Category::Workspace, size_t(ranks) * zero_bucket_elems(l) * f);
  return p;
}

size_t zero_offloaded_bytes(size_t total, int ranks, const ZeroOptions& o) {
  if (o.offload != OptimizerOffload::Disk) return 0;
  const size_t mom = align_up(moment_floats(total, ranks, o.stage) * sizeof(float));
  const size_t shard = align_up((total + size_t(ranks) - 1) / size_t(ranks) * sizeof(float));
  return 2 * mom + (o.stage == 3 ? shard : 0);
}

size_t trainable_floats(const MemoryPlan& plan) {
  size_t n = 0;
  for (const auto& b : plan.buffers)
    if (b.cat == Category::TrainableParams) n += b.bytes / sizeof(float);
  return n;
}

MemoryPlan plan_zero_rank(const MemoryPlan& single, int ranks, const ZeroOptions& o) {
  MemoryPlan p;
  for (const auto& b : single.buffers)
    if (b.cat != Category::OptimizerState) p.buffers.push_back(b);
  for (auto& b : plan_zero_state(trainable_floats(single), ranks, o).buffers) p.buffers.push_back(std::move(b));
  return p;
}

std::string format_zero_plan(const MemoryPlan& single, int ranks, const ZeroOptions& o) {
  const MemoryPlan r = plan_zero_rank(single, ranks, o);
  const size_t psi = trainable_floats(single), S = (psi + size_t(ranks) - 1) / size_t(ranks);
  std::string s = fmt::format("per rank, ZeRO stage {} on {} rank{}{} (trainable floats {}, shard {}):\n", o.stage,
                              ranks, ranks > 1 ? "s" : "", o.offload == OptimizerOffload::Disk ? ", optimizer on disk" : "",
                              psi, S);
  s += fmt::format("{:<20} {:>14} {:>14}\n", "category", "one process", "per rank");
  for (size_t k = 0; k < kNumCategories; ++k) {
    const size_t a = single.arena_bytes(Category(k)), b = r.arena_bytes(Category(k));
    if (a || b) s += fmt::format("{:<20} {:>14} {:>14}  {}\n", category_name(Category(k)), a, b, format_bytes(b));
  }
  s += fmt::format("{:<20} {:>14} {:>14}  {}\n", "total (anonymous)", single.total_bytes(), r.total_bytes(),
                   format_bytes(r.total_bytes()));
  for (const auto& b : plan_zero_state(psi, ranks, o).buffers)
    s += fmt::format("  {:<18} {:>12} bytes\n", b.name, b.bytes);
  if (size_t d = zero_offloaded_bytes(psi, ranks, o)) s += fmt::format("offloaded to disk: {} ({})\n", d, format_bytes(d));
  s += "moments: 2·Ψ floats at stage 0, 2·S from stage 1; a gradient shard of S from stage 2; a master shard of S at "
       "stage 3. The model's full parameters and gradients stay allocated (the all-gather and reduce-scatter buffers).\n";
  return s;
}

ZeroOptimizer::ZeroOptimizer(std::vector<TrainParam>& params, Communicator& comm, const ZeroOptions& o)
    : params_(params), comm_(comm), opts_(o) {
  std::vector<size_t> counts;
  for (const auto& p : params) counts.push_back(p.n);
  layout_ = flat_layout(counts, comm.size());
  LT_CHECK(layout_.total > 0, "ZeRO: the model has no trainable parameters");
  // every rank must hold the same model: a different trainable count would desynchronise the collectives
  double t = double(layout_.total);
  comm_.allreduce_sum(&t, 1);
  LT_CHECK(t == double(layout_.total) * comm.size(), "ZeRO: rank {} has {} trainable parameters but the ranks' "
           "average is {}; every rank must run the same model and configuration", comm.rank(), layout_.total,
           t / comm.size());
  arenas_.allocate(plan_zero_state(layout_.total, layout_.ranks, o));
  frozen_.assign(params.size(), false);
  lr_factor_.assign(params.size(), 1.0f);
  bucket_elems_ = zero_bucket_elems(layout_);
  bucket_ = arenas_.get_as<float>("zero.bucket");
  if (o.stage >= 2) grad_shard_ = arenas_.get_as<float>("zero.grad_shard");
  const size_t mom = moment_floats(layout_.total, layout_.ranks, o.stage);
  if (o.offload == OptimizerOffload::Disk) {
    offload_ = std::make_unique<OffloadFile>(o.offload_dir, comm.rank(),
                                             zero_offloaded_bytes(layout_.total, layout_.ranks, o));
    m_ = offload_->floats(0);
    v_ = offload_->floats(align_up(mom * sizeof(float)));
    if (o.stage == 3) master_ = offload_->floats(2 * align_up(mom * sizeof(float)));
  } else {
    m_ = arenas_.get_as<float>("zero.adam_m");
    v_ = arenas_.get_as<float>("zero.adam_v");
    if (o.stage == 3) master_ = arenas_.get_as<float>("zero.master_shard");
  }
  if (master_) load_master_from_params();
}

ZeroOptimizer::~ZeroOptimizer() = default;

size_t ZeroOptimizer::offloaded_bytes() const { return offload_ ? offload_->bytes() : 0; }
size_t ZeroOptimizer::own_begin() const { return opts_.stage == 0 ? 0 : layout_.begin(comm_.rank()); }
size_t ZeroOptimizer::own_end() const { return opts_.stage == 0 ? layout_.total : layout_.end(comm_.rank()); }

template <class F>
void ZeroOptimizer::for_pieces(size_t lo, size_t hi, F&& fn) const {
  if (lo >= hi) return;
  const auto& off = layout_.offset;
  size_t i = size_t(std::upper_bound(off.begin(), off.end(), lo) - off.begin()) - 1;
  for (; i < off.size() && off[i] < hi; ++i) {
    const size_t a = std::max(lo, off[i]), b = std::min(hi, off[i] + layout_.count[i]);
    if (a < b) fn(i, a, b, a - off[i]);
  }
}

float* ZeroOptimizer::grad_at(size_t i, size_t off) {
  return grad_shard_ ? grad_shard_ + (layout_.offset[i] + off - own_begin()) : params_[i].g + off;
}

float* ZeroOptimizer::param_at(size_t i, size_t off) {
  return master_ ? master_ + (layout_.offset[i] + off - own_begin()) : params_[i].p + off;
}

void ZeroOptimizer::read_params(float* out, size_t lo, size_t hi) const {
  for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t o) {
    std::memcpy(out + (a - lo), params_[i].p + o, (b - a) * sizeof(float));
  });
}

void ZeroOptimizer::write_params(const float* in, size_t lo, size_t hi) {
  for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t o) {
    std::memcpy(params_[i].p + o, in + (a - lo), (b - a) * sizeof(float));
  });
}

void ZeroOptimizer::load_master_from_params() {
  if (master_) read_params(master_, own_begin(), own_end());
}

void ZeroOptimizer::reduce_gradients() {
  const size_t R = size_t(layout_.ranks), K = bucket_elems_, total = layout_.total;
  if (R == 1 && opts_.stage < 2) return;
  if (opts_.stage < 2) {
    // all-reduce the flat gradient, R·K elements at a time through the bucket
    for (size_t o = 0; o < total; o += R * K) {
      const size_t hi = std::min(total, o + R * K);
      for_pieces(o, hi, [&](size_t i, size_t a, size_t b, size_t off) {
        std::memcpy(bucket_ + (a - o), params_[i].g + off, (b - a) * sizeof(float));
      });
      comm_.allreduce_sum(bucket_, hi - o);
      for_pieces(o, hi, [&](size_t i, size_t a, size_t b, size_t off) {
        std::memcpy(params_[i].g + off, bucket_ + (a - o), (b - a) * sizeof(float));
      });
    }
    return;
  }
  // reduce-scatter: round j sends elements [r·S + j, r·S + j + k) of every owner r
  const size_t S = layout_.shard, me = size_t(comm_.rank());
  for (size_t j = 0; j < S; j += K) {
    const size_t k = std::min(K, S - j);
    for (size_t r = 0; r < R; ++r) {
      float* blk = bucket_ + r * k;
      const size_t lo = r * S + j, hi = std::min(total, lo + k);
      if (hi <= lo) { std::memset(blk, 0, k * sizeof(float)); continue; }
      if (hi - lo < k) std::memset(blk + (hi - lo), 0, (k - (hi - lo)) * sizeof(float));
      for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t off) {
        std::memcpy(blk + (a - lo), params_[i].g + off, (b - a) * sizeof(float));
      });
    }
    comm_.reduce_scatter_sum(bucket_ + me * k, bucket_, k);
    std::memcpy(grad_shard_ + j, bucket_ + me * k, k * sizeof(float));
  }
}

void ZeroOptimizer::gather_parameters() {
  if (opts_.stage == 0) return;
  const size_t R = size_t(layout_.ranks), S = layout_.shard, K = bucket_elems_, total = layout_.total;
  const size_t me = size_t(comm_.rank());
  for (size_t j = 0; j < S; j += K) {
    const size_t k = std::min(K, S - j);
    float* mine = bucket_ + me * k;
    const size_t lo = me * S + j, hi = std::min(total, lo + k);
    std::memset(mine, 0, k * sizeof(float));
    if (hi > lo) {
      if (master_) std::memcpy(mine, master_ + j, (hi - lo) * sizeof(float));
      else read_params(mine, lo, hi);
    }
    comm_.allgather(bucket_, mine, k);
    for (size_t r = 0; r < R; ++r) {
      if (r == me && !master_) continue;  // the model already holds this rank's update
      const size_t a = r * S + j, b = std::min(total, a + k);
      if (b > a) write_params(bucket_ + r * k, a, b);
    }
  }
}

float ZeroOptimizer::step(const AdamWOptions& ao, float lr, int step, float max_grad_norm) {
  reduce_gradients();
  const size_t lo = own_begin(), hi = own_end();
  // global norm: each rank sums the squares of its part (stage 0: every rank has everything)
  double sq = 0;
  for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t off) {
    if (frozen_[i]) return;
    const float* g = grad_at(i, off);
    const ptrdiff_t n = ptrdiff_t(b - a);
    double s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (n >= (1 << 14))
    for (ptrdiff_t e = 0; e < n; ++e) s += double(g[e]) * double(g[e]);
    sq += s;
  });
  if (opts_.stage > 0 && layout_.ranks > 1) comm_.allreduce_sum(&sq, 1);
  const double norm = std::sqrt(sq);
  LT_CHECK(std::isfinite(norm), "non-finite gradient (global norm {}) at step {}", norm, step);
  const double coef = double(max_grad_norm) / (norm + 1e-6);
  if (max_grad_norm > 0 && coef < 1.0) {
    const float c = float(coef);
    for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t off) {
      if (frozen_[i]) return;
      float* g = grad_at(i, off);
      for (size_t e = 0; e < b - a; ++e) g[e] *= c;
    });
  }
  // AdamW on this rank's part, one tensor piece at a time (offloaded pages released after each)
  for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t off) {
    ParamGroup g;
    g.param = param_at(i, off);
    g.grad = grad_at(i, off);
    g.m = m_ + (a - lo);
    g.v = v_ + (a - lo);
    g.n = b - a;
    g.weight_decay = params_[i].decay;
    g.frozen = frozen_[i];
    g.lr_factor = lr_factor_[i];
    adamw_step(std::span<ParamGroup>(&g, 1), ao, lr, step);
    if (offload_) {
      offload_->release(g.m, g.n * sizeof(float));
      offload_->release(g.v, g.n * sizeof(float));
    }
  });
  gather_parameters();
  if (offload_) offload_->release_all();
  return float(norm);
}

}  // namespace lt
