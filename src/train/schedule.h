// Learning-rate schedules and staged unfreezing.
//
// lr_at reproduces transformers' get_{constant,linear,cosine}_schedule_with_warmup as LambdaLR
// applies them: lr = base_lr · λ(step), where step is the number of optimizer steps already taken
// (0 for the first update), λ is computed in double exactly as in transformers/optimization.py,
// and the cosine schedule uses num_cycles = 0.5 (half a cosine from 1 down to 0).
//
// UnfreezeSchedule says which transformer layers are trainable at a step, and with which lr
// factor, for "gradual unfreezing" (top layers first). See the class comment for the semantics.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace lt {

enum class ScheduleKind { Constant, Linear, Cosine };

// Parses "constant" (or transformers' "constant_with_warmup"), "linear", "cosine";
// lt::Error listing the accepted names otherwise.
ScheduleKind parse_schedule_kind(std::string_view name);
const char* schedule_kind_name(ScheduleKind kind);

// Defaults follow transformers.TrainingArguments (learning_rate 5e-5, linear, no warmup).
struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::Linear;
  double lr = 5e-5;           // base (peak) learning rate
  int warmup_steps = 0;       // linear warmup from 0 over this many steps; wins over warmup_ratio
  double warmup_ratio = 0.0;  // used when warmup_steps == 0: ceil(total_steps · ratio), as HF
};

// The warmup length actually used for a run of total_steps optimizer steps.
int warmup_steps_for(const ScheduleOptions& opts, int total_steps);

// The learning rate for the update that follows `step` completed optimizer steps (0-based),
// in a run of total_steps steps. Matches the transformers schedule of the same name exactly (up to
// the final rounding to float).
float lr_at(const ScheduleOptions& opts, int step, int total_steps);

// One stage of gradual unfreezing: from optimizer step start_step on, layers >= first_layer are
// trainable. Layers that this stage newly unfreezes train with lr · lr_factor.
struct UnfreezeStage {
  int start_step = 0;
  int first_layer = 0;  // layers >= first_layer are trainable (the top of the stack unfreezes first)
  float lr_factor = 1.0f;
};

// Staged unfreezing, parsed from "start_step:first_layer:lr_factor,..." e.g.
// "0:4:1.0,100:2:0.5,200:0:0.25" on a 6-layer model means:
//   steps   0..99   layers 4,5 train (factor 1.0);
//   steps 100..199  layers 2,3 join with factor 0.5 (4,5 keep 1.0);
//   steps 200..     layers 0,1 join with factor 0.25.
// Semantics: the active stage at `step` is the last one with start_step <= step. A layer is
// trainable iff layer >= active.first_layer. A trainable layer's lr factor is the factor of the
// stage that first unfroze it and stays fixed afterwards (lower layers, unfrozen later, are
// usually given smaller factors: discriminative fine-tuning). Frozen layers report factor 0.
// Rules checked by parse (lt::Error naming the stage and what was wrong): at least one stage;
// three ':'-separated fields per stage; integers and a number that parse completely; the first
// stage starts at step 0; start steps strictly increase; first_layer >= 0 and strictly decreases
// (each stage unfreezes at least one more layer; nothing is ever refrozen); lr_factor finite > 0.
// A default-constructed schedule has no stages: every layer is trainable with factor 1.
class UnfreezeSchedule {
 public:
  UnfreezeSchedule() = default;
  static UnfreezeSchedule parse(std::string_view spec);

  // lt::Error when a stage names a first layer outside [0, n_layers).
  void check_layers(int n_layers) const;

  bool layer_trainable(int layer, int step) const;
  float lr_factor(int layer, int step) const;
  const std::vector<UnfreezeStage>& stages() const { return stages_; }
  bool empty() const { return stages_.empty(); }

 private:
  int active_stage(int step) const;  // index into stages_; stages_ non-empty
  std::vector<UnfreezeStage> stages_;
};

}  // namespace lt
