// The public TrainerConfig (include/leantune/trainer.h) read into the engine's TrainConfig: its
// YAML file or YAML text (or the defaults), then its flags — what the Trainer and plan_training
// both start from.
#pragma once
#include "leantune/trainer.h"
#include "train/train_config.h"

namespace lt {

TrainConfig read_trainer_config(const leantune::TrainerConfig& c);

}  // namespace lt
