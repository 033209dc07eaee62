// Quantized model folders: what `leantune quantize` writes, and reading their quantized weights
// back without re-quantizing (training on a quantized base). The file layout is documented at the
// top of quant_model.cpp.
#pragma once
#include <string>

#include "io/tensor_set.h"
#include "core/model_config.h"
#include "quant/quant_tensor.h"

namespace lt {

// The stored format of a quantized folder's linear weights (ModelConfig::quantization set).
QuantSpec model_quant_spec(const ModelConfig& c);

// Quantizes the seven linear weights of every layer of the model at `model` (HF folder,
// .safetensors + config.json, or llama2.c .bin; f32/f16/bf16) into the folder `out_dir`, written
// atomically file by file. lt::Error when the model is already quantized or the spec is invalid.
void quantize_model(const std::string& model, const QuantSpec& spec, const std::string& out_dir);
// The same from a config and tensors already at hand (a fine-tune's weights in memory): `source`
// (the base model's path) supplies config.json and the tokenizer files when it is a Hugging Face
// folder, and names the model in messages.
void quantize_model_tensors(const ModelConfig& config, const TensorSet& tensors, const std::string& source,
                            const QuantSpec& spec, const std::string& out_dir);

// The quantized weight `name` (rows, cols) of a quantized folder's tensors, read in place.
// lt::Error naming the tensor when a part is missing, of the wrong dtype or of the wrong size.
QuantTensor load_quant_tensor(const TensorSet& ts, const std::string& name, const QuantSpec& spec, int64_t rows,
                              int64_t cols);

}  // namespace lt
