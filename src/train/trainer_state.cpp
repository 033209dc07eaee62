// trainer_state.json: writing and checked parsing (train/trainer_state.h).
#include "train/trainer_state.h"

#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_parse.h"

namespace lt {

namespace {

constexpr const char* kAdvice =
    "The checkpoint is corrupt: resume from an earlier checkpoint-N folder with --resume PATH, or start over "
    "with --overwrite-output-dir";

// A value as a short excerpt for a message (a corrupt file may hold anything, of any size).
std::string excerpt(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  return s.size() <= 40 ? s : s.substr(0, 37) + "...";
}

const nlohmann::json& key(const nlohmann::json& j, const char* k, const std::string& path) {
  auto it = j.find(k);
  LT_CHECK(it != j.end(), "{}: key '{}' is missing. {}", path, k, kAdvice);
  return *it;
}

// A whole number in [lo, hi] (JSON integers only: 1.5, "3" and true are errors).
long long whole(const nlohmann::json& v, const char* k, long long lo, long long hi, const std::string& path) {
  const bool ok = (v.is_number_integer() && !v.is_number_unsigned() && v.get<long long>() >= lo &&
                   v.get<long long>() <= hi) ||
                  (v.is_number_unsigned() && v.get<unsigned long long>() <= static_cast<unsigned long long>(hi) &&
                   static_cast<long long>(v.get<unsigned long long>()) >= lo);
  LT_CHECK(ok, "{}: '{}' is {}; expected a whole number from {} to {}. {}", path, k, excerpt(v), lo, hi, kAdvice);
  return v.is_number_unsigned() ? static_cast<long long>(v.get<unsigned long long>()) : v.get<long long>();
}

std::vector<float> losses(const nlohmann::json& v, size_t steps, const std::string& path) {
  LT_CHECK(v.is_array(), "{}: 'losses' is {}; expected an array of numbers (one per step). {}", path, excerpt(v),
           kAdvice);
  LT_CHECK(v.size() == steps, "{}: 'losses' holds {} values but 'step' is {}; expected one loss per step. {}", path,
           v.size(), steps, kAdvice);
  std::vector<float> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    LT_CHECK(v[i].is_number() && std::isfinite(v[i].get<double>()), "{}: 'losses'[{}] is {}; expected a finite "
             "number. {}", path, i, excerpt(v[i]), kAdvice);
    out.push_back(v[i].get<float>());
  }
  return out;
}

}  // namespace

nlohmann::json trainer_state_json(const TrainerState& s) {
  nlohmann::json j = {{"step", s.step}, {"epoch", s.epoch}, {"position", s.position}, {"losses", s.losses}};
  if (s.loss_scale > 0) {
    j["loss_scale"] = s.loss_scale;
    j["loss_scale_clean_steps"] = s.clean_steps;
    j["skipped_steps"] = s.skipped_steps;
  }
  if (s.metrics_records >= 0) j["metrics_records"] = s.metrics_records;
  return j;
}

TrainerState trainer_state_from_json(const nlohmann::json& j, const std::string& path) {
  LT_CHECK(j.is_object(), "{}: expected a JSON object with step, epoch, position and losses, found {}. {}", path,
           excerpt(j), kAdvice);
  TrainerState s;
  s.step = int(whole(key(j, "step", path), "step", 0, INT_MAX, path));
  s.epoch = int(whole(key(j, "epoch", path), "epoch", 0, INT_MAX, path));
  s.position = size_t(whole(key(j, "position", path), "position", 0, LLONG_MAX, path));
  s.losses = losses(key(j, "losses", path), size_t(s.step), path);
  if (j.contains("loss_scale")) {
    const auto& v = j["loss_scale"];
    LT_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0 && v.get<double>() <= 3.4e38,
             "{}: 'loss_scale' is {}; expected a positive finite number. {}", path, excerpt(v), kAdvice);
    s.loss_scale = v.get<float>();
  }
  if (j.contains("loss_scale_clean_steps"))
    s.clean_steps = int(whole(j["loss_scale_clean_steps"], "loss_scale_clean_steps", 0, INT_MAX, path));
  if (j.contains("skipped_steps")) s.skipped_steps = int(whole(j["skipped_steps"], "skipped_steps", 0, s.step, path));
  if (j.contains("metrics_records"))
    s.metrics_records = long(whole(j["metrics_records"], "metrics_records", 0, LONG_MAX, path));
  return s;
}

TrainerState parse_trainer_state(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = parse_json(text, path);  // depth-bounded; the message names the file, line and column
  } catch (const Error& e) {
    fail("{} {}", e.what(), kAdvice);
  }
  return trainer_state_from_json(j, path);
}

}  // namespace lt
