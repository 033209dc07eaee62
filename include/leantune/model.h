// Model: a Llama-family model's weights loaded for inference (Llama 1/2/3, Mistral, Qwen2, SmolLM2,
// TinyLlama), read from a Hugging Face folder (config.json + safetensors, sharded or not), one
// .safetensors file inside such a folder, a folder written by `leantune quantize`, or a llama2.c
// .bin checkpoint; optionally with a PEFT LoRA adapter merged in and the linear weights quantized
// on load.
//
// A Model is immutable once constructed: any number of threads may use one Model at once, each
// through its own Sequence or Generator (generator.h), which holds that request's KV cache.
// Sequences and Generators keep the weights alive: a Model may be destroyed before them.
//
// Usage:
//   leantune::ModelOptions o;
//   o.adapter = "out/adapter";                      // optional
//   o.quantization = leantune::Quantization::NF4;   // optional
//   leantune::Model model("models/SmolLM2-135M", o);
//   std::printf("%d layers, %llu parameters\n", model.config().n_layers,
//               (unsigned long long)model.parameter_count());
//   std::vector<float> next = model.logits(std::vector<int>{1, 403, 407});  // (vocab_size)
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leantune {

namespace detail {
struct Access;  // src/api: the library's side of the public classes
}

// How the seven linear weights of every layer are held in memory.
enum class Quantization {
  None,  // f32
  NF4,   // 4-bit NormalFloat, bitsandbytes layout (QLoRA)
  FP4,   // 4-bit float, bitsandbytes layout
  Int8,  // LLM.int8: int8 weights with one scale per row, outlier activation columns in f32
  Int4,      // integer 4-bit, symmetric, one scale per block of 32..4096 (llama.cpp's q4_0 grid)
  Int4Asym,  // integer 4-bit with a scale and a minimum per block (q4_1's grid)
  Q8_0,      // llama.cpp's q8_0: int8 in blocks of 32 with one f16 scale each (rows of whole blocks)
  Q4_0,      // llama.cpp's q4_0 as stored: 4-bit in blocks of 32, one f16 scale each (rows of whole blocks)
};

// "nf4", "fp4", "int8", "int4", "int4_asym", "q8_0", "q4_0"; "none" and "" are Quantization::None.
// leantune::Error naming the accepted values otherwise.
Quantization parse_quantization(std::string_view name);
// "none", "nf4", "fp4", "int8", "int4", "int4_asym", "q8_0", "q4_0".
const char* quantization_name(Quantization q);

// How every weight the decode streams is held in memory, for inference (`--weights`). Each sets
// the seven linear weights of every layer and the lm_head (a fifth of a small model's bytes);
// the embedding table stays f32 (a decode step reads one row of it).
enum class Weights {
  F32,   // as ModelOptions::quantization says (f32 unless quantized)
  BF16,  // bfloat16 weights, as stored in a 16-bit file (no f32 copy); inputs rounded to bf16
  F16,   // float16 weights, likewise
  Int8,  // int8 linear weights per row (LLM.int8, outliers per int8_threshold), int8 lm_head
  Q4,    // integer 4-bit, one f32 scale per block of 32 (llama.cpp's q4_0 grid), int8 lm_head
  NF4,   // 4-bit NormalFloat, blocks of 64, int8 lm_head
  Q8_0,  // llama.cpp's q8_0: int8 in blocks of 32, one f16 scale each (1.0625 bytes), q8_0 lm_head;
         // a GGUF's q8_0 tensors are used as stored
  Q4_0,  // llama.cpp's q4_0: 4-bit in blocks of 32, one f16 scale each (0.5625 bytes), q4_0 lm_head,
         // inputs quantized to q8_0 as llama.cpp's product; a GGUF's q4_0 tensors are used as stored
};
// "f32", "bf16", "f16", "int8", "q4", "nf4", "q8_0", "q4_0"; leantune::Error naming the accepted values otherwise.
Weights parse_weights(std::string_view name);
const char* weights_name(Weights w);

// The KV cache's element type (each Sequence's cache).
enum class KvCache {
  F32,   // as computed
  BF16,  // half the bytes: keys and values rounded to bf16 when written (decode reads less)
};

// Which kernel table runs the model.
enum class Kernels {
  Fast,       // the SIMD / oneDNN kernels for this CPU
  Reference,  // the scalar reference kernels (slow; for checking the fast ones)
  LlamaCpp,   // llama.cpp's CPU arithmetic, op for op: the same logits bit for bit as llama.cpp on the
              // same q8_0 / q4_0 weights (Weights::Q8_0 / Q4_0, f32 KV cache, the plain Llama layer;
              // slow: scalar loops)
};

struct ModelOptions {
  std::string adapter;                          // a PEFT LoRA adapter folder merged into the weights; "" none
  Quantization quantization = Quantization::None;  // quantize on load (a quantized folder is used as stored)
  bool double_quant = false;                    // NF4 / FP4: quantize the block scales too
  int quant_blocksize = 64;                     // NF4 / FP4 block size: a power of two from 64 to 4096
  float int8_threshold = 6.0f;                  // Int8: activation columns above it stay in f32
  Weights weights = Weights::F32;               // inference storage; not F32 needs quantization None
  KvCache kv_cache = KvCache::F32;              // every sequence's KV cache
  Kernels kernels = Kernels::Fast;
  int threads = 0;                              // threads per computing call; 0: one per hardware thread
};

enum class RopeLayout {
  Halves,       // Hugging Face: rotate (x[i], x[i + head_dim/2])
  Interleaved,  // llama2.c / Meta: rotate (x[2i], x[2i+1])
};

// A model's hyperparameters as read from its config.json or llama2.c header.
struct ModelConfig {
  std::string arch;             // model_type: llama | mistral | qwen2
  int dim = 0;                  // hidden_size
  int n_layers = 0;             // num_hidden_layers
  int n_heads = 0;              // num_attention_heads
  int n_kv_heads = 0;           // num_key_value_heads
  int head_dim = 0;
  int hidden_dim = 0;           // intermediate_size (MLP width)
  int vocab_size = 0;
  int max_seq_len = 0;          // max_position_embeddings
  float norm_eps = 0;           // rms_norm_eps
  float rope_theta = 0;
  std::string rope_scaling;     // "" (none), linear, dynamic, yarn, longrope or llama3
  RopeLayout rope_layout = RopeLayout::Halves;
  bool tie_embeddings = false;  // lm_head shares the embedding table
  bool attention_bias = false;  // q, k, v projections have biases
  bool o_proj_bias = false;
  bool mlp_bias = false;        // gate, up, down projections have biases
  int sliding_window = 0;       // > 0: the model's attention window
  int bos_token_id = -1, eos_token_id = -1;
  Quantization quantization = Quantization::None;  // a folder written by `leantune quantize`: as stored
};

// The config of the model at `path` without its weights (a folder needs only config.json), checked
// to be usable. leantune::Error naming the file and key otherwise.
ModelConfig read_model_config(const std::string& path);

// What a model's files hold, read without loading the weights (their headers are read and checked).
struct ModelFileInfo {
  ModelConfig config;
  size_t tensor_count = 0;       // tensors in the checkpoint
  uint64_t parameter_count = 0;  // elements of the model's weights (embeddings counted once when tied)
};
ModelFileInfo inspect_model(const std::string& path);

class Model {
 public:
  // Loads the model at `path` (see the top of this file); the adapter, quantization and kernels
  // of `options` apply. leantune::Error naming the file, tensor or key that is wrong.
  explicit Model(const std::string& path, const ModelOptions& options = {});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const std::string& path() const;
  const ModelOptions& options() const;
  const ModelConfig& config() const;
  uint64_t parameter_count() const;
  // Bytes this Model allocated: the weights (f32, or as quantized), shared by every Sequence,
  // and what loading them needed.
  size_t memory_bytes() const;
  // The threads each computing call runs on (options().threads resolved).
  int threads() const;
  // "reference kernels", or the SIMD level of the fast ones ("avx2", "avx512", "scalar").
  std::string kernels_name() const;

  // The next-token logits (vocab_size) after `tokens` (ids in [0, vocab_size), at least one), run
  // from position 0 in a sequence of its own. Thread-safe. For many calls over a growing
  // sequence, use a Sequence (sequence.h), which keeps the KV cache.
  std::vector<float> logits(std::span<const int> tokens) const;

 private:
  friend struct detail::Access;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace leantune
