// TrainerConfig -> lt::TrainConfig (api/trainer_config.h), and TrainerConfig::from_args.
#include "api/trainer_config.h"

namespace lt {

TrainConfig read_trainer_config(const leantune::TrainerConfig& c) {
  TrainConfig cfg = c.yaml_text.empty() ? load_train_config(c.yaml_file)  // "": the defaults
                    : parse_train_config_text(c.yaml_text, c.yaml_file.empty() ? "<config text>" : c.yaml_file);
  apply_train_flags(cfg, c.flags);
  return cfg;
}

}  // namespace lt

namespace leantune {

TrainerConfig TrainerConfig::from_args(const std::vector<std::string>& args) {
  TrainerConfig c;
  size_t first = 0;
  if (!args.empty() && args[0].rfind("--", 0) != 0) c.yaml_file = args[first++];
  c.flags.assign(args.begin() + ptrdiff_t(first), args.end());
  return c;
}

}  // namespace leantune
