// libFuzzer harness: a checkpoint's trainer_state.json through parse_trainer_state, and the JSON
// trainer_state_json writes back for the state it accepts (which must parse to the same state).
#include "core/error.h"
#include "fuzz_common.h"
#include "train/trainer_state.h"

#include <nlohmann/json.hpp>

namespace lt::fuzz {

void trainer_state(std::string_view bytes) {
  const TrainerState s = parse_trainer_state(std::string(bytes), "trainer_state.json");
  const TrainerState back = trainer_state_from_json(trainer_state_json(s), "round trip");
  LT_ASSERT(back.step == s.step && back.epoch == s.epoch && back.position == s.position &&
            back.losses.size() == s.losses.size() && back.metrics_records == s.metrics_records);
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::trainer_state)
