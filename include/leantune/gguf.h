// GGUF export: a model (with a PEFT LoRA adapter merged in first) and its tokenizer as a
// llama-architecture GGUF file that llama.cpp loads, or a LoRA adapter alone as a llama.cpp LoRA
// adapter GGUF — what llama.cpp's convert_hf_to_gguf.py / convert_lora_to_gguf.py write.
//
// Usage:
//   leantune::GgufExportOptions o;
//   o.model = "models/SmolLM2-135M";
//   o.adapter = "out/adapter";                 // optional: merged first
//   o.type = leantune::parse_gguf_type("q8_0");
//   leantune::GgufExportResult r = leantune::export_gguf("smollm2-tuned.gguf", o);
//   std::printf("%zu tensors, tokenizer %s\n", r.tensors, r.tokenizer_model.c_str());
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace leantune {

// The tensor type of the linear weights (norms and biases stay f32; a row length that is not a
// multiple of 32 falls back to f16 for the block types).
enum class GgufType { F32, F16, BF16, Q8_0, Q4_0 };
// "f32", "f16", "bf16", "q8_0", "q4_0"; leantune::Error naming the accepted types otherwise.
GgufType parse_gguf_type(std::string_view name);

struct GgufExportOptions {
  std::string model;      // HF folder, .safetensors in one, or llama2.c .bin; "" with adapter: the adapter alone
  std::string adapter;    // PEFT LoRA adapter folder: merged into model, or alone a LoRA adapter GGUF
  std::string tokenizer;  // tokenizer.json, its folder, or a llama2.c tokenizer .bin; "": the model's folder
  std::string base;       // adapter alone: the base model whose config it fits ("": base_model_name_or_path)
  std::string name;       // general.name; "": the model's (or adapter's) file or folder name
  GgufType type = GgufType::F16;
};

struct GgufExportResult {
  size_t tensors = 0;           // tensors written
  bool adapter_only = false;    // a LoRA adapter GGUF (no model)
  std::string tokenizer_model;  // model GGUF: "llama" (SentencePiece-style) or "gpt2" (byte-level BPE)
  std::string tokenizer_path;   // model GGUF: the tokenizer read
  int lora_r = 0;               // adapter GGUF: its rank
  float lora_scaling = 0;       // adapter GGUF: alpha / r (alpha / sqrt(r) with rsLoRA)
};

// Writes `path`. leantune::Error naming the file, tensor or option that is wrong (no model and no
// adapter; a model stored quantized; a tokenizer with more tokens than the model; an adapter with
// biases, which llama.cpp cannot apply; a base model that is not a local path).
GgufExportResult export_gguf(const std::string& path, const GgufExportOptions& options);

}  // namespace leantune
