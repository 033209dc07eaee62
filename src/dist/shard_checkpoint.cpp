// Sharded checkpoints: save, re-sharding load, consolidation (dist/shard_checkpoint.h).
#include "dist/shard_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hf_cache.h"
#include "core/json_parse.h"
#include "core/mapped_file.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/peft_adapter.h"
#include "io/fused_proj.h"
#include "io/safetensors.h"
#include "train/output_dir.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

std::string shard_name(int r, int R) { return fmt::format("shard-{}-of-{}", r, R); }

TensorInfo f32_tensor(std::string name, std::vector<int64_t> shape, const float* data, size_t n) {
  TensorInfo t;
  t.name = std::move(name);
  t.dtype = DType::F32;
  t.shape = std::move(shape);
  t.data = data;
  t.nbytes = n * sizeof(float);
  return t;
}

nlohmann::json position_json(const TrainerState& p) { return trainer_state_json(p); }

TrainerState read_position(const nlohmann::json& j, const std::string& path) {
  return trainer_state_from_json(j, path);
}

nlohmann::json read_json(const std::string& path) { return load_json_file(path); }

// One shard file of a manifest, mapped: its flat range and its three tensors.
struct Shard {
  size_t begin = 0, end = 0;
  TensorSet ts;
  const float* get(const char* what) const {
    const TensorInfo& t = ts.get(what, {int64_t(end - begin)});
    LT_CHECK(t.dtype == DType::F32, "{}: tensor '{}' is {}, expected F32", t.file, what, dtype_name(t.dtype));
    return static_cast<const float*>(t.data);
  }
};

std::vector<Shard> open_shards(const std::string& dir, const nlohmann::json& man, size_t total) {
  std::vector<Shard> shards;
  size_t expect = 0;
  try {
    for (const auto& s : man.at("shards")) {
      Shard sh;
      sh.begin = s.at("begin").get<size_t>();
      sh.end = s.at("end").get<size_t>();
      LT_CHECK(sh.begin == expect && sh.end >= sh.begin && sh.end <= total, "{}/manifest.json: shard {} covers "
               "[{}, {}), expected it to start at {} and end by {}", dir, shards.size(), sh.begin, sh.end, expect, total);
      expect = sh.end;
      sh.ts.source = dir;
      load_safetensors((fs::path(dir) / s.at("file").get<std::string>()).string(), sh.ts);
      shards.push_back(std::move(sh));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}/manifest.json: malformed: {}", dir, e.what());
  }
  LT_CHECK(expect == total, "{}/manifest.json: the shards cover {} of {} elements", dir, expect, total);
  return shards;
}

// Copies flat [lo, hi) of `what` from the shards into out.
void copy_flat(const std::vector<Shard>& shards, const char* what, float* out, size_t lo, size_t hi) {
  for (const auto& s : shards) {
    const size_t a = std::max(lo, s.begin), b = std::min(hi, s.end);
    if (a < b) std::memcpy(out + (a - lo), s.get(what) + (a - s.begin), (b - a) * sizeof(float));
  }
}

// save_sharded_checkpoint's writes: this rank's shard and its json, then (rank 0, after every
// shard is on disk) the manifest.
void write_shard_files(const fs::path& dir, ZeroOptimizer& z, const std::vector<TrainParam>& params,
                       const TrainerState& pos, const TrainedModelInfo& info) {
  Communicator& comm = z.comm();
  const FlatLayout& L = z.layout();
  const int r = comm.rank(), R = comm.size();
  std::error_code ec;
  fs::create_directories(dir, ec);
  LT_CHECK(fs::is_directory(dir), "cannot create the checkpoint folder: {}", ec.message());
  const size_t lo = L.begin(r), hi = L.end(r), n = hi - lo;
  // the parameters of [lo, hi): stage 3's master shard as it is, else written piece by piece from
  // the model's tensors (no copy of the shard)
  const float* p = z.master();
  auto write_pieces = [&](const TensorInfo&, std::FILE* f) {
    bool ok = true;
    z.visit_params(lo, hi, [&](const float* src, size_t k) {
      ok = ok && std::fwrite(src, sizeof(float), k, f) == k;
    });
    return ok;
  };
  // the moments of [lo, hi): stage 0 holds all of them, stages 1-3 exactly this range
  const float* m = z.moment1() + (lo - z.own_begin());
  const float* v = z.moment2() + (lo - z.own_begin());
  const std::string base = shard_name(r, R);
  save_safetensors((dir / (base + ".safetensors")).string(),
                   {f32_tensor("param", {int64_t(n)}, p, n), f32_tensor("adam_m", {int64_t(n)}, m, n),
                    f32_tensor("adam_v", {int64_t(n)}, v, n)},
                   {{"begin", std::to_string(lo)}, {"end", std::to_string(hi)}, {"total", std::to_string(L.total)}},
                   write_pieces);
  nlohmann::json sj = {{"rank", r}, {"ranks", R}, {"begin", lo}, {"end", hi}, {"total", L.total}, {"step", pos.step}};
  write_text_file_atomic((dir / (base + ".json")).string(), sj.dump(1));
  comm.barrier();  // every shard is on disk before the manifest names them
  if (r == 0) {
    nlohmann::json man = position_json(pos);
    man["format"] = "leantune-zero-checkpoint-1";
    man["ranks"] = R;
    man["zero_stage"] = z.options().stage;
    if (info.method)
      man["model"] = {{"method", method_name(*info.method)}, {"base_model", info.base_model},
                      {"adapter_config", info.adapter_config}};
    man["total"] = L.total;
    for (size_t i = 0; i < params.size(); ++i)
      man["tensors"].push_back({{"name", params[i].name}, {"shape", params[i].shape}, {"offset", L.offset[i]}});
    for (int q = 0; q < R; ++q)
      man["shards"].push_back({{"file", shard_name(q, R) + ".safetensors"}, {"begin", L.begin(q)}, {"end", L.end(q)}});
    write_text_file_atomic((dir / "manifest.json").string(), man.dump(1));
  }
}

}  // namespace

std::string save_sharded_checkpoint(const std::string& out_dir, ZeroOptimizer& z,
                                    const std::vector<TrainParam>& params, const TrainerState& pos,
                                    const TrainedModelInfo& info, const TrainHooks* hooks) {
  Communicator& comm = z.comm();
  const int r = comm.rank();
  const std::string name = checkpoint_name(pos.step), previous = read_latest(out_dir);
  const fs::path dir = fs::path(out_dir) / name;
  // Each rank's files; a failure names the previous checkpoint, which LATEST still names. The
  // folder is not removed here: the other ranks may still be writing into it (a multi-rank error
  // aborts the job, and the next save of this step replaces the files).
  try {
    write_shard_files(dir, z, params, pos, info);
  } catch (const std::exception& e) {
    fail("{}{}: the checkpoint could not be written: {}. {}", comm.size() > 1 ? fmt::format("rank {}: ", r) : "",
         dir.string(), e.what(),
         previous.empty() ? std::string("No earlier checkpoint had been published.")
                          : fmt::format("The previous checkpoint {} is intact and LATEST still names it (resume from "
                                        "it with --resume auto once the cause is fixed).",
                                        (fs::path(out_dir) / previous).string()));
  }
  if (r == 0) {
    if (hooks && hooks->on_checkpoint_written) hooks->on_checkpoint_written(pos.step);
    publish_checkpoint(out_dir, name, previous);
    if (hooks && hooks->on_checkpoint_saved) hooks->on_checkpoint_saved(pos.step);
  }
  comm.barrier();
  return dir.string();
}

TrainerState load_sharded_checkpoint(const std::string& path, const std::string& out_dir, ZeroOptimizer& z,
                                         std::vector<TrainParam>& params) {
  const std::string dir = resolve_checkpoint(path, out_dir);
  if (dir.empty()) return {};
  const FlatLayout& L = z.layout();
  const size_t lo = z.own_begin(), hi = z.own_end();
  TrainerState pos;
  if (fs::exists(fs::path(dir) / "manifest.json")) {
    const std::string mp = (fs::path(dir) / "manifest.json").string();
    nlohmann::json man = read_json(mp);
    pos = read_position(man, mp);
    try {
      LT_CHECK(man.at("total").get<size_t>() == L.total && man.at("tensors").size() == params.size(),
               "{}: written for {} trainable parameters in {} tensors; this run has {} in {}. Resume with the same "
               "model, method and LoRA settings", mp, man.at("total").get<size_t>(), man.at("tensors").size(), L.total,
               params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        const auto& t = man["tensors"][i];
        LT_CHECK(t.at("name").get<std::string>() == params[i].name && t.at("offset").get<size_t>() == L.offset[i] &&
                 t.at("shape").get<std::vector<int64_t>>() == params[i].shape,
                 "{}: tensor {} is '{}', this run's is '{}' with another shape or offset", mp, i,
                 t.at("name").get<std::string>(), params[i].name);
      }
    } catch (const nlohmann::json::exception& e) {
      fail("{}: malformed: {}", mp, e.what());
    }
    std::vector<Shard> shards = open_shards(dir, man, L.total);
    for (const auto& s : shards) z.write_params(s.get("param"), s.begin, s.end);
    copy_flat(shards, "adam_m", z.moment1(), lo, hi);
    copy_flat(shards, "adam_v", z.moment2(), lo, hi);
  } else {
    // a single-process checkpoint: whole tensors by name
    TensorSet ts;
    ts.source = dir;
    load_safetensors((fs::path(dir) / "state.safetensors").string(), ts);
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      auto get = [&](const char* prefix) {
        const TensorInfo& t = ts.get(prefix + p.name, p.shape);
        LT_CHECK(t.dtype == DType::F32, "{}: tensor '{}{}' is {}, expected F32", t.file, prefix, p.name,
                 dtype_name(t.dtype));
        return static_cast<const float*>(t.data);
      };
      z.write_params(get("param."), L.offset[i], L.offset[i] + p.n);
      const size_t a = std::max(lo, L.offset[i]), b = std::min(hi, L.offset[i] + p.n);
      if (a >= b) continue;
      std::memcpy(z.moment1() + (a - lo), get("adam_m.") + (a - L.offset[i]), (b - a) * sizeof(float));
      std::memcpy(z.moment2() + (a - lo), get("adam_v.") + (a - L.offset[i]), (b - a) * sizeof(float));
    }
    const std::string sp = (fs::path(dir) / "trainer_state.json").string();
    pos = read_position(read_json(sp), sp);
  }
  return pos;
}

void consolidate_checkpoint(const std::string& sharded_dir, const std::string& out_dir) {
  const std::string mp = (fs::path(sharded_dir) / "manifest.json").string();
  LT_CHECK(fs::exists(mp), "{}: no manifest.json; not a sharded checkpoint (or one whose writing did not finish)",
           sharded_dir);
  nlohmann::json man = read_json(mp);
  const TrainerState pos = read_position(man, mp);
  size_t total = 0;
  try {
    total = man.at("total").get<size_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed: {}", mp, e.what());
  }
  std::vector<Shard> shards = open_shards(sharded_dir, man, total);
  std::vector<float> flat[3];
  const char* kinds[3] = {"param", "adam_m", "adam_v"};
  for (int k = 0; k < 3; ++k) {
    flat[k].resize(total);
    copy_flat(shards, kinds[k], flat[k].data(), 0, total);
  }
  std::vector<TensorInfo> ts;
  try {
    for (const auto& t : man.at("tensors")) {
      auto shape = t.at("shape").get<std::vector<int64_t>>();
      size_t n = 1;
      for (auto d : shape) n *= size_t(d);
      const size_t off = t.at("offset").get<size_t>();
      LT_CHECK(off + n <= total, "{}: tensor '{}' ends past the flat vector", mp, t.at("name").get<std::string>());
      for (int k = 0; k < 3; ++k)
        ts.push_back(f32_tensor(std::string(kinds[k]) + "." + t.at("name").get<std::string>(), shape,
                                flat[k].data() + off, n));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed: {}", mp, e.what());
  }
  fs::create_directories(out_dir);
  save_safetensors((fs::path(out_dir) / "state.safetensors").string(), ts);
  write_text_file_atomic((fs::path(out_dir) / "trainer_state.json").string(), position_json(pos).dump(1));
}

}  // namespace lt

namespace lt {

std::string find_sharded_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "manifest.json")) return path;
  const std::string name = read_latest(path);  // validated: a checkpoint folder inside `path`
  LT_CHECK(!name.empty(), "{}: neither a sharded checkpoint (no manifest.json) nor an output folder (no LATEST)", path);
  const std::string dir = (fs::path(path) / name).string();
  LT_CHECK(fs::exists(fs::path(dir) / "manifest.json"), "{}: LATEST names {}, which has no manifest.json", path, dir);
  return dir;
}

std::string export_sharded_checkpoint(const std::string& path, const std::string& out_dir) {
  const std::string dir = find_sharded_checkpoint(path);
  const std::string mp = (fs::path(dir) / "manifest.json").string();
  const nlohmann::json man = read_json(mp);
  LT_CHECK(man.contains("model"), "{}: the checkpoint does not record what was trained (written by an older leantune); "
           "use --state to write the resumable single-process state instead", mp);
  std::string method, base_model, adapter_config;
  size_t total = 0;
  std::vector<std::tuple<std::string, std::vector<int64_t>, size_t>> tensors;  // name, shape, offset
  try {
    method = man.at("model").at("method").get<std::string>();
    base_model = man.at("model").at("base_model").get<std::string>();
    adapter_config = man.at("model").at("adapter_config").get<std::string>();
    total = man.at("total").get<size_t>();
    for (const auto& t : man.at("tensors"))
      tensors.emplace_back(t.at("name").get<std::string>(), t.at("shape").get<std::vector<int64_t>>(),
                           t.at("offset").get<size_t>());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed: {}", mp, e.what());
  }
  const std::optional<Method> kind = find_method(method);
  LT_CHECK(kind, "{}: method '{}' is neither lora nor full", mp, method);
  std::vector<Shard> shards = open_shards(dir, man, total);
  std::vector<float> flat(total);
  copy_flat(shards, "param", flat.data(), 0, total);
  auto numel = [](const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    return n;
  };
  for (const auto& [name, shape, off] : tensors)
    LT_CHECK(off + numel(shape) <= total, "{}: tensor '{}' ends past the flat vector", mp, name);
  fs::create_directories(out_dir);
  if (kind == Method::Lora) {
    std::string base_name;
    const auto init = nlohmann::json::parse(adapter_config, nullptr, false).value("init_lora_weights", nlohmann::json());
    LT_CHECK(!init.is_string() || (init.get<std::string>().rfind("pissa", 0) != 0 && init != "olora"),
             "{}: the run initialised its LoRA with {}, so its checkpoints hold A and B for the residual base "
             "W − s·B₀·A₀; consolidate cannot convert them to an adapter for the original model (it does not "
             "rebuild A₀, B₀). Resume the run to its end (`--resume auto`): the final output_dir/adapter is "
             "converted", mp, init.get<std::string>());
    const LoraConfig lc = parse_peft_adapter_config(adapter_config, mp, &base_name);
    std::vector<AdapterTensor> ts;
    for (const auto& [name, shape, off] : tensors)
      ts.push_back({name.rfind("base_model.", 0) == 0 ? name : "base_model.model." + name, shape, flat.data() + off});
    save_peft_adapter(out_dir, lc, base_name, ts);
    return fmt::format("a PEFT adapter ({} tensors) in {}", ts.size(), out_dir);
  }
  // full: the trained tensors, and every other tensor of the base model
  auto files = load_model_files(base_model);
  std::vector<TensorInfo> out;
  std::vector<std::vector<float>> frozen;
  std::vector<std::string> trained;
  for (const auto& [name, shape, off] : tensors) {
    out.push_back(f32_tensor(name, shape, flat.data() + off, numel(shape)));
    trained.push_back(name);
  }
  frozen.reserve(files.tensors.all().size());  // `out` points into these vectors
  for (const auto& [n, t] : files.tensors.all()) {
    if (std::find(trained.begin(), trained.end(), t.name) != trained.end()) continue;
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16) continue;  // not a weight
    auto& buf = frozen.emplace_back(size_t(t.numel()));
    convert_to_f32(buf.data(), t.data, t.dtype, buf.size());
  }
  size_t k = 0;
  for (const auto& [n, t] : files.tensors.all()) {
    if (std::find(trained.begin(), trained.end(), t.name) != trained.end()) continue;
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16) continue;
    out.push_back(f32_tensor(t.name, t.shape, frozen[k].data(), frozen[k].size()));
    ++k;
  }
  std::vector<std::vector<uint8_t>> fused;
  fuse_proj_tensors(files.config, out, fused);  // Phi-3: qkv_proj / gate_up_proj as the checkpoint has them
  save_safetensors((fs::path(out_dir) / "model.safetensors").string(), out);
  const std::string base_dir = resolve_model_path(base_model);
  if (fs::is_directory(base_dir))
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json", "chat_template.jinja"})
      if (fs::exists(fs::path(base_dir) / f))
        write_text_file_atomic((fs::path(out_dir) / f).string(), read_text_file((fs::path(base_dir) / f).string()));
  return fmt::format("the fine-tuned model ({} tensors, {} trained) in {}", out.size(), trained.size(), out_dir);
}

}  // namespace lt
