// The base a sweep's runs share (train/base_cache.h).
#include "train/base_cache.h"

#include <fmt/format.h>

#include "train/train_model.h"

namespace lt {

const ModelFiles& BaseCache::files(const std::string& path) {
  if (!files_ || path != path_) {
    block_.reset();  // converted from the previous files
    files_ = std::make_unique<ModelFiles>(load_model_files(path));
    path_ = path;
    ++file_loads_;
  }
  return *files_;
}

std::shared_ptr<FrozenBlock> BaseCache::frozen(const std::string& path, const ModelConfig& config,
                                               const TrainModelOptions& o) {
  if (o.method == Method::Lora && o.lora.mutates_base()) return nullptr;  // W_res is the run's own
  QuantSpec qs;
  std::string key = fmt::format("{}\nprecision {}\n", path, precision_name(o.precision));
  if (quantized_base(config, o, &qs))
    key += fmt::format("quantized {} block {} double {}\n", quant_type_name(qs.type), qs.blocksize, qs.double_quant);
  for (const auto& b : plan_training(config, o).buffers)
    if (b.cat == Category::FrozenWeights) key += fmt::format("{} {}\n", b.name, b.bytes);
  if (block_ && block_->filled && block_->key == key) return block_;  // (an unfilled one: its model failed)
  block_ = std::make_shared<FrozenBlock>();
  block_->key = std::move(key);
  ++frozen_builds_;
  return block_;
}

}  // namespace lt
