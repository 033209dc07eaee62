// Quantized model folders: a model with the seven linear weights of every layer stored as NF4,
// FP4 (bitsandbytes layout, optionally double-quantized) or LLM.int8, which Model and training
// (QLoRA: base_model set to the folder) load as stored, without quantizing again.
//
// Usage:
//   leantune::QuantizeOptions o;
//   o.type = leantune::Quantization::NF4;
//   o.double_quant = true;
//   leantune::quantize_model("models/SmolLM2-135M", o, "models/SmolLM2-135M-nf4");
//   leantune::Model m("models/SmolLM2-135M-nf4");  // m.config().quantization == Quantization::NF4
#pragma once
#include <string>

#include "leantune/model.h"

namespace leantune {

struct QuantizeOptions {
  Quantization type = Quantization::NF4;  // not None
  int blocksize = 64;                     // NF4 / FP4: a power of two from 64 to 4096 (Int8: one scale per row)
  bool double_quant = false;              // NF4 / FP4: the block scales quantized to 8 bits
};

// leantune::Error saying what is wrong with the options (a block size that is not a power of two
// in range, double quantization with Int8, no type).
void check_quantize_options(const QuantizeOptions& options);

// Writes the quantized folder `out_dir` (file by file, atomically) from the f32 / f16 / bf16 model
// at `model` (HF folder, .safetensors in one, or llama2.c .bin). leantune::Error when the model
// is already quantized or the options are invalid.
void quantize_model(const std::string& model, const QuantizeOptions& options, const std::string& out_dir);

}  // namespace leantune
