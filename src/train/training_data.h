// The data of a training run: the tokenizer and the tokenized train / eval examples (formats,
// chat templates and packing in train/data.h), and the bytes they hold, which the memory plan's
// data category and the budget count.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "train/data.h"
#include "train/train_config.h"

namespace lt {

// The tokenizer and the tokenized train / eval examples of a run, with the bytes they hold (the
// ledger's data category): the examples' token vectors counted exactly, the tokenizer's tables as
// the resident memory its loading added.
struct TrainingData {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<Example> train, eval;
  size_t tokenizer_bytes = 0, example_bytes = 0;
};
TrainingData load_training_data(const TrainConfig& config);
// The four int vectors (tokens, labels, positions, document starts) of one B x T batch.
size_t batch_bytes(int B, int T);
// The data category of a run: tokenizer, examples, a step's micro-batches and the eval batches.
size_t training_data_bytes(const TrainingData& d, const TrainConfig& c);

}  // namespace lt
