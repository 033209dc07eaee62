// One entry point for "load the model at this path", whatever its format:
//   a directory                                  -> Hugging Face folder (config.json + safetensors)
//   a *.safetensors file with config.json beside -> Hugging Face config + that one file
//   a *.gguf file or one starting with "GGUF"    -> llama-architecture GGUF (io/gguf_model.h)
//   anything else                                -> llama2.c checkpoint
// A Hugging Face repo id ("org/name[@revision]") that is not a path loads from the local cache
// (core/hf_cache.h).
#pragma once
#include <string>

#include "io/tensor_set.h"
#include "core/model_config.h"

namespace lt {

struct ModelFiles {
  ModelConfig config;
  TensorSet tensors;
};

// Loads the config and maps the weights at `path` (see above). Throws lt::Error naming the path.
ModelFiles load_model_files(const std::string& path);

// Only the configuration: a folder needs just its config.json (planning a model whose weights are
// not on this machine), a GGUF just its header (nothing dequantized); other formats are read as
// above and only their config kept.
ModelConfig load_model_config(const std::string& path);

// Whether `path` is loaded as a GGUF: a file named *.gguf or starting with the GGUF magic.
bool is_gguf_model_path(const std::string& path);

}  // namespace lt
