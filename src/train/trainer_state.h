// The resume state of a training checkpoint (trainer_state.json of a single-process checkpoint,
// the same keys in a sharded checkpoint's manifest.json): the step, the data position, the losses
// so far, the fp16 loss scaler's state and how many metrics.jsonl records the run had written.
// Parsing checks every key's type and range, so a corrupt file is a clear error naming the file
// and the key, never a step that wraps to 0 and silently restarts the run.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lt {

struct TrainerState {
  int step = 0, epoch = 0;
  size_t position = 0;        // batches of the epoch already consumed (global, not per rank)
  std::vector<float> losses;  // per optimizer step so far (exactly `step` of them)
  // fp16: the loss scaler's state (loss_scale 0: none saved)
  float loss_scale = 0;
  int clean_steps = 0, skipped_steps = 0;
  long metrics_records = -1;  // metrics.jsonl records written when the checkpoint was saved (-1: not recorded)
};

// The keys of `s` (what trainer_state.json holds; a manifest adds its own keys).
nlohmann::json trainer_state_json(const TrainerState& s);

// Reads the keys of a parsed trainer_state.json / manifest.json; lt::Error naming `path` and the
// key on a missing key, a wrong type or a value out of range.
TrainerState trainer_state_from_json(const nlohmann::json& j, const std::string& path);

// Parses the text of a trainer_state.json (`path` for messages); lt::Error on malformed JSON too.
TrainerState parse_trainer_state(const std::string& text, const std::string& path);

}  // namespace lt
