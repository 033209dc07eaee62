// A Llama-family model (f32 weights under Hugging Face names) and its tokenizer as a
// llama-architecture GGUF that llama.cpp loads: llama.* hyperparameters, tokenizer.ggml.*,
// tensors under llama.cpp's names, q/k rows of HF checkpoints permuted to llama.cpp's rotary
// layout (interleaved pairs), as convert_hf_to_gguf.py does.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "io/peft_adapter.h"
#include "core/model_config.h"
#include "tokenizer/gguf_vocab.h"

namespace lt::gguf {

// Reads a tokenizer.json (or its folder), a llama2.c tokenizer .bin or a GGUF model's tokenizer
// and pads it with unused "[PAD{i}]" tokens to `n_vocab` (the model's embedding rows); lt::Error
// naming the file when it has more tokens than that or is not a supported BPE tokenizer.
Vocab read_vocab(const std::string& tokenizer_path, int n_vocab);

// q/k rows (a weight (n_head*HS, C) or a bias (n_head*HS)) from HF's rotate-halves order to the
// interleaved order llama.cpp rotates: row h*HS + 2i + j <- row h*HS + j*HS/2 + i.
std::vector<float> permute_qk(const float* w, int64_t rows, int64_t cols, int n_head);

// Writes `path`: `weight(hf_name)` gives each tensor in f32 (shapes from `c`). Linear weights
// whose row length is a multiple of 32 get `type`, the others f16 when `type` is a block type;
// norms, biases and rope factors stay f32. Returns the number of tensors written.
size_t write_model_gguf(const std::string& path, const ModelConfig& c,
                        const std::function<const float*(const std::string&)>& weight, const Vocab& vocab,
                        TensorType type, const std::string& name);

// Writes a PEFT LoRA adapter (checked against base config `c`) as a llama.cpp LoRA adapter GGUF:
// general.type "adapter", adapter.type "lora", adapter.lora.alpha = s·r (llama.cpp scales by
// alpha / r), blk.N.{attn_q,...}.weight.lora_a (r, in) and .lora_b (out, r), the q/k lora_b rows
// permuted as the base weights are. lt::Error for adapters with biases (llama.cpp has no LoRA
// bias). Returns the number of tensors written.
size_t write_lora_gguf(const std::string& path, const ModelConfig& c, const LoadedAdapter& ad,
                       const std::string& adapter_dir, TensorType type, const std::string& name);

}  // namespace lt::gguf
