// libFuzzer harness: a training YAML through load_train_config (a path: the bytes go through a
// memfd), then validate_train_config and train_model_options as `leantune train` does.
#include "fuzz_common.h"
#include "train/train_config.h"

namespace lt::fuzz {

void train_yaml(std::string_view bytes) {
  TrainConfig c = load_train_config(bytes_path(bytes));
  validate_train_config(c);
  (void)train_model_options(c);
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::train_yaml)
