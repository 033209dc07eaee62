// `leantune merge --model BASE --adapter PEFT_DIR --out DIR`: merges a LoRA adapter into the base
// weights (W += s·B·A) and writes a Hugging Face folder: model.safetensors (f32), config.json and
// the tokenizer files copied from the base folder.
#include <filesystem>
#include <fmt/format.h>

#include "commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/threads.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "kernels/ops.h"
#include "model/llama_model.h"

namespace fs = std::filesystem;

namespace lt::cli {

void add_merge_command(CLI::App& app) {
  struct Args { std::string model, adapter, out; };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("merge", "Merge a PEFT LoRA adapter into its base model; write an HF folder");
  c->add_option("--model,-m", a->model, "base model: HF folder or .safetensors with config.json")->required();
  c->add_option("--adapter", a->adapter, "PEFT adapter folder")->required();
  c->add_option("--out,-o", a->out, "output folder")->required();
  c->callback([a] {
    fs::path base_dir = fs::is_directory(a->model) ? fs::path(a->model) : fs::path(a->model).parent_path();
    LT_CHECK(fs::exists(base_dir / "config.json"), "{}: merge needs a Hugging Face base (config.json) to write a "
             "Hugging Face folder", a->model);
    InferenceOptions io;
    io.context = 1;
    auto files = load_model_files(a->model);
    LlamaModel model(files.config, files.tensors, io, ops_cpu());
    model.merge_adapter(a->adapter);
    std::vector<TensorInfo> ts;
    for (const auto& b : model.plan().buffers) {
      if (b.cat != Category::FrozenWeights) continue;
      const TensorInfo* src = files.tensors.find(b.name);
      LT_ASSERT(src);
      TensorInfo t;
      t.name = b.name; t.dtype = DType::F32; t.shape = src->shape; t.nbytes = b.bytes;
      t.data = model.arenas().get(b.name);
      ts.push_back(t);
    }
    fs::create_directories(a->out);
    save_safetensors((fs::path(a->out) / "model.safetensors").string(), ts, {{"format", "pt"}});
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                          "generation_config.json"})
      if (fs::exists(base_dir / f))
        write_text_file_atomic((fs::path(a->out) / f).string(), read_text_file((base_dir / f).string()));
    fmt::print("merged {} into {}: {}\n", a->adapter, a->model, a->out);
  });
}

}  // namespace lt::cli
