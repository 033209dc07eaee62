// merge.h: the adapter merged through the inference model's f32 weights, saved under their HF names.
#include "leantune/merge.h"

#include <filesystem>

#include "api/guard.h"
#include "core/error.h"
#include "core/hf_cache.h"
#include "core/mapped_file.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/fused_proj.h"
#include "io/safetensors.h"
#include "kernels/ops.h"
#include "model/llama_model.h"

namespace fs = std::filesystem;

namespace leantune {

void merge_adapter(const std::string& base_model, const std::string& adapter, const std::string& out_dir) {
  detail::guard([&] {
    const std::string base = lt::resolve_model_path(base_model);
    fs::path base_dir = fs::is_directory(base) ? fs::path(base) : fs::path(base).parent_path();
    LT_CHECK(fs::exists(base_dir / "config.json"), "{}: merge needs a Hugging Face base (config.json) to write a "
             "Hugging Face folder", base_model);
    lt::InferenceOptions io;
    io.context = 1;
    auto files = lt::load_model_files(base_model);
    lt::LlamaModel model(files.config, files.tensors, io, lt::ops_cpu());
    model.merge_adapter(adapter);
    std::vector<lt::TensorInfo> ts;
    for (const auto& b : model.plan().buffers) {
      if (b.cat != lt::Category::FrozenWeights) continue;
      const lt::TensorInfo* src = files.tensors.find(b.name);
      LT_ASSERT(src);
      lt::TensorInfo t;
      t.name = b.name;
      t.dtype = lt::DType::F32;
      t.shape = src->shape;
      t.nbytes = b.bytes;
      t.data = model.arenas().get(b.name);
      // Gemma's norm weights are held as (1 + w); merging leaves them as the file has them
      const bool offset_norm = files.config.norm_offset && b.name.size() >= 11 &&
                               b.name.compare(b.name.size() - 11, 11, "norm.weight") == 0;
      if (offset_norm) t = *src;
      ts.push_back(t);
    }
    std::vector<std::vector<uint8_t>> fused;
    lt::fuse_proj_tensors(files.config, ts, fused);  // Phi-3: qkv_proj / gate_up_proj as the base has them
    fs::create_directories(out_dir);
    lt::save_safetensors((fs::path(out_dir) / "model.safetensors").string(), ts, {{"format", "pt"}});
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                          "chat_template.jinja", "generation_config.json"})
      if (fs::exists(base_dir / f))
        lt::write_text_file_atomic((fs::path(out_dir) / f).string(), lt::read_text_file((base_dir / f).string()));
  });
}

}  // namespace leantune
