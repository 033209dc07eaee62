// The library's side of the public classes (include/leantune/): their Impl structs, which hold the
// engine's objects, and detail::Access, through which one public class reaches another's.
#pragma once
#include <memory>
#include <string>

#include "infer/generate.h"
#include "leantune/generator.h"
#include "leantune/model.h"
#include "leantune/sequence.h"
#include "leantune/tokenizer.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace leantune {

struct Model::Impl {
  std::string path;
  ModelOptions options;
  ModelConfig config;
  int threads = 1;
  uint64_t parameters = 0;
  std::shared_ptr<const lt::LlamaModel> weights;  // read by every Sequence / Generator
};

struct Tokenizer::Impl {
  std::unique_ptr<lt::Tokenizer> tok;
};

namespace detail {

struct Access {
  using ModelImpl = Model::Impl;
  static const Model::Impl& model(const Model& m) { return *m.impl_; }
  static const lt::Tokenizer& tokenizer(const Tokenizer& t) { return *t.impl_->tok; }
};

using ModelImpl = Access::ModelImpl;

// The public quantization choice and the engine's (nullopt: none).
lt::Quantization engine_quantization(Quantization q);
Quantization public_quantization(lt::Quantization q);
// ModelOptions::weights onto the engine's options: the linear weights' storage and the lm_head's
// (lt::Error when both weights and quantization q are given).
void apply_weights(Weights w, Quantization q, lt::InferenceOptions& io);

// A new sequence state (KV cache, activations, logits) over the model's weights.
std::unique_ptr<lt::LlamaModel> new_sequence_state(const ModelImpl& m, const SequenceOptions& o);

// The public config of an engine ModelConfig.
ModelConfig public_config(const lt::ModelConfig& c);

}  // namespace detail
}  // namespace leantune
