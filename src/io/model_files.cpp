// load_model_files: format dispatch by path (directory, .safetensors + config.json, GGUF, llama2.c).
#include "io/model_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/hf_cache.h"
#include "io/gguf_model.h"
#include "io/fused_proj.h"
#include "io/hf_model.h"
#include "io/llama2c.h"
#include "io/safetensors.h"

namespace lt {

bool is_gguf_model_path(const std::string& path) {
  const std::string ext = ".gguf";
  const bool named = path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  return named || gguf::is_gguf_file(path);
}

ModelFiles load_model_files(const std::string& path_or_repo) {
  const std::string path = resolve_model_path(path_or_repo);
  struct stat st {};
  LT_CHECK(::stat(path.c_str(), &st) == 0, "{}: cannot open model: {}", path, std::strerror(errno));
  ModelFiles m;
  if (S_ISDIR(st.st_mode)) {
    HfModelFiles hf = load_hf_folder(path);
    m.config = std::move(hf.config);
    m.tensors = std::move(hf.tensors);
    m.tensors.check_weight_dtypes();
    return m;
  }
  const std::string ext = ".safetensors";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) {
    auto slash = path.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
    std::string config = (dir == "/" ? "" : dir) + "/config.json";
    struct stat cs {};
    LT_CHECK(::stat(config.c_str(), &cs) == 0 && S_ISREG(cs.st_mode),
             "{}: a .safetensors model needs a config.json beside it ({} not found)", path, config);
    m.config = load_hf_config(config);
    m.tensors.source = path;
    load_safetensors(path, m.tensors);
    split_fused_tensors(m.config, m.tensors);
    m.tensors.check_weight_dtypes();
    return m;
  }
  if (is_gguf_model_path(path)) return load_gguf_model(path);
  Llama2cModel l = load_llama2c(path);
  m.config = std::move(l.config);
  m.tensors = std::move(l.tensors);
  return m;
}

ModelConfig load_model_config(const std::string& path_or_repo) {
  const std::string path = resolve_model_path(path_or_repo);
  struct stat st {};
  LT_CHECK(::stat(path.c_str(), &st) == 0, "{}: cannot open model: {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    std::string config = path + "/config.json";
    LT_CHECK(::stat(config.c_str(), &st) == 0, "{}: no config.json in this model folder", path);
    return load_hf_config(config);
  }
  if (is_gguf_model_path(path)) return gguf_model_config(gguf::Reader(path));
  return load_model_files(path).config;
}

}  // namespace lt
