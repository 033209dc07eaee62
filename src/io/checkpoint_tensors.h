// Every tensor of a checkpoint accounted for. checkpoint_tensors() lists what a Llama-family model
// with a given ModelConfig reads (names, shapes); check_checkpoint_tensors() makes a tensor that is
// neither read nor on the allow-list below an error naming it and its file, and a missing one an
// error naming it, so that no weight is dropped without a word (an HF Llama's o_proj / MLP biases
// used to be).
//
// The allow-list, the one place that says which tensors a checkpoint may carry unread:
//   *.rotary_emb.inv_freq  RoPE frequencies that older transformers versions saved as buffers; we
//                          recompute them from rope_theta / rope_scaling (model/rope_freqs.h).
//   lm_head.weight         with tie_word_embeddings, when it equals model.embed_tokens.weight
//                          (a tied head saved twice); a different one is an error, since a tied
//                          model would silently ignore it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/tensor_set.h"
#include "core/model_config.h"

namespace lt {

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;  // empty for a quantized weight's parts (checked when the weight is read)
};

// Every tensor a model with config `c` reads, in checkpoint order: the embedding, per layer the
// norms, the seven projection weights (for a folder stored quantized, their parts instead:
// io/quant_model.h) and the biases c.has_bias() names, the final norm, and lm_head unless tied.
std::vector<ExpectedTensor> checkpoint_tensors(const ModelConfig& c);

// Whether `t` is on the allow-list above for this config.
bool ignored_checkpoint_tensor(const ModelConfig& c, const TensorSet& ts, const TensorInfo& t);

// lt::Error when `ts` holds a tensor that a model with config `c` does not read and the allow-list
// does not cover (naming the tensor and its file, with a hint when it is a bias the config lacks),
// or lacks or mis-shapes one it reads (naming the tensor, the expected shape and the source).
void check_checkpoint_tensors(const ModelConfig& c, const TensorSet& ts);

}  // namespace lt
