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
  fail("offload_optimizer: '{}' is not one of none, disk", excerpt(s));
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

ZeroTensors zero_tensors(const MemoryPlan& single, int n_layers) {
  ZeroTensors t;
  std::vector<size_t> unit(size_t(n_layers) + 2, 0);
  bool lm_head = false;
  for (const auto& b : single.buffers) {
    if (b.name == "lm_head.weight") lm_head = true;
    if (b.cat != Category::TrainableParams) continue;
    const size_t n = b.bytes / sizeof(float);
    const int u = trainable_unit(b.name, n_layers);
    LT_CHECK(t.units.empty() || u >= t.units.back(), "ZeRO: trainable tensor '{}' is out of unit order", b.name);
    t.counts.push_back(n);
    t.units.push_back(u);
    t.total += n;
    unit[size_t(u)] += n;
  }
  t.unit_max = *std::max_element(unit.begin(), unit.end());
  if (n_layers > 0) t.layer_max = *std::max_element(unit.begin() + 1, unit.begin() + 1 + n_layers);
  t.tied_floats = lm_head ? 0 : unit[0];
  t.n_units = n_layers + 2;  // a trained embedding that is also the lm_head
  return t;
}

std::vector<size_t> zero_slot_floats(const ZeroTensors& t, const ZeroOptions& o) {
  if (o.overlap && t.layer_max > 0) return {t.unit_max, t.layer_max};
  return {t.unit_max};
}

MemoryPlan plan_zero_state(const ZeroTensors& t, int ranks, const ZeroOptions& o) {
  LT_CHECK(o.stage >= 0 && o.stage <= 3, "zero_stage must be 0, 1, 2 or 3 (got {})", o.stage);
  const FlatLayout l = flat_layout(std::span<const size_t>(&t.total, 1), ranks);
  const size_t f = sizeof(float), mom = moment_floats(t.total, ranks, o.stage);
  const bool disk = o.offload == OptimizerOffload::Disk;
  MemoryPlan p;
  if (!disk) {
    p.add("zero.adam_m", Category::OptimizerState, mom * f);
    p.add("zero.adam_v", Category::OptimizerState, mom * f);
  }
  const std::vector<size_t> slots = zero_slot_floats(t, o);
  if (o.stage >= 2) {
    p.add("zero.grad_shard", Category::Grads, l.shard * f);
    for (size_t j = 0; j < slots.size(); ++j)
      p.add(fmt::format("zero.grad_slot.{}", j), Category::Grads, slots[j] * f, Lifetime::Layer);
  }
  if (o.stage == 3) {
    if (!disk) p.add("zero.master_shard", Category::TrainableParams, l.shard * f);
    for (size_t j = 0; j < slots.size(); ++j)
      p.add(fmt::format("zero.param_slot.{}", j), Category::TrainableParams, slots[j] * f, Lifetime::Layer);
  }
  if (o.stage < 3) p.add("zero.bucket", Category::Workspace, size_t(ranks) * zero_bucket_elems(l) * f);
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

MemoryPlan plan_zero_rank(const MemoryPlan& single, int n_layers, int ranks, const ZeroOptions& o) {
  MemoryPlan p;
  for (const auto& b : single.buffers) {
    // the AdamW moments move to the engine; grad_topk's residuals and ages (and adaptive rank's
    // state, which ZeRO refuses to run) stay with the model
    if (b.cat == Category::OptimizerState && !b.name.starts_with("topk_") && !b.name.starts_with("rank_")) continue;
    if (o.stage >= 2 && b.cat == Category::Grads) continue;
    if (o.stage == 3 && b.cat == Category::TrainableParams) continue;
    p.buffers.push_back(b);
  }
  for (auto& b : plan_zero_state(zero_tensors(single, n_layers), ranks, o).buffers) p.buffers.push_back(std::move(b));
  return p;
}

std::string format_zero_plan(const MemoryPlan& single, int n_layers, int ranks, const ZeroOptions& o) {
  const MemoryPlan r = plan_zero_rank(single, n_layers, ranks, o);
  const ZeroTensors t = zero_tensors(single, n_layers);
  const size_t psi = t.total, S = (psi + size_t(ranks) - 1) / size_t(ranks);
  std::string s = fmt::format("per rank, ZeRO stage {} on {} rank{}{} (trainable floats Ψ {}, shard S {}, largest unit "
                              "M {}, overlap slot X {}):\n", o.stage, ranks, ranks > 1 ? "s" : "",
                              o.offload == OptimizerOffload::Disk ? ", optimizer on disk" : "", psi, S, t.unit_max,
                              o.overlap ? t.layer_max : 0);
  s += fmt::format("{:<20} {:>14} {:>14}\n", "category", "one process", "per rank");
  for (size_t k = 0; k < kNumCategories; ++k) {
    const size_t a = single.arena_bytes(Category(k)), b = r.arena_bytes(Category(k));
    if (a || b) s += fmt::format("{:<20} {:>14} {:>14}  {}\n", category_name(Category(k)), a, b, format_bytes(b));
  }
  s += fmt::format("{:<20} {:>14} {:>14}  {}\n", "total (anonymous)", single.total_bytes(), r.total_bytes(),
                   format_bytes(r.total_bytes()));
  for (const auto& b : plan_zero_state(t, ranks, o).buffers)
    s += fmt::format("  {:<18} {:>12} bytes\n", b.name, b.bytes);
  if (size_t d = zero_offloaded_bytes(psi, ranks, o)) s += fmt::format("offloaded to disk: {} ({})\n", d, format_bytes(d));
  s += "moments: 2·Ψ floats at stage 0, 2·S from stage 1; gradients: Ψ at stages 0-1, S + M + X from stage 2; "
       "parameters: Ψ at stages 0-2, S + M + X at stage 3 (M: the largest unit, an embedding, lm_head or decoder layer; "
       "X: the largest decoder layer with zero_overlap, else 0).\n";
  return s;
}

ZeroOptimizer::ZeroOptimizer(const ZeroTensors& t, Communicator& comm, const ZeroOptions& o)
    : comm_(comm), opts_(o), tensors_(t) {
  layout_ = flat_layout(t.counts, comm.size());
  LT_CHECK(layout_.total > 0, "ZeRO: the model has no trainable parameters");
  // every rank must hold the same model: a different trainable count would desynchronise the collectives
  double tot = double(layout_.total);
  comm_.allreduce_sum(&tot, 1);
  LT_CHECK(tot == double(layout_.total) * comm.size(), "ZeRO: rank {} has {} trainable parameters but the ranks' "
           "average is {}; every rank must run the same model and configuration", comm.rank(), layout_.total,
           tot / comm.size());
  const int n_units = std::max(t.n_units, t.units.empty() ? 0 : t.units.back() + 1);
  unit_begin_.assign(size_t(n_units), 0);
  unit_end_.assign(size_t(n_units), 0);
  for (int u = 0; u < n_units; ++u) {  // empty units: [x, x)
    size_t i = 0;
    while (i < t.units.size() && t.units[i] < u) ++i;
    unit_begin_[size_t(u)] = i < t.units.size() ? layout_.offset[i] : layout_.total;
    size_t e = unit_begin_[size_t(u)];
    for (; i < t.units.size() && t.units[i] == u; ++i) e += t.counts[i];
    unit_end_[size_t(u)] = e;
  }
  arenas_.allocate(plan_zero_state(t, layout_.ranks, o));
  frozen_.assign(t.counts.size(), false);
  lr_factor_.assign(t.counts.size(), 1.0f);
  decay_.assign(t.counts.size(), true);
  if (o.stage < 3) {
    bucket_elems_ = zero_bucket_elems(layout_);
    bucket_ = arenas_.get_as<float>("zero.bucket");
  }
  auto make_slots = [&](std::vector<Slot>& v, const char* name) {
    const std::vector<size_t> sizes = zero_slot_floats(t, o);
    v.resize(sizes.size());
    for (size_t j = 0; j < v.size(); ++j) {
      v[j].data = arenas_.get_as<float>(fmt::format("{}.{}", name, j));
      v[j].capacity = sizes[j];
      v[j].handles.reserve(size_t(layout_.ranks));
    }
  };
  if (o.stage >= 2) {
    grad_shard_ = arenas_.get_as<float>("zero.grad_shard");
    make_slots(grad_slots_, "zero.grad_slot");
  }
  if (o.stage == 3) make_slots(param_slots_, "zero.param_slot");
  reduced_.assign(t.counts.size(), false);
  overlap_handles_.reserve(t.counts.size());
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
}

void ZeroOptimizer::attach(std::vector<TrainParam>& params) {
  LT_CHECK(params.size() == tensors_.counts.size(), "ZeRO: the model has {} trainable tensors, the plan {}",
           params.size(), tensors_.counts.size());
  for (size_t i = 0; i < params.size(); ++i) {
    LT_CHECK(params[i].n == tensors_.counts[i] && params[i].unit == tensors_.units[i],
             "ZeRO: trainable tensor {} ('{}') has {} floats in unit {}; the plan has {} in unit {}", i, params[i].name,
             params[i].n, params[i].unit, tensors_.counts[i], tensors_.units[i]);
    decay_[i] = params[i].decay;
    lr_factor_[i] = params[i].lr_factor;
  }
  params_ = &params;
}

ZeroOptimizer::Slot* ZeroOptimizer::slot_of(std::vector<Slot>& slots, int u, Slot::State st) {
  for (auto& s : slots)
    if (s.unit == u && s.state == st) return &s;
  return nullptr;
}

ZeroOptimizer::Slot* ZeroOptimizer::free_slot(std::vector<Slot>& slots, size_t need) {
  for (auto& s : slots)
    if (s.state == Slot::Free && s.capacity >= need) return &s;
  Slot* oldest = nullptr;  // none free: complete the oldest collective in flight in a slot large enough
  for (auto& s : slots)
    if ((s.state == Slot::Prefetching || s.state == Slot::Reducing) && s.capacity >= need &&
        (!oldest || s.since < oldest->since))
      oldest = &s;
  LT_CHECK(oldest, "ZeRO: no slot of {} floats is free ({} slots); a unit was acquired twice", need, slots.size());
  finish(*oldest);
  return oldest;
}

// every owner broadcasts its piece of the unit (an all-gather of pieces of unequal size)
void ZeroOptimizer::gather_unit(Slot& s, int u, bool nonblocking) {
  const size_t ub = unit_begin_[size_t(u)], ue = unit_end_[size_t(u)], S = layout_.shard;
  const int me = comm_.rank();
  s.unit = u;
  s.handles.clear();
  for (int r = 0; r < layout_.ranks; ++r) {
    const size_t a = std::max(ub, size_t(r) * S), b = std::min(ue, size_t(r + 1) * S);
    if (a >= b) continue;
    if (r == me) std::memcpy(s.data + (a - ub), master_ + (a - size_t(r) * S), (b - a) * sizeof(float));
    if (layout_.ranks == 1) continue;
    if (nonblocking) s.handles.push_back(comm_.ibroadcast(s.data + (a - ub), (b - a) * sizeof(float), r));
    else comm_.broadcast(s.data + (a - ub), (b - a) * sizeof(float), r);
  }
}

void ZeroOptimizer::finish(Slot& s) {
  for (auto h : s.handles) comm_.wait(h);
  s.handles.clear();
  if (s.state == Slot::Reducing) {  // this rank's piece of the unit, summed: into the shard
    const size_t ub = unit_begin_[size_t(s.unit)], ue = unit_end_[size_t(s.unit)], S = layout_.shard;
    const size_t r = size_t(comm_.rank()), a = std::max(ub, r * S), b = std::min(ue, (r + 1) * S);
    if (a < b) {
      float* dst = grad_shard_ + (a - r * S);
      const float* piece = s.data + (a - ub);
      const ptrdiff_t n = ptrdiff_t(b - a);
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
      for (ptrdiff_t e = 0; e < n; ++e) dst[e] += piece[e];
    }
  }
  s.state = Slot::Free;
  s.unit = -1;
}

void ZeroOptimizer::drain() {
  for (auto* slots : {&grad_slots_, &param_slots_}) {
    // oldest first, so the reductions are added in the order they were started
    for (;;) {
      Slot* oldest = nullptr;
      for (auto& s : *slots)
        if ((s.state == Slot::Prefetching || s.state == Slot::Reducing) && (!oldest || s.since < oldest->since))
          oldest = &s;
      if (!oldest) break;
      finish(*oldest);
    }
  }
  for (auto h : overlap_handles_) comm_.wait(h);
  overlap_handles_.clear();
}

float* ZeroOptimizer::load_buffer(size_t i, size_t n) {
  LT_CHECK(opts_.stage == 3 && i < tensors_.counts.size() && n == tensors_.counts[i],
           "ZeRO: load_buffer({}, {}) does not match the planned tensors", i, n);
  return param_slots_[0].data;
}

void ZeroOptimizer::loaded(size_t i) {
  const size_t lo = std::max(own_begin(), layout_.offset[i]), hi = std::min(own_end(), layout_.offset[i] + layout_.count[i]);
  if (lo < hi)
    std::memcpy(master_ + (lo - own_begin()), param_slots_[0].data + (lo - layout_.offset[i]), (hi - lo) * sizeof(float));
}

float* ZeroOptimizer::acquire_params(int u, int next) {
  LT_CHECK(!slot_of(param_slots_, u, Slot::InUse), "ZeRO: unit {}'s parameters acquired twice", u);
  Slot* s = slot_of(param_slots_, u, Slot::Prefetching);
  if (s) {
    finish(*s);  // prefetched: wait for it
    ostats_.prefetched++;
  } else {
    s = free_slot(param_slots_, unit_end_[size_t(u)] - unit_begin_[size_t(u)]);
    gather_unit(*s, u, false);
    ostats_.gathered++;
  }
  s->state = Slot::InUse;
  s->unit = u;
  // prefetch the next unit into a free slot while this one runs
  if (opts_.overlap && next >= 0 && next != u && size_t(next) < unit_begin_.size() &&
      unit_end_[size_t(next)] > unit_begin_[size_t(next)] && !slot_of(param_slots_, next, Slot::Prefetching))
    for (auto& f : param_slots_)
      if (f.state == Slot::Free && f.capacity >= unit_end_[size_t(next)] - unit_begin_[size_t(next)]) {
        gather_unit(f, next, true);
        f.state = Slot::Prefetching;
        f.since = ++busy_clock_;
        break;
      }
  comm_.progress();
  return s->data;
}

void ZeroOptimizer::release_params(int u) {
  Slot* s = slot_of(param_slots_, u, Slot::InUse);
  LT_CHECK(s, "ZeRO: unit {}'s parameters released but not acquired", u);
  s->state = Slot::Free;
  s->unit = -1;
  comm_.progress();
}

float* ZeroOptimizer::acquire_grads(int u) {
  LT_CHECK(!slot_of(grad_slots_, u, Slot::InUse), "ZeRO: unit {}'s gradients acquired twice", u);
  Slot* s = free_slot(grad_slots_, unit_end_[size_t(u)] - unit_begin_[size_t(u)]);
  s->state = Slot::InUse;
  s->unit = u;
  std::memset(s->data, 0, (unit_end_[size_t(u)] - unit_begin_[size_t(u)]) * sizeof(float));
  return s->data;
}

void ZeroOptimizer::release_grads(int u) {
  Slot* s = slot_of(grad_slots_, u, Slot::InUse);
  LT_CHECK(s, "ZeRO: unit {}'s gradients released but not acquired", u);
  // each owner receives the sum of its piece of the unit and adds it into its shard (finish)
  const size_t ub = unit_begin_[size_t(u)], ue = unit_end_[size_t(u)], S = layout_.shard;
  s->handles.clear();
  s->state = Slot::Reducing;
  s->since = ++busy_clock_;
  for (int r = 0; r < layout_.ranks && layout_.ranks > 1; ++r) {
    const size_t a = std::max(ub, size_t(r) * S), b = std::min(ue, size_t(r + 1) * S);
    if (a >= b) continue;
    if (opts_.overlap) s->handles.push_back(comm_.ireduce_sum(s->data + (a - ub), b - a, r));
    else comm_.reduce_sum(s->data + (a - ub), b - a, r);
  }
  if (!opts_.overlap || layout_.ranks == 1) {
    finish(*s);
    ostats_.reductions_blocking++;
  } else {
    comm_.progress();
    ostats_.reductions_overlapped++;
  }
}

void ZeroOptimizer::grads_ready(int u) {
  // stages 0-1: on the step's last micro-batch, all-reduce the unit's gradients in place now
  if (opts_.stage >= 2 || !opts_.overlap || layout_.ranks == 1 || !last_micro_batch_ || !params_) return;
  for (size_t i = 0; i < tensors_.units.size(); ++i)
    if (tensors_.units[i] == u && !reduced_[i]) {
      overlap_handles_.push_back(comm_.iallreduce_sum((*params_)[i].g, (*params_)[i].n));
      reduced_[i] = true;
      ostats_.reductions_overlapped++;
    }
  comm_.progress();
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
  return grad_shard_ ? grad_shard_ + (layout_.offset[i] + off - own_begin()) : (*params_)[i].g + off;
}

float* ZeroOptimizer::param_at(size_t i, size_t off) {
  return master_ ? master_ + (layout_.offset[i] + off - own_begin()) : (*params_)[i].p + off;
}

void ZeroOptimizer::read_params(float* out, size_t lo, size_t hi) const {
  if (master_) {
    LT_CHECK(lo >= own_begin() && hi <= own_end(), "ZeRO stage 3: rank {} holds parameters [{}, {}), not [{}, {})",
             comm_.rank(), own_begin(), own_end(), lo, hi);
    std::memcpy(out, master_ + (lo - own_begin()), (hi - lo) * sizeof(float));
    return;
  }
  for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t o) {
    std::memcpy(out + (a - lo), (*params_)[i].p + o, (b - a) * sizeof(float));
  });
}

void ZeroOptimizer::visit_params(size_t lo, size_t hi, const std::function<void(const float*, size_t)>& fn) const {
  for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t o) { fn((*params_)[i].p + o, b - a); });
}

void ZeroOptimizer::write_params(const float* in, size_t lo, size_t hi) {
  if (master_) {
    const size_t a = std::max(lo, own_begin()), b = std::min(hi, own_end());
    if (a < b) std::memcpy(master_ + (a - own_begin()), in + (a - lo), (b - a) * sizeof(float));
    return;
  }
  for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t o) {
    std::memcpy((*params_)[i].p + o, in + (a - lo), (b - a) * sizeof(float));
  });
}

void ZeroOptimizer::set_grad_topk(const TopkOptions& o) {
  LT_CHECK(opts_.stage <= 1 && !opts_.overlap, "grad_topk: ZeRO stage {}{} reduces gradients unit by unit; sparse "
           "gradients are exchanged at stages 0-1 without zero_overlap", opts_.stage, opts_.overlap ? " with overlap" : "");
  LT_CHECK(o.workers == 1, "grad_topk_workers: {}: under ZeRO each rank is a worker; grad_topk_workers emulates "
           "ranks in one process without ZeRO (leave it at 1)", o.workers);
  topk_.emplace(o, layout_.count, topk_buffers(*params_));
  size_t mx = 0;
  for (size_t i = 0; i < layout_.count.size(); ++i) mx = std::max(mx, topk_->keep(i));
  topk_send_.resize(2 * mx);
  topk_recv_.resize(2 * mx * size_t(layout_.ranks));
}

// Per tensor: this rank's top-k (values, then indices as float bits) all-gathered, the gradient
// zeroed and every rank's pairs added in rank order: one process with as many workers adds the same.
void ZeroOptimizer::reduce_sparse_gradients() {
  const size_t R = size_t(layout_.ranks);
  for (size_t i = 0; i < layout_.count.size(); ++i) {
    if (frozen_[i] || layout_.count[i] == 0) continue;
    const size_t k = topk_->keep(i);
    float* g = (*params_)[i].g;
    uint32_t* idx = reinterpret_cast<uint32_t*>(topk_send_.data() + k);
    topk_->select(i, 0, g, idx, topk_send_.data());
    comm_.allgather(topk_recv_.data(), topk_send_.data(), 2 * k);
    std::memset(g, 0, layout_.count[i] * sizeof(float));
    for (size_t r = 0; r < R; ++r) {
      const float* part = topk_recv_.data() + r * 2 * k;
      scatter_add(g, reinterpret_cast<const uint32_t*>(part + k), part, k);
    }
  }
}

void ZeroOptimizer::reduce_gradients() {
  if (topk_) return reduce_sparse_gradients();
  const size_t R = size_t(layout_.ranks), K = bucket_elems_, total = layout_.total;
  if (R == 1 || opts_.stage >= 2) return;  // stages 2-3: reduced unit by unit in release_grads
  // overlapped all-reduces (grads_ready) done; the tensors they did not cover, one by one
  bool any = false;
  for (size_t i = 0; i < reduced_.size(); ++i) any = any || reduced_[i];
  if (any) {
    for (auto h : overlap_handles_) comm_.wait(h);
    overlap_handles_.clear();
    for (size_t i = 0; i < reduced_.size(); ++i) {
      if (!reduced_[i]) {
        comm_.allreduce_sum((*params_)[i].g, (*params_)[i].n);
        ostats_.reductions_blocking++;
      }
      reduced_[i] = false;
    }
    return;
  }
  // all-reduce the flat gradient, R·K elements at a time through the bucket
  ostats_.reductions_blocking++;
  for (size_t o = 0; o < total; o += R * K) {
    const size_t hi = std::min(total, o + R * K);
    for_pieces(o, hi, [&](size_t i, size_t a, size_t b, size_t off) {
      std::memcpy(bucket_ + (a - o), (*params_)[i].g + off, (b - a) * sizeof(float));
    });
    comm_.allreduce_sum(bucket_, hi - o);
    for_pieces(o, hi, [&](size_t i, size_t a, size_t b, size_t off) {
      std::memcpy((*params_)[i].g + off, bucket_ + (a - o), (b - a) * sizeof(float));
    });
  }
}

void ZeroOptimizer::gather_parameters() {
  if (opts_.stage == 0 || opts_.stage == 3) return;  // stage 3: gathered unit by unit when used
  const size_t R = size_t(layout_.ranks), S = layout_.shard, K = bucket_elems_, total = layout_.total;
  const size_t me = size_t(comm_.rank());
  for (size_t j = 0; j < S; j += K) {
    const size_t k = std::min(K, S - j);
    float* mine = bucket_ + me * k;
    const size_t lo = me * S + j, hi = std::min(total, lo + k);
    std::memset(mine, 0, k * sizeof(float));
    if (hi > lo) {
      read_params(mine, lo, hi);
    }
    comm_.allgather(bucket_, mine, k);
    for (size_t r = 0; r < R; ++r) {
      if (r == me) continue;  // the model already holds this rank's update
      const size_t a = r * S + j, b = std::min(total, a + k);
      if (b > a) write_params(bucket_ + r * k, a, b);
    }
  }
}

float ZeroOptimizer::step(const AdamWOptions& ao, float lr, int step, float max_grad_norm, float grad_scale,
                          bool skip_nonfinite) {
  ++steps_;
  drain();  // stages 2-3: the last reductions into the shard; stage 3: a prefetch left over
  reduce_gradients();
  const size_t lo = own_begin(), hi = own_end();
  if (grad_scale != 1.0f) {  // unscale (exact for a power of two), as LossScaler::unscale
    const float inv = 1.0f / grad_scale;
    for_pieces(lo, hi, [&](size_t i, size_t a, size_t b, size_t off) {
      if (frozen_[i]) return;
      float* g = grad_at(i, off);
      const ptrdiff_t n = ptrdiff_t(b - a);
#pragma omp parallel for simd schedule(static) if (n >= (1 << 14))
      for (ptrdiff_t e = 0; e < n; ++e) g[e] *= inv;
    });
  }
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
  if (!std::isfinite(norm) && skip_nonfinite) {
    if (grad_shard_) std::memset(grad_shard_, 0, layout_.shard * sizeof(float));
    return float(norm);
  }
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
    g.weight_decay = decay_[i];
    g.frozen = frozen_[i];
    g.lr_factor = lr_factor_[i];
    g.age = topk_ && topk_->age(i) ? topk_->age(i) + off : nullptr;
    adamw_step(std::span<ParamGroup>(&g, 1), ao, lr, step);
    if (offload_) {
      offload_->release(g.m, g.n * sizeof(float));
      offload_->release(g.v, g.n * sizeof(float));
    }
  });
  const uint64_t sent = comm_.stats().total();
  gather_parameters();
  gather_bytes_ += comm_.stats().total() - sent;
  if (grad_shard_) std::memset(grad_shard_, 0, layout_.shard * sizeof(float));
  if (offload_) offload_->release_all();
  return float(norm);
}

}  // namespace lt
