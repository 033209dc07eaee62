// Which tokenizer goes with a model, and the tokenizer a GGUF model carries in its metadata
// (tokenizer.ggml.*, read here on the model floor since the tokenizer module cannot read GGUF).
#pragma once
#include <memory>
#include <string>

#include "io/gguf_reader.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace lt {

// The tokenizer.ggml.* metadata of `r` as data, with llama.cpp's defaults for absent keys (model
// "llama": BOS 1, EOS 2, unknown 0, add_bos; "llama-bpe" pre: add_bos). lt::Error naming the
// file and the key when the GGUF has no tokenizer or a key has the wrong type.
gguf::Vocab read_gguf_vocab(const gguf::Reader& r);

// The tokenizer in the metadata of the GGUF at `path`.
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path);

// The tokenizer for the model at `model_path`: `tokenizer_path` when given (tokenizer.json, its
// folder, a llama2.c .bin, or a GGUF whose metadata holds one), else the model's own: a GGUF's
// metadata, the folder of an HF model (or of its .safetensors); lt::Error for a llama2.c
// checkpoint, which carries none.
std::unique_ptr<Tokenizer> load_tokenizer_for_model(const std::string& model_path, const std::string& tokenizer_path);

}  // namespace lt
