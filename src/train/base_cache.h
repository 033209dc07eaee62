// BaseCache: the base model that a series of runs in one process shares (`leantune sweep`): its
// files, mapped once, and its frozen weights as the first run converted them (to 16 bits, quantized,
// or f32). The converted weights are one FrozenBlock: the plan's frozen_weights arena, allocated and
// filled once, then sealed read-only and lent to each later run whose frozen arena is the same
// buffers (TrainModel borrows it: Arenas::allocate(plan, lender, FrozenWeights)); each run allocates
// only its own trainable, gradient, optimizer, activation and scratch arenas. A run whose frozen
// arena differs (another precision, quantization or block size; LoRA biases trained or not) gets a
// new block, the old one released; a run that rewrites its base (PiSSA / OLoRA) gets none.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/memory_plan.h"
#include "io/model_files.h"
#include "quant/quant_tensor.h"

namespace lt {

struct ModelConfig;
struct TrainModelOptions;

// One converted frozen base: the frozen_weights arena and the quantized linears' descriptors
// (pointing into it), by linear index (layer · kNumProj + projection).
struct FrozenBlock {
  std::string key;              // the model path, the frozen buffers and the quantization format
  Arenas arenas;                // only the frozen_weights category
  std::vector<QuantTensor> quant;
  bool filled = false;          // converted (by the first model built on it) and sealed
  int borrowers = 0;            // models built on it after the first
};

class BaseCache {
 public:
  // The files at `path`: loaded (load_model_files) on the first call, shared after.
  const ModelFiles& files(const std::string& path);
  // The frozen block for a model of (config, options) from `path`: the current one when its key
  // matches, else a new empty one (the TrainModel built on it fills it); null when the run rewrites
  // its frozen weights (PiSSA / OLoRA initialisation), which then converts its own.
  std::shared_ptr<FrozenBlock> frozen(const std::string& path, const ModelConfig& config,
                                      const TrainModelOptions& options);
  int file_loads() const { return file_loads_; }      // times the files were loaded
  int frozen_builds() const { return frozen_builds_; }  // times a frozen block was made (converted)

 private:
  std::string path_;
  std::unique_ptr<ModelFiles> files_;
  std::shared_ptr<FrozenBlock> block_;
  int file_loads_ = 0, frozen_builds_ = 0;
};

}  // namespace lt
