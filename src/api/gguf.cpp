// gguf.h: GGUF export of a model (a LoRA adapter merged in through the inference model's weights)
// or of an adapter alone, over model/gguf_export.h.
#include "leantune/gguf.h"

#include <filesystem>

#include "api/guard.h"
#include "core/error.h"
#include "model/gguf_export.h"
#include "io/fused_proj.h"
#include "io/model_files.h"
#include "io/peft_adapter.h"
#include "kernels/ops.h"
#include "model/llama_model.h"

namespace fs = std::filesystem;

namespace leantune {

namespace {

// HF folder (or a .safetensors inside one): the folder's tokenizer.json; GGUF: its own; llama2.c: none.
std::string default_tokenizer(const std::string& model) {
  if (lt::is_gguf_model_path(model)) return model;  // a GGUF model carries its tokenizer
  const fs::path p(model);
  const fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  return fs::exists(dir / "tokenizer.json") ? dir.string() : std::string();
}

GgufExportResult export_lora(const std::string& path, const GgufExportOptions& a, lt::gguf::TensorType type) {
  lt::LoadedAdapter ad = lt::load_peft_adapter(a.adapter);
  const std::string base = a.base.empty() ? ad.base_model : a.base;
  LT_CHECK(!base.empty() && fs::exists(base), "{}: the adapter's base model '{}' is not a local path; pass --base "
           "with the base model (its config gives the shapes and head counts)", a.adapter, base);
  const lt::ModelConfig c = lt::load_model_config(base);
  lt::split_fused_adapter(ad, c, a.adapter);  // Phi-3: qkv_proj / gate_up_proj as the split projections
  const std::string name = a.name.empty() ? fs::path(a.adapter).filename().string() : a.name;
  GgufExportResult r;
  r.adapter_only = true;
  r.tensors = lt::gguf::write_lora_gguf(path, c, ad, a.adapter, type, name);
  r.lora_r = ad.config.r;
  r.lora_scaling = ad.config.scaling();
  return r;
}

lt::gguf::TensorType engine_type(GgufType t) {
  switch (t) {
    case GgufType::F32: return lt::gguf::TensorType::F32;
    case GgufType::F16: return lt::gguf::TensorType::F16;
    case GgufType::BF16: return lt::gguf::TensorType::BF16;
    case GgufType::Q8_0: return lt::gguf::TensorType::Q8_0;
    case GgufType::Q4_0: return lt::gguf::TensorType::Q4_0;
  }
  return lt::gguf::TensorType::F16;
}

}  // namespace

GgufType parse_gguf_type(std::string_view name) {
  return detail::guard([&] {
    switch (lt::gguf::parse_type(std::string(name))) {
      case lt::gguf::TensorType::F32: return GgufType::F32;
      case lt::gguf::TensorType::F16: return GgufType::F16;
      case lt::gguf::TensorType::BF16: return GgufType::BF16;
      case lt::gguf::TensorType::Q8_0: return GgufType::Q8_0;
      case lt::gguf::TensorType::Q4_0: return GgufType::Q4_0;
    }
    return GgufType::F16;
  });
}

GgufExportResult export_gguf(const std::string& path, const GgufExportOptions& a) {
  return detail::guard([&] {
    const lt::gguf::TensorType type = engine_type(a.type);
    LT_CHECK(!a.model.empty() || !a.adapter.empty(), "export needs --model (a model GGUF) or --adapter alone (a "
             "LoRA adapter GGUF)");
    if (a.model.empty()) return export_lora(path, a, type);
    const std::string tok = a.tokenizer.empty() ? default_tokenizer(a.model) : a.tokenizer;
    LT_CHECK(!tok.empty(), "{}: no tokenizer.json beside the model; pass --tokenizer (tokenizer.json, its folder, "
             "or a llama2.c tokenizer .bin such as tok512.bin)", a.model);
    auto files = lt::load_model_files(a.model);
    LT_CHECK(!files.config.quantization, "{}: the model is stored quantized ({}); export its f32/16-bit "
             "source instead", a.model, lt::quantization_name(files.config.quantization));
    const lt::gguf::Vocab vocab = lt::gguf::read_vocab(tok, files.config.vocab_size);
    lt::InferenceOptions io;
    io.context = 1;
    lt::LlamaModel model(files.config, files.tensors, io, lt::ops_cpu());
    if (!a.adapter.empty()) model.merge_adapter(a.adapter);
    const std::string name = a.name.empty() ? fs::path(a.model).filename().replace_extension().string() : a.name;
    GgufExportResult r;
    r.tensors = lt::gguf::write_model_gguf(
        path, model.config(), [&](const std::string& t) { return model.arenas().get_as<const float>(t); }, vocab,
        type, name);
    r.tokenizer_model = vocab.model;
    r.tokenizer_path = tok;
    return r;
  });
}

}  // namespace leantune
