// A llama-architecture GGUF as a model: the ModelConfig from general.architecture and the llama.*
// keys, the tensors under Hugging Face names (io/gguf_names.h). f32 / f16 / bf16 tensors point
// into the mapped file; q8_0 / q4_0 ones are dequantized to f32 into memory the TensorSet owns, or,
// asked for q8_0 (q4_0) weights when every linear weight is q8_0 (q4_0), those are kept as stored: the
// model is then a quantized one (ModelConfig::quantization q8_0 / q4_0), each weight's blocks the part "W.blocks"
// (io/quant_model.h's layout), in place in the mapped file (q/k: un-permuted copies).
// llama.cpp stores the q/k rows of each head in interleaved rotary order; they are put back in
// HF's rotate-halves order (the inverse of gguf_export's permute_qk), so the model runs with
// RopeLayout::Halves exactly as the safetensors it came from, and adapters trained on it are
// HF-shaped. rope_freqs.weight (Llama 3 rope scaling) becomes ModelConfig::rope_scaling.
#pragma once
#include <string>

#include "core/model_config.h"
#include "io/gguf_reader.h"
#include "io/model_files.h"

namespace lt {

// The configuration of the model in `r`; lt::Error naming the file and the key for another
// architecture (the supported list: llama), a missing or out-of-range hyperparameter, a
// mixture-of-experts or otherwise unsupported llama variant.
ModelConfig gguf_model_config(const gguf::Reader& r);

// The config and the tensors of the GGUF at `path`; every tensor is one a llama model reads
// (lt::Error naming it otherwise).
// blocks_as_stored (q8_0 or q4_0): the linear weights as blocks of that type when all of them are of
// it (else as without it).
ModelFiles load_gguf_model(const std::string& path, Quantization blocks_as_stored = std::nullopt);

// lt::Error, naming the first tensor that is not, unless every linear weight and the lm_head
// (`output`, else the tied `token_embd`) of the GGUF at `path` are stored as `type` (q8_0 / q4_0):
// what running with llama.cpp's arithmetic needs (llama.cpp multiplies the stored types).
void check_gguf_stored_as(const std::string& path, QuantType type);

}  // namespace lt
