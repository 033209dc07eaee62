// Learning-rate schedules (transformers' formulas, line for line) and the staged-unfreezing parser.
#include "train/schedule.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>
#include <type_traits>
#include <string>

#include "core/error.h"

namespace lt {

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "constant" || name == "constant_with_warmup") return ScheduleKind::Constant;
  if (name == "linear") return ScheduleKind::Linear;
  if (name == "cosine") return ScheduleKind::Cosine;
  fail("unknown learning-rate schedule '{}' (expected constant, linear or cosine)", name);
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Linear: return "linear";
    case ScheduleKind::Cosine: return "cosine";
  }
  return "?";
}

int warmup_steps_for(const ScheduleOptions& opts, int total_steps) {
  LT_CHECK(opts.warmup_steps >= 0, "warmup_steps must be >= 0 (got {})", opts.warmup_steps);
  LT_CHECK(opts.warmup_ratio >= 0.0 && opts.warmup_ratio <= 1.0, "warmup_ratio must be in [0, 1] (got {})",
           opts.warmup_ratio);
  if (opts.warmup_steps > 0) return opts.warmup_steps;
  return int(std::ceil(double(total_steps) * opts.warmup_ratio));
}

float lr_at(const ScheduleOptions& opts, int step, int total_steps) {
  const int warmup = warmup_steps_for(opts, total_steps);
  double lambda = 1.0;
  // transformers/optimization.py, _get_*_schedule_with_warmup_lr_lambda
  if (step < warmup) {
    lambda = double(step) / double(std::max(1, warmup));
  } else if (opts.kind == ScheduleKind::Linear) {
    lambda = std::max(0.0, double(total_steps - step) / double(std::max(1, total_steps - warmup)));
  } else if (opts.kind == ScheduleKind::Cosine) {
    const double num_cycles = 0.5;
    const double progress = double(step - warmup) / double(std::max(1, total_steps - warmup));
    lambda = std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress)));
  }
  return float(opts.lr * lambda);
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

template <class T>
T parse_number(std::string_view field, std::string_view what, std::string_view stage, std::string_view spec) {
  field = trim(field);
  T value{};
  const char* end = field.data() + field.size();
  auto [ptr, ec] = std::from_chars(field.data(), end, value);
  LT_CHECK(!field.empty() && ec == std::errc() && ptr == end,
           "unfreeze schedule '{}': stage '{}': {} '{}' is not a valid {}", spec, stage, what, field,
           std::is_integral_v<T> ? "integer" : "number");
  return value;
}

}  // namespace

UnfreezeSchedule UnfreezeSchedule::parse(std::string_view spec) {
  UnfreezeSchedule out;
  LT_CHECK(!trim(spec).empty(),
           "unfreeze schedule is empty (expected 'start_step:first_layer:lr_factor,...', e.g. '0:4:1.0,100:0:0.5')");
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view stage = trim(spec.substr(pos, comma - pos));
    pos = comma + 1;
    LT_CHECK(!stage.empty(), "unfreeze schedule '{}': empty stage (stray ',')", spec);
    const size_t c1 = stage.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : stage.find(':', c1 + 1);
    LT_CHECK(c2 != std::string_view::npos && stage.find(':', c2 + 1) == std::string_view::npos,
             "unfreeze schedule '{}': stage '{}' must have three ':'-separated fields "
             "start_step:first_layer:lr_factor",
             spec, stage);
    UnfreezeStage s;
    s.start_step = parse_number<int>(stage.substr(0, c1), "start_step", stage, spec);
    s.first_layer = parse_number<int>(stage.substr(c1 + 1, c2 - c1 - 1), "first_layer", stage, spec);
    s.lr_factor = parse_number<float>(stage.substr(c2 + 1), "lr_factor", stage, spec);
    LT_CHECK(s.start_step >= 0, "unfreeze schedule '{}': stage '{}': start_step must be >= 0", spec, stage);
    LT_CHECK(s.first_layer >= 0, "unfreeze schedule '{}': stage '{}': first_layer must be >= 0", spec, stage);
    LT_CHECK(std::isfinite(s.lr_factor) && s.lr_factor > 0.0f,
             "unfreeze schedule '{}': stage '{}': lr_factor must be a finite number > 0", spec, stage);
    if (out.stages_.empty()) {
      LT_CHECK(s.start_step == 0,
               "unfreeze schedule '{}': the first stage must start at step 0 (got {}), otherwise nothing "
               "would train before it",
               spec, s.start_step);
    } else {
      const UnfreezeStage& prev = out.stages_.back();
      LT_CHECK(s.start_step > prev.start_step,
               "unfreeze schedule '{}': stage '{}': start_step {} must be greater than the previous stage's {}",
               spec, stage, s.start_step, prev.start_step);
      LT_CHECK(s.first_layer < prev.first_layer,
               "unfreeze schedule '{}': stage '{}': first_layer {} must be smaller than the previous stage's {} "
               "(each stage unfreezes more layers, top layers first)",
               spec, stage, s.first_layer, prev.first_layer);
    }
    out.stages_.push_back(s);
    if (comma == spec.size()) break;
  }
  return out;
}

void UnfreezeSchedule::check_layers(int n_layers) const {
  for (const UnfreezeStage& s : stages_)
    LT_CHECK(s.first_layer < n_layers,
             "unfreeze schedule: stage {}:{}:{} names first_layer {} but the model has {} layers (0..{})",
             s.start_step, s.first_layer, s.lr_factor, s.first_layer, n_layers, n_layers - 1);
}

int UnfreezeSchedule::active_stage(int step) const {
  int k = 0;
  while (k + 1 < int(stages_.size()) && stages_[k + 1].start_step <= step) k++;
  return k;
}

bool UnfreezeSchedule::layer_trainable(int layer, int step) const {
  if (stages_.empty()) return true;
  return layer >= stages_[active_stage(step)].first_layer;
}

float UnfreezeSchedule::lr_factor(int layer, int step) const {
  if (stages_.empty()) return 1.0f;
  const int k = active_stage(step);
  if (layer < stages_[k].first_layer) return 0.0f;
  // The earliest stage whose first_layer already covers this layer unfroze it.
  for (int j = 0; j <= k; j++)
    if (layer >= stages_[j].first_layer) return stages_[j].lr_factor;
  return 0.0f;
}

}  // namespace lt
