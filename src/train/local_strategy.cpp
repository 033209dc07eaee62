// One process without sharding (train/local_strategy.h).
#include "train/local_strategy.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/atomic_file.h"
#include "io/safetensors.h"
#include "train/output_dir.h"
#include "train/train_model.h"

namespace fs = std::filesystem;

namespace lt {

static size_t elements(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

void LocalStrategy::attach(std::vector<TrainParam>& params) {
  params_ = &params;
  groups_.clear();
  for (auto& p : params) {
    LT_CHECK(p.p && p.g && p.m && p.v, "LocalStrategy: trainable tensor '{}' has no parameter, gradient or moments "
             "in the model (built for a sharding strategy?)", p.name);
    ParamGroup g;
    g.param = p.p; g.grad = p.g; g.m = p.m; g.v = p.v; g.n = p.n;
    g.weight_decay = p.decay;
    g.lr_factor = p.lr_factor;
    groups_.push_back(g);
  }
  adam_groups_ = groups_;
}

void LocalStrategy::set_frozen(size_t i, bool frozen, float lr_factor) {
  groups_[i].frozen = frozen;
  groups_[i].lr_factor = lr_factor;
  sync_adam_groups();
}

void LocalStrategy::set_grad_topk(const TopkOptions& o) {
  LT_CHECK(params_, "internal: set_grad_topk before attach");
  std::vector<size_t> counts;
  size_t mx = 0, total = 0;
  for (const auto& p : *params_) {
    counts.push_back(p.n);
    mx = std::max(mx, p.n);
    total += p.n;
  }
  topk_.emplace(o, counts, topk_buffers(*params_));
  for (size_t i = 0; i < groups_.size(); ++i) groups_[i].age = topk_->age(i);
  sync_adam_groups();
  idx_.resize(mx);
  val_.resize(mx);
  if (o.workers > 1) topk_sum_.assign(total, 0.0f);
}

void LocalStrategy::set_adaptive_rank(const AdaptiveRankOptions& o, Arenas& arenas, const MemoryPlan& optimizer_rows) {
  LT_CHECK(params_, "internal: set_adaptive_rank before attach");
  rank_.emplace(o, *params_);
  rank_->set_arena(arenas, optimizer_rows);
}

// AdamW's groups after the moments moved (adaptive rank's release) or a group's flags changed.
void LocalStrategy::sync_adam_groups() {
  for (size_t i = 0; i < groups_.size(); ++i) {
    groups_[i].m = (*params_)[i].m;
    groups_[i].v = (*params_)[i].v;
  }
  adam_groups_ = rank_ ? rank_->optimizer_groups(groups_) : groups_;
}

void LocalStrategy::sparsify(int worker, float* into) {
  for (size_t i = 0, off = 0; i < groups_.size(); off += groups_[i].n, ++i) {
    ParamGroup& g = groups_[i];
    if (g.frozen || g.n == 0) continue;
    const size_t k = topk_->keep(i);
    topk_->select(i, worker, g.grad, idx_.data(), val_.data());
    std::memset(g.grad, 0, g.n * sizeof(float));
    scatter_add(into ? into + off : g.grad, idx_.data(), val_.data(), k);
  }
}

// W emulated workers: worker w's run of accum/W micro-batches is sparsified when it ends; after the
// last one the gradients are the sum of the workers' sparse gradients, in worker order.
void LocalStrategy::micro_batch_done(int a, int accum) {
  if (!topk_ || topk_->options().workers == 1) return;
  const int per = accum / topk_->options().workers;
  if ((a + 1) % per != 0) return;
  sparsify(a / per, topk_sum_.data());
  if (a + 1 < accum) return;
  for (size_t i = 0, off = 0; i < groups_.size(); off += groups_[i].n, ++i)
    if (!groups_[i].frozen && groups_[i].n) std::memcpy(groups_[i].grad, topk_sum_.data() + off, groups_[i].n * sizeof(float));
  std::fill(topk_sum_.begin(), topk_sum_.end(), 0.0f);
}

OptimizerStepResult LocalStrategy::optimizer_step(const OptimizerStepArgs& a) {
  if (topk_ && topk_->options().workers == 1) sparsify(0, nullptr);
  if (a.grad_scale != 1.0f) {  // unscale (exact for a power of two), as LossScaler::unscale
    const float inv = 1.0f / a.grad_scale;
    for (ParamGroup& g : groups_) {
      if (g.frozen || g.n == 0) continue;
      float* __restrict gr = g.grad;
      const ptrdiff_t n = ptrdiff_t(g.n);
#pragma omp parallel for simd schedule(static) if (n >= (1 << 14))
      for (ptrdiff_t i = 0; i < n; i++) gr[i] *= inv;
    }
    if (a.skip_nonfinite && !grads_finite(groups_)) return {0.0f, false};
  }
  const float norm = a.max_grad_norm > 0 ? clip_grad_norm(groups_, a.max_grad_norm) : 0.0f;
  if (!grads_finite(groups_)) return {norm, false};
  adamw_step(adam_groups_, a.adamw, a.lr, a.adam_step);
  if (rank_) {  // after the update, as PEFT's AdaLoRA update_and_allocate
    const bool released = rank_->released();
    rank_->update(a.step);
    if (rank_->released() != released) sync_adam_groups();  // the moments moved
  }
  return {norm, true};
}

// checkpoint-<step> (tensors, moments, trainer_state.json), published in LATEST, then the previous
// one removed. A failed write removes the unfinished folder and says the previous one is intact.
void LocalStrategy::save_checkpoint(const std::string& out_dir, const TrainerState& state, const TrainedModelInfo&,
                                    const TrainHooks& hooks) {
  const std::string name = checkpoint_name(state.step), previous = read_latest(out_dir);
  if (name != previous) fs::remove_all(fs::path(out_dir) / name);  // left by a run killed before publishing it
  write_checkpoint_folder(out_dir, name, previous, [&](const std::string& dir) {
    std::vector<TensorInfo> ts;
    for (size_t i = 0; i < params_->size(); ++i) {
      const TrainParam& p = (*params_)[i];
      for (auto [prefix, ptr] : {std::pair{"param.", p.p}, std::pair{"adam_m.", p.m}, std::pair{"adam_v.", p.v}}) {
        TensorInfo t;
        t.name = prefix + p.name;
        t.dtype = DType::F32;
        t.shape = ptr == p.p ? p.shape : moment_shape(i);  // moments: compacted after adaptive rank's release
        t.data = ptr;
        t.nbytes = elements(t.shape) * sizeof(float);
        ts.push_back(t);
      }
    }
    // error feedback's residuals and ages: a resumed run repeats an uninterrupted one
    for (const auto& [name, ptr] : topk_state())
      ts.push_back({name, DType::F32, (*params_)[size_t(ptr.first)].shape, ptr.second,
                    (*params_)[size_t(ptr.first)].n * sizeof(float)});
    if (rank_)  // masks and importance: a resumed run prunes as an uninterrupted one
      for (TensorInfo& t : rank_->state_tensors()) ts.push_back(t);
    save_safetensors((fs::path(dir) / "state.safetensors").string(), ts);
    write_text_file_atomic((fs::path(dir) / "trainer_state.json").string(), trainer_state_json(state).dump(1));
  });
  if (hooks.on_checkpoint_written) hooks.on_checkpoint_written(state.step);
  publish_checkpoint(out_dir, name, previous);
  if (hooks.on_checkpoint_saved) hooks.on_checkpoint_saved(state.step);
}

TrainerState LocalStrategy::load_checkpoint(const std::string& path, const std::string& out_dir) {
  const std::string dir = resolve_checkpoint(path, out_dir);
  if (dir.empty()) return {};
  // the state first: a corrupt step is reported before megabytes of tensors are read
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  TrainerState r = parse_trainer_state(read_text_file(state_path), state_path);
  TensorSet ts;
  ts.source = dir;
  load_safetensors(dir + "/state.safetensors", ts);
  for (auto& p : *params_) {
    const TensorInfo& t = ts.get("param." + p.name, p.shape);
    convert_to_f32(p.p, t.data, t.dtype, p.n);
  }
  if (rank_) {  // the masks, then (a checkpoint after the final budget) the release, then the moments
    rank_->load_state(ts);
    sync_adam_groups();
  }
  for (size_t i = 0; i < params_->size(); ++i) {
    TrainParam& p = (*params_)[i];
    const std::vector<int64_t> shape = moment_shape(i);
    const size_t n = elements(shape);
    for (auto [prefix, ptr] : {std::pair{"adam_m.", p.m}, std::pair{"adam_v.", p.v}}) {
      const TensorInfo& t = ts.get(prefix + p.name, shape);
      convert_to_f32(ptr, t.data, t.dtype, n);
    }
  }
  for (const auto& [name, ptr] : topk_state()) {  // a checkpoint of a dense run: the state starts at zero
    const auto& p = (*params_)[size_t(ptr.first)];
    if (!ts.find(name)) continue;
    const TensorInfo& t = ts.get(name, p.shape);
    convert_to_f32(ptr.second, t.data, t.dtype, p.n);
  }
  return r;
}

std::vector<std::pair<std::string, std::pair<int, float*>>> LocalStrategy::topk_state() {
  std::vector<std::pair<std::string, std::pair<int, float*>>> r;
  if (!topk_) return r;
  for (size_t i = 0; i < params_->size(); ++i) {
    const std::string& name = (*params_)[i].name;
    if (topk_->residual(i, 0))
      for (int w = 0; w < topk_->options().workers; ++w)
        r.push_back({topk_residual_name(w, name), {int(i), topk_->residual(i, w)}});
    if (topk_->age(i)) r.push_back({topk_age_name(name), {int(i), topk_->age(i)}});
  }
  return r;
}

std::vector<int64_t> LocalStrategy::moment_shape(size_t i) const {
  return rank_ ? rank_->moment_shape(i) : (*params_)[i].shape;
}

TrainedTensorFn LocalStrategy::trained_tensors() {
  return [this](size_t i) -> const float* { return (*params_)[i].p; };
}

}  // namespace lt
