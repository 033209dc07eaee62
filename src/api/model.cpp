// model.h: Model (the engine's LlamaModel holding the weights, shared read-only by every sequence
// state made over it), model configs and file inspection.
#include "leantune/model.h"

#include <omp.h>

#include "api/access.h"
#include "api/guard.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "io/model_files.h"
#include "kernels/ops.h"
#include "leantune/machine.h"
#include "quant/quant_tensor.h"

namespace leantune {

Quantization parse_quantization(std::string_view name) {
  return detail::guard([&] {
    if (name.empty() || name == "none") return Quantization::None;
    switch (lt::parse_quant_type(name)) {
      case lt::QuantType::NF4: return Quantization::NF4;
      case lt::QuantType::FP4: return Quantization::FP4;
      case lt::QuantType::Int8: return Quantization::Int8;
      case lt::QuantType::Int4: return Quantization::Int4;
      case lt::QuantType::Int4Asym: return Quantization::Int4Asym;
      case lt::QuantType::Q8_0: return Quantization::Q8_0;
      case lt::QuantType::Q4_0: return Quantization::Q4_0;
    }
    return Quantization::None;
  });
}

const char* quantization_name(Quantization q) {
  switch (q) {
    case Quantization::NF4: return "nf4";
    case Quantization::FP4: return "fp4";
    case Quantization::Int8: return "int8";
    case Quantization::Int4: return "int4";
    case Quantization::Int4Asym: return "int4_asym";
    case Quantization::Q8_0: return "q8_0";
    case Quantization::Q4_0: return "q4_0";
    case Quantization::None: break;
  }
  return "none";
}

namespace detail {

lt::Quantization engine_quantization(Quantization q) {
  switch (q) {
    case Quantization::NF4: return lt::QuantType::NF4;
    case Quantization::FP4: return lt::QuantType::FP4;
    case Quantization::Int8: return lt::QuantType::Int8;
    case Quantization::Int4: return lt::QuantType::Int4;
    case Quantization::Int4Asym: return lt::QuantType::Int4Asym;
    case Quantization::Q8_0: return lt::QuantType::Q8_0;
    case Quantization::Q4_0: return lt::QuantType::Q4_0;
    case Quantization::None: break;
  }
  return std::nullopt;
}

Quantization public_quantization(lt::Quantization q) {
  if (!q) return Quantization::None;
  switch (*q) {
    case lt::QuantType::NF4: return Quantization::NF4;
    case lt::QuantType::FP4: return Quantization::FP4;
    case lt::QuantType::Int8: return Quantization::Int8;
    case lt::QuantType::Int4: return Quantization::Int4;
    case lt::QuantType::Int4Asym: return Quantization::Int4Asym;
    case lt::QuantType::Q8_0: return Quantization::Q8_0;
    case lt::QuantType::Q4_0: return Quantization::Q4_0;
  }
  return Quantization::None;
}

Weights parse_weights_name(std::string_view name) {
  static constexpr std::pair<std::string_view, Weights> kNames[] = {{"f32", Weights::F32}, {"bf16", Weights::BF16},
      {"f16", Weights::F16}, {"int8", Weights::Int8}, {"q4", Weights::Q4}, {"nf4", Weights::NF4},
      {"q8_0", Weights::Q8_0}, {"q4_0", Weights::Q4_0}};
  for (const auto& [n, w] : kNames)
    if (n == name) return w;
  lt::fail("weights '{}': expected f32, bf16, f16, int8, q4, nf4, q8_0 or q4_0", name);
}

ModelConfig public_config(const lt::ModelConfig& c) {
  ModelConfig p;
  p.arch = c.arch;
  p.dim = c.dim;
  p.n_layers = c.n_layers;
  p.n_heads = c.n_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = c.head_dim;
  p.hidden_dim = c.hidden_dim;
  p.vocab_size = c.vocab_size;
  p.max_seq_len = c.max_seq_len;
  p.norm_eps = c.norm_eps;
  p.rope_theta = c.rope_theta;
  p.rope_scaling = c.rope_scaling.type;
  p.rope_layout = c.rope_layout == lt::RopeLayout::Halves ? RopeLayout::Halves : RopeLayout::Interleaved;
  p.tie_embeddings = c.tie_embeddings;
  p.attention_bias = c.attention_bias;
  p.o_proj_bias = c.o_proj_bias;
  p.mlp_bias = c.mlp_bias;
  p.sliding_window = c.sliding_window;
  p.bos_token_id = c.bos_token_id;
  p.eos_token_id = c.eos_token_id;
  p.quantization = public_quantization(c.quantization);
  return p;
}

// Elements of every weight the inference plan lists for `c` unquantized (embeddings once when tied).
static uint64_t count_parameters(const lt::ModelConfig& c) {
  lt::ModelConfig f32 = c;
  f32.quantization.reset();
  lt::InferenceOptions o;
  o.context = 1;
  uint64_t n = 0;
  for (const auto& b : lt::plan_inference(f32, o).buffers)
    if (b.cat == lt::Category::FrozenWeights) n += b.bytes / sizeof(float);
  return n;
}

// ModelOptions::weights onto the engine's options (the linear weights' storage and the lm_head's)
void apply_weights(Weights w, Quantization q, lt::InferenceOptions& io) {
  if (w == Weights::F32) return;
  LT_CHECK(q == Quantization::None, "weights {} and quantization {} both given; --weights sets the quantization "
           "itself: give one of them", weights_name(w), quantization_name(q));
  switch (w) {
    case Weights::BF16: io.linear16 = lt::DType::BF16, io.head = lt::WeightKind::BF16; return;
    case Weights::F16: io.linear16 = lt::DType::F16, io.head = lt::WeightKind::F16; return;
    case Weights::Int8: io.quantization = lt::QuantType::Int8; break;
    case Weights::Q4: io.quantization = lt::QuantType::Int4, io.quant_blocksize = 32, io.double_quant = false; break;
    case Weights::NF4: io.quantization = lt::QuantType::NF4, io.quant_blocksize = 64, io.double_quant = false; break;
    case Weights::Q8_0:
      io.quantization = lt::QuantType::Q8_0, io.quant_blocksize = 32, io.double_quant = false;
      io.head = lt::WeightKind::Q8_0;
      return;
    case Weights::Q4_0:
      io.quantization = lt::QuantType::Q4_0, io.quant_blocksize = 32, io.double_quant = false;
      io.head = lt::WeightKind::Q4_0;
      return;
    case Weights::F32: return;
  }
  io.head = lt::WeightKind::Int8;
}

// The engine's inference options for a sequence of `o` over a model loaded with `m`.
static lt::InferenceOptions inference_options(const ModelOptions& m, int context, int prefill_block) {
  lt::InferenceOptions io;
  io.context = context;
  io.prefill_block = prefill_block;
  io.quantization = engine_quantization(m.quantization);
  io.double_quant = m.double_quant;
  io.quant_blocksize = m.quant_blocksize;
  io.int8_threshold = m.int8_threshold;
  apply_weights(m.weights, m.quantization, io);
  io.kv_cache = m.kv_cache == KvCache::BF16 ? lt::DType::BF16 : lt::DType::F32;
  io.llama_cpp_numerics = m.kernels == Kernels::LlamaCpp;
  return io;
}

std::unique_ptr<lt::LlamaModel> new_sequence_state(const ModelImpl& m, const SequenceOptions& o) {
  ThreadScope threads(m.threads);  // the state's per-thread scratch is sized for the model's threads
  return std::make_unique<lt::LlamaModel>(m.weights, inference_options(m.options, o.context, o.prefill_block));
}

}  // namespace detail

ModelConfig read_model_config(const std::string& path) {
  return detail::guard([&] {
    const lt::ModelConfig c = lt::load_model_config(path);
    lt::validate_config(c, path);
    return detail::public_config(c);
  });
}

ModelFileInfo inspect_model(const std::string& path) {
  return detail::guard([&] {
    const lt::ModelFiles files = lt::load_model_files(path);
    lt::validate_config(files.config, path);
    ModelFileInfo info;
    info.config = detail::public_config(files.config);
    info.tensor_count = files.tensors.all().size();
    info.parameter_count = detail::count_parameters(files.config);
    return info;
  });
}

Weights parse_weights(std::string_view name) {
  return detail::guard([&] { return detail::parse_weights_name(name); });
}

const char* weights_name(Weights w) {
  switch (w) {
    case Weights::BF16: return "bf16";
    case Weights::F16: return "f16";
    case Weights::Int8: return "int8";
    case Weights::Q4: return "q4";
    case Weights::NF4: return "nf4";
    case Weights::Q8_0: return "q8_0";
    case Weights::Q4_0: return "q4_0";
    case Weights::F32: break;
  }
  return "f32";
}

Model::Model(const std::string& path, const ModelOptions& options) {
  impl_ = detail::guard([&] {
    auto m = std::make_unique<Impl>();
    m->path = path;
    m->options = options;
    m->threads = resolve_threads(options.threads);
    detail::ThreadScope threads(m->threads);
    // the weights, with the smallest sequence state of their own (every use makes its own)
    const lt::Ops& ops = options.kernels == Kernels::Reference ? lt::ops_ref() : lt::ops_cpu();
    auto weights = lt::LlamaModel::load(path, detail::inference_options(options, 1, 1), ops);
    if (!options.adapter.empty()) weights->merge_adapter(options.adapter);
    m->config = detail::public_config(weights->config());
    m->parameters = detail::count_parameters(weights->config());
    m->weights = std::move(weights);
    return m;
  });
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const std::string& Model::path() const { return impl_->path; }
const ModelOptions& Model::options() const { return impl_->options; }
const ModelConfig& Model::config() const { return impl_->config; }
uint64_t Model::parameter_count() const { return impl_->parameters; }
int Model::threads() const { return impl_->threads; }

size_t Model::memory_bytes() const { return impl_->weights->arenas().allocated_total(); }

std::string Model::kernels_name() const {
  switch (impl_->options.kernels) {
    case Kernels::Reference: return "reference kernels";
    case Kernels::LlamaCpp: return "llama.cpp numerics";
    case Kernels::Fast: break;
  }
  return lt::isa_name(lt::cpu_isa());
}

std::vector<float> Model::logits(std::span<const int> tokens) const {
  return detail::guard([&] {
    LT_CHECK(!tokens.empty(), "logits: no token ids given");
    detail::ThreadScope threads(impl_->threads);
    SequenceOptions o;
    o.context = int(tokens.size());
    auto state = detail::new_sequence_state(*impl_, o);
    state->forward(tokens.data(), int(tokens.size()), 0);
    return std::vector<float>(state->logits(), state->logits() + impl_->config.vocab_size);
  });
}

}  // namespace leantune
