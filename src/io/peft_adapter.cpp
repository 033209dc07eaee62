// PEFT adapter folders: adapter_config.json (nlohmann::json, sorted keys like PEFT's json.dump(
// sort_keys=True, indent=2)) and adapter_model.safetensors (io/safetensors.h).
// The config written holds the fields every PEFT version since 0.9 (use_dora) accepts, so older
// PEFT releases, which reject unknown keys, load it too; newer ones fill their own defaults.
// DoRA's magnitudes are saved as PEFT saves them: "...{module}.lora_magnitude_vector" (out).
#include "io/peft_adapter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/json_parse.h"
#include "core/mapped_file.h"
#include "core/atomic_file.h"
#include "io/safetensors.h"

namespace lt {

namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";
constexpr std::string_view kKeyPrefix = "base_model.model.model.layers.";

// A Llama projection, or one of Phi-3's fused modules (qkv_proj, gate_up_proj; io/fused_proj.h
// splits them for a Phi-3 base).
bool is_llama_module(const std::string& m) {
  const auto& all = llama_linear_modules();
  return std::find(all.begin(), all.end(), m) != all.end() || parse_fused_proj(m);
}

// A float as JSON the way Python prints it: integral values as integers (PEFT's lora_alpha is an
// int), others through the shortest decimal that round-trips the float (0.05f -> 0.05, not
// 0.05000000074505806).
nlohmann::json json_number(float x) {
  if (std::isfinite(x) && x == std::trunc(x) && std::fabs(x) < 1e15f) return int64_t(x);
  return std::stod(fmt::format("{}", x));
}

std::string join_path(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / name).string();
}

// Parsed form of a tensor key of a Llama LoRA adapter.
struct ParsedKey {
  int layer = -1;
  std::string module;
  enum Kind { LoraA, LoraB, Bias, Magnitude } kind = LoraA;
};

// Parses "base_model.model.model.layers.{i}.{parent}.{module}.{lora_A|lora_B}[.{adapter}].weight",
// "...{module}[.base_layer].bias" and DoRA's "...{module}.lora_magnitude_vector[[.{adapter}].weight]".
// False when the key has any other form.
bool parse_key(std::string_view key, ParsedKey* out) {
  if (key.substr(0, kKeyPrefix.size()) != kKeyPrefix) return false;
  key.remove_prefix(kKeyPrefix.size());
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    size_t dot = key.find('.', pos);
    parts.push_back(key.substr(pos, dot == std::string_view::npos ? std::string_view::npos : dot - pos));
    if (dot == std::string_view::npos) break;
    pos = dot + 1;
  }
  // parts: layer, parent, module, rest...
  if (parts.size() < 4) return false;
  int layer = -1;
  auto [ptr, ec] = std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), layer);
  if (ec != std::errc() || ptr != parts[0].data() + parts[0].size() || layer < 0) return false;
  std::string module(parts[2]);
  if (!is_llama_module(module) || parts[1] != llama_module_parent(module)) return false;
  std::vector<std::string_view> rest(parts.begin() + 3, parts.end());
  out->layer = layer;
  out->module = module;
  if (rest[0] == "lora_magnitude_vector" && (rest.size() == 1 || (rest.back() == "weight" && rest.size() <= 3))) {
    out->kind = ParsedKey::Magnitude;
    return true;
  }
  if (rest.back() == "bias") {
    if (rest.size() == 1 || (rest.size() == 2 && rest[0] == "base_layer")) {
      out->kind = ParsedKey::Bias;
      return true;
    }
    return false;
  }
  if (rest.back() != "weight" || (rest.size() != 2 && rest.size() != 3)) return false;
  if (rest[0] == "lora_A") out->kind = ParsedKey::LoraA;
  else if (rest[0] == "lora_B") out->kind = ParsedKey::LoraB;
  else return false;
  return true;
}

// The index of the first NaN / inf element of a F32, BF16 or F16 tensor, or -1 (exponent bits all ones).
int64_t first_non_finite(const TensorInfo& t) {
  const auto* p = static_cast<const unsigned char*>(t.data);
  const size_t width = t.dtype == DType::F32 ? 4 : 2;
  const uint32_t mask = t.dtype == DType::F32 ? 0x7F800000u : t.dtype == DType::BF16 ? 0x7F80u : 0x7C00u;
  const size_t n = t.nbytes / width;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = 0;
    if (width == 4) std::memcpy(&bits, p + i * 4, 4);
    else {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      bits = h;
    }
    if ((bits & mask) == mask) return int64_t(i);
  }
  return -1;
}

std::string normalized_key(const ParsedKey& k) {
  if (k.kind == ParsedKey::Magnitude) return peft_magnitude_key(k.layer, k.module);
  return k.kind == ParsedKey::Bias ? peft_bias_key(k.layer, k.module)
                                   : peft_lora_key(k.layer, k.module, k.kind == ParsedKey::LoraA);
}

// A module path as PEFT records "all-linear" on a model with under 20 linear modules:
// "model.layers.{i}.{parent}.{module}" (PEFT shortens longer lists to the module names).
bool is_module_path(const std::string& t) {
  ParsedKey pk;
  const size_t dot = t.rfind('.');
  return t.rfind("model.layers.", 0) == 0 && dot != std::string::npos &&
         parse_key("base_model.model." + t + ".lora_A.weight", &pk) && pk.module == t.substr(dot + 1);
}

// Whether target_modules names `module` of `layer`: as PEFT matches them, the module's path
// "model.layers.{layer}.{parent}.{module}" equals a target or ends with "." + target.
bool is_targeted(const LoraConfig& c, int layer, const std::string& module) {
  if (c.target_modules.size() == 1 && c.target_modules[0] == "all-linear") return true;
  const std::string path = fmt::format("model.layers.{}.{}.{}", layer, llama_module_parent(module), module);
  for (const auto& t : c.target_modules)
    if (t == path || (path.size() > t.size() && path.compare(path.size() - t.size(), t.size(), t) == 0 &&
                      path[path.size() - t.size() - 1] == '.'))
      return true;
  return false;
}

// Whether PEFT wraps `module` of `layer` under config (target_modules, layers_to_transform).
bool is_adapted(const LoraConfig& c, int layer, const std::string& module) {
  const auto& lt = c.layers_to_transform;
  return is_targeted(c, layer, module) && (lt.empty() || std::find(lt.begin(), lt.end(), layer) != lt.end());
}

}  // namespace

std::string peft_lora_key(int layer, const std::string& module, bool is_A) {
  return fmt::format("{}{}.{}.{}.{}.weight", kKeyPrefix, layer, llama_module_parent(module), module,
                     is_A ? "lora_A" : "lora_B");
}

std::string peft_magnitude_key(int layer, const std::string& module) {
  return fmt::format("{}{}.{}.{}.lora_magnitude_vector", kKeyPrefix, layer, llama_module_parent(module), module);
}

std::string peft_bias_key(int layer, const std::string& module) {
  return fmt::format("{}{}.{}.{}.bias", kKeyPrefix, layer, llama_module_parent(module), module);
}

std::string peft_adapter_config_json(const LoraConfig& c, const std::string& base_model_name_or_path,
                                     const RankPattern& pattern) {
  LT_CHECK(c.r > 0, "LoRA rank r must be > 0 (got {})", c.r);
  nlohmann::json j;
  std::vector<std::string> targets = c.target_modules;
  if (targets.size() == 1 && targets[0] == "all-linear") targets = llama_linear_modules();
  j["alpha_pattern"] = nlohmann::json::object();
  for (const auto& [k, v] : pattern.alpha) j["alpha_pattern"][k] = json_number(v);
  j["base_model_name_or_path"] = base_model_name_or_path.empty() ? nlohmann::json(nullptr)
                                                                 : nlohmann::json(base_model_name_or_path);
  j["bias"] = c.bias;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = c.init == "default" ? nlohmann::json(true) : nlohmann::json(c.init);
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] =
      c.layers_to_transform.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.layers_to_transform);
  j["lora_alpha"] = json_number(c.alpha);
  j["lora_dropout"] = json_number(c.dropout);
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = c.r;
  j["rank_pattern"] = nlohmann::json::object();
  for (const auto& [k, v] : pattern.rank) j["rank_pattern"][k] = v;
  j["revision"] = nullptr;
  j["target_modules"] = targets;
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = c.use_dora;
  j["use_rslora"] = c.use_rslora;
  return j.dump(2);  // nlohmann objects keep keys sorted, as PEFT's sort_keys=True
}

void save_peft_adapter(const std::string& dir, const LoraConfig& config, const std::string& base_model_name_or_path,
                       const std::vector<AdapterTensor>& tensors, const RankPattern& pattern) {
  LT_CHECK(std::filesystem::is_directory(dir), "save_peft_adapter: '{}' is not a directory", dir);
  const std::string json = peft_adapter_config_json(config, base_model_name_or_path, pattern) + "\n";
  std::vector<TensorInfo> infos;
  infos.reserve(tensors.size());
  for (const AdapterTensor& t : tensors) {
    ParsedKey pk;
    LT_CHECK(parse_key(t.key, &pk) && normalized_key(pk) == t.key,
             "save_peft_adapter: '{}' is not a PEFT LoRA key (use peft_lora_key / peft_bias_key)", t.key);
    LT_CHECK(pk.kind != ParsedKey::Bias || config.bias != "none",
             "save_peft_adapter: tensor '{}' is a bias but the config says bias \"none\"", t.key);
    LT_CHECK(pk.kind != ParsedKey::Magnitude || config.use_dora,
             "save_peft_adapter: tensor '{}' is a DoRA magnitude but the config says use_dora false", t.key);
    TensorInfo ti;
    ti.name = t.key;
    // PEFT stores the bias of a module it wraps under the wrapper's base_layer (and loads it only
    // from there); biases of modules it does not wrap keep their plain name.
    if (pk.kind == ParsedKey::Bias && is_adapted(config, pk.layer, pk.module))
      ti.name = fmt::format("{}{}.{}.{}.base_layer.bias", kKeyPrefix, pk.layer, llama_module_parent(pk.module),
                            pk.module);
    ti.dtype = DType::F32;
    ti.shape = t.shape;
    ti.data = t.data;
    ti.nbytes = size_t(ti.numel()) * sizeof(float);
    LT_CHECK(t.data || ti.nbytes == 0, "save_peft_adapter: tensor '{}' has no data", t.key);
    infos.push_back(std::move(ti));
  }
  // Tensors first, config last: a folder with a config always has its weights.
  save_safetensors(join_path(dir, kWeightsFile), infos, {{"format", "pt"}});
  write_text_file_atomic(join_path(dir, kConfigFile), json);
}

namespace {

// adapter_config.json being read: its keys, and errors naming the file and the key.
struct AdapterJson {
  nlohmann::json& j;
  const std::string& path;

  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  [[noreturn]] void type_error(const char* k, const char* expected) const {
    fail("{}: key '{}' must be {} (got {})", path, k, expected, json_excerpt(j[k]));
  }
};

// r, lora_alpha, lora_dropout, use_rslora, bias, init_lora_weights.
void read_lora_scalars(LoraConfig& c, const AdapterJson& a) {
  nlohmann::json& j = a.j;
  const std::string& path = a.path;
  LT_CHECK(a.has("r"), "{}: missing 'r' (the LoRA rank)", path);
  if (!j["r"].is_number_integer()) a.type_error("r", "an integer");
  c.r = j["r"].get<int>();
  LT_CHECK(c.r > 0, "{}: 'r' must be > 0 (got {})", path, c.r);
  if (a.has("lora_alpha")) {
    if (!j["lora_alpha"].is_number()) a.type_error("lora_alpha", "a number");
    const double alpha = j["lora_alpha"].get<double>();
    LT_CHECK(alpha > 0 && alpha <= 1e9, "{}: lora_alpha: {} is out of range: it must be > 0 and <= 1e9 (the scale is "
             "lora_alpha / r)", path, alpha);
    c.alpha = float(alpha);
  }
  if (a.has("lora_dropout")) {
    if (!j["lora_dropout"].is_number()) a.type_error("lora_dropout", "a number");
    const double dropout = j["lora_dropout"].get<double>();
    LT_CHECK(dropout >= 0 && dropout < 1, "{}: lora_dropout: {} is out of range: it must be >= 0 and < 1", path,
             dropout);
    c.dropout = float(dropout);
  }
  if (a.has("use_rslora")) {
    if (!j["use_rslora"].is_boolean()) a.type_error("use_rslora", "true or false");
    c.use_rslora = j["use_rslora"].get<bool>();
  }
  if (a.has("bias")) {
    if (!j["bias"].is_string()) a.type_error("bias", "a string");
    c.bias = j["bias"];
    LT_CHECK(c.bias == "none" || c.bias == "all" || c.bias == "lora_only",
             "{}: bias '{}' is not one of none, all, lora_only", path, excerpt(c.bias));
  }
  if (a.has("init_lora_weights")) {
    // A loaded adapter's A and B are what they are, whatever started them (true, false, gaussian,
    // eva, ...), except after an initialisation that also changed the base weight: PiSSA / OLoRA /
    // CorDA adapters hold A and B for the residual W − s·B₀·A₀ (LoftQ's for its quantized W), which
    // PEFT rebuilds on load and which would be silently wrong here.
    const auto& v = j["init_lora_weights"];
    if (!v.is_boolean() && !v.is_string()) a.type_error("init_lora_weights", "true, false or the name of an initialisation");
    const std::string init = v.is_string() ? v.get<std::string>() : "";
    const bool mutated = init.rfind("pissa", 0) == 0 || init == "olora" || init == "corda" || init == "loftq";
    LT_CHECK(!mutated, "{}: init_lora_weights '{}': this adapter was saved in {} form, for the residual base weight "
             "W − s·B₀·A₀, not for the original model. Save it with PEFT's path_initial_model_for_weight_conversion "
             "(or train it here: leantune saves PiSSA / OLoRA adapters converted to plain LoRA)", path, excerpt(init),
             init == "olora" ? "OLoRA" : init == "corda" ? "CorDA" : init == "loftq" ? "LoftQ" : "PiSSA");
    c.init = init == "gaussian" ? "gaussian" : "default";
  }
  if (a.has("use_dora")) {
    if (!j["use_dora"].is_boolean()) a.type_error("use_dora", "true or false");
    c.use_dora = j["use_dora"].get<bool>();
  }
}

// target_modules: a list of Llama module names, or "all-linear" (not a regular expression).
std::vector<std::string> read_target_modules(const AdapterJson& a) {
  const std::string& path = a.path;
  LT_CHECK(a.has("target_modules"), "{}: missing 'target_modules'", path);
  const auto& tm = a.j["target_modules"];
  if (tm.is_string()) {
    const std::string s = tm;
    LT_CHECK(s == "all-linear",
             "{}: target_modules '{}' is a regular expression, which is not supported (use a list of module "
             "names or \"all-linear\")",
             path, excerpt(s));
    return {"all-linear"};
  }
  if (!tm.is_array()) a.type_error("target_modules", "a list of module names or \"all-linear\"");
  std::vector<std::string> out;
  for (const auto& m : tm) {
    if (!m.is_string()) a.type_error("target_modules", "a list of strings");
    const std::string name = m;
    LT_CHECK(is_llama_module(name) || is_module_path(name), "{}: target module '{}' is not supported (expected "
             "some of {}, or their paths model.layers.N.self_attn|mlp.MODULE; for Phi-3 {})",
             path, excerpt(name), fmt::join(llama_linear_modules(), ", "), fmt::join(phi3_linear_modules(), ", "));
    out.push_back(name);
  }
  LT_CHECK(!out.empty(), "{}: target_modules is empty", path);
  return out;
}

// layers_to_transform (an index or a list of them) and layers_pattern (only Llama's "layers").
void read_layers(LoraConfig& c, const AdapterJson& a) {
  const std::string& path = a.path;
  if (a.has("layers_to_transform")) {
    const auto& l = a.j["layers_to_transform"];
    if (l.is_number_integer()) {
      c.layers_to_transform = {l.get<int>()};
    } else if (l.is_array()) {
      for (const auto& x : l) {
        if (!x.is_number_integer()) a.type_error("layers_to_transform", "an integer or a list of integers");
        c.layers_to_transform.push_back(x.get<int>());
      }
    } else {
      a.type_error("layers_to_transform", "an integer or a list of integers");
    }
    for (int x : c.layers_to_transform) LT_CHECK(x >= 0, "{}: layers_to_transform has a negative layer {}", path, x);
  }
  if (a.has("layers_pattern")) {
    const auto& p = a.j["layers_pattern"];
    const bool ok = (p.is_string() && p.get<std::string>() == "layers") ||
                    (p.is_array() && p.size() == 1 && p[0].is_string() && p[0].get<std::string>() == "layers");
    LT_CHECK(ok, "{}: layers_pattern {} is not supported (Llama layers are model.layers)", path, json_excerpt(p));
  }
}

// Features we do not implement: refuse them rather than load something that computes otherwise.
void refuse_unsupported(const AdapterJson& a) {
  nlohmann::json& j = a.j;
  auto unsupported_if = [&](bool cond, const char* key, const char* why) {
    LT_CHECK(!cond, "{}: '{}' = {} is not supported ({})", a.path, key, json_excerpt(j[key]), why);
  };
  auto non_empty = [&](const char* k) {
    return a.has(k) && !((j[k].is_object() || j[k].is_array() || j[k].is_string()) && j[k].empty());
  };
  unsupported_if(non_empty("modules_to_save"), "modules_to_save", "fully trained extra modules");
  unsupported_if(a.has("lora_bias") && j["lora_bias"] != false, "lora_bias", "a bias on lora_B");
  unsupported_if(a.has("fan_in_fan_out") && j["fan_in_fan_out"] != false, "fan_in_fan_out",
                 "Llama linears are (out, in)");
  unsupported_if(a.has("use_qalora") && j["use_qalora"] != false, "use_qalora", "QA-LoRA");
  unsupported_if(non_empty("layer_replication"), "layer_replication", "layer replication");
  unsupported_if(non_empty("trainable_token_indices"), "trainable_token_indices", "trainable tokens");
  unsupported_if(non_empty("target_parameters"), "target_parameters", "LoRA on parameters");
}

// rank_pattern (module -> rank > 0) and alpha_pattern (module -> alpha > 0).
RankPattern read_patterns(const AdapterJson& a) {
  RankPattern p;
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (!a.has(key)) continue;
    if (!a.j[key].is_object()) a.type_error(key, "an object of module name -> value");
    for (const auto& [k, v] : a.j[key].items()) {
      const bool rank = key == std::string("rank_pattern");
      LT_CHECK(rank ? v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() <= (1 << 20)
                    : v.is_number() && v.get<double>() > 0 && v.get<double>() <= 1e9,
               "{}: {}['{}'] = {} must be {}", a.path, key, excerpt(k), json_excerpt(v),
               rank ? "a whole number > 0 (the module's rank)" : "a number > 0 (the module's lora_alpha)");
      if (rank) p.rank[k] = v.get<int>();
      else p.alpha[k] = float(v.get<double>());
    }
  }
  return p;
}

// PEFT's get_pattern_key: the first pattern key k with re.match(rf"(.*\.)?({k})$", module).
template <class V>
const V* pattern_value(const std::map<std::string, V>& m, const std::string& module, const std::string& path) {
  for (const auto& [k, v] : m) {
    std::regex re;
    try {
      re = std::regex("(.*\\.)?(" + k + ")$");
    } catch (const std::regex_error&) {
      fail("{}: pattern key '{}' is not a regular expression PEFT could match", path, excerpt(k));
    }
    if (std::regex_match(module, re)) return &v;
  }
  return nullptr;
}

// A rank_pattern / alpha_pattern adapter as the plain LoRA of rank R = max(r, every module's rank)
// that computes the same: A zero-padded to R rows, B to R columns and scaled by s_m / s_R (each
// module's scale over the uniform one), so merge, serve and GGUF export see one r and one scale.
void uniformize_ranks(LoadedAdapter& out, const RankPattern& pat,
                      const std::map<std::pair<int, std::string>, int>& ranks) {
  LoraConfig& c = out.config;
  int R = c.r;
  for (const auto& [where, r] : ranks) R = std::max(R, r);
  auto scale = [&](float alpha, int r) { return c.use_rslora ? alpha / std::sqrt(float(r)) : alpha / float(r); };
  const float sR = scale(c.alpha, R);
  for (const auto& [where, r] : ranks) {
    const auto& [layer, module] = where;
    const std::string mpath = fmt::format("model.layers.{}.{}.{}", layer, llama_module_parent(module), module);
    const float* am = pattern_value(pat.alpha, mpath, out.tensors.source);
    const float f = scale(am ? *am : c.alpha, r) / sR;
    if (r == R && f == 1.0f) continue;
    for (bool is_A : {true, false}) {
      const std::string key = peft_lora_key(layer, module, is_A);
      const TensorInfo t = *out.tensors.find(key);
      const int64_t rows = is_A ? R : t.shape[0], cols = is_A ? t.shape[1] : R;
      float* d = reinterpret_cast<float*>(out.tensors.allocate(size_t(rows * cols) * sizeof(float)));
      std::fill(d, d + rows * cols, 0.0f);
      std::vector<float> src(size_t(t.numel()));
      convert_to_f32(src.data(), t.data, t.dtype, src.size());
      if (is_A) std::copy(src.begin(), src.end(), d);
      else
        for (int64_t o = 0; o < rows; ++o)
          for (int64_t k = 0; k < r; ++k) d[o * R + k] = src[size_t(o * r + k)] * f;
      TensorInfo n = t;
      n.dtype = DType::F32;
      n.shape = {rows, cols};
      n.data = d;
      n.nbytes = size_t(rows * cols) * sizeof(float);
      out.tensors.erase(key);
      out.tensors.add(std::move(n));
    }
  }
  c.r = R;
}

}  // namespace

LoraConfig parse_peft_adapter_config(const std::string& text, const std::string& path, std::string* base_model,
                                     RankPattern* pattern) {
  nlohmann::json j = parse_json(text, path);
  LT_CHECK(j.is_object(), "{}: expected a JSON object", path);
  const AdapterJson a{j, path};
  LT_CHECK(a.has("peft_type"), "{}: missing 'peft_type' (expected \"LORA\")", path);
  if (!j["peft_type"].is_string()) a.type_error("peft_type", "a string");
  const std::string peft_type = j["peft_type"];
  LT_CHECK(peft_type == "LORA", "{}: peft_type is '{}'; only LORA adapters are supported", path, excerpt(peft_type));

  LoraConfig c;
  read_lora_scalars(c, a);
  c.target_modules = read_target_modules(a);
  read_layers(c, a);
  refuse_unsupported(a);
  const RankPattern p = read_patterns(a);
  if (pattern) *pattern = p;
  else
    LT_CHECK(p.rank.empty() && p.alpha.empty(), "{}: rank_pattern / alpha_pattern (per-module ranks) are not "
             "supported here; load the adapter folder itself (load_peft_adapter pads the ranks)", path);
  if (base_model) {
    base_model->clear();
    if (a.has("base_model_name_or_path")) {
      if (!j["base_model_name_or_path"].is_string()) a.type_error("base_model_name_or_path", "a string");
      *base_model = j["base_model_name_or_path"].get<std::string>();
    }
  }
  return c;
}

LoadedAdapter load_peft_adapter(const std::string& dir) {
  const std::string cfg_path = join_path(dir, kConfigFile);
  const std::string st_path = join_path(dir, kWeightsFile);
  LT_CHECK(std::filesystem::exists(cfg_path), "{}: no {} (not a PEFT adapter folder)", dir, kConfigFile);
  LT_CHECK(std::filesystem::exists(st_path), "{}: no {} (adapters saved as .bin are not supported)", dir,
           kWeightsFile);
  LoadedAdapter out;
  RankPattern pattern;
  out.config = parse_peft_adapter_config(read_text_file(cfg_path), cfg_path, &out.base_model, &pattern);
  const LoraConfig& c = out.config;
  std::map<std::pair<int, std::string>, int> ranks;  // (layer, module) -> its rank (rank_pattern, else r)

  // The file's tensors, then the same tensors under normalized keys in out.tensors. The raw set
  // owns the file mapping; out.tensors shares that ownership through an aliasing shared_ptr (it
  // points at nothing, it only keeps `raw`, hence the mapping, alive).
  auto raw = std::make_shared<TensorSet>();
  raw->source = st_path;
  load_safetensors(st_path, *raw);
  out.tensors.add_file(std::shared_ptr<MappedFile>(raw, static_cast<MappedFile*>(nullptr)));
  out.tensors.source = st_path;

  const bool all_linear = c.target_modules.size() == 1 && c.target_modules[0] == "all-linear";
  const std::set<std::string> targets(c.target_modules.begin(), c.target_modules.end());
  const std::set<int> layers(c.layers_to_transform.begin(), c.layers_to_transform.end());
  // (layer, module) -> shapes of A and B seen
  std::map<std::pair<int, std::string>, std::pair<const TensorInfo*, const TensorInfo*>> pairs;
  std::set<std::pair<int, std::string>> magnitudes;  // DoRA: (layer, module) with a magnitude
  for (const auto& [name, t] : raw->all()) {
    ParsedKey pk;
    LT_CHECK(parse_key(name, &pk),
             "{}: tensor '{}' is not a LoRA or bias key of a Llama projection (expected e.g. '{}')", st_path, name,
             peft_lora_key(0, "q_proj", true));
    LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16,
             "{}: tensor '{}' has dtype {}, expected F32, BF16 or F16", st_path, name, safetensors_dtype_name(t.dtype));
    if (pk.kind == ParsedKey::Bias) {
      LT_CHECK(c.bias != "none", "{}: tensor '{}' is a bias but the config says bias \"none\"", st_path, name);
      LT_CHECK(t.shape.size() == 1, "{}: bias '{}' has {} dimensions, expected 1", st_path, name, t.shape.size());
    } else if (pk.kind == ParsedKey::Magnitude) {
      LT_CHECK(c.use_dora, "{}: tensor '{}' is a DoRA magnitude but {} says use_dora false", st_path, name,
               kConfigFile);
      LT_CHECK(t.shape.size() == 1, "{}: DoRA magnitude '{}' has {} dimensions, expected 1 (out)", st_path, name,
               t.shape.size());
      magnitudes.insert({pk.layer, pk.module});
    } else {
      LT_CHECK(all_linear || targets.count(pk.module) || is_targeted(c, pk.layer, pk.module), "{}: tensor '{}' adapts "
               "'{}', which is not in target_modules",
               st_path, name, pk.module);
      LT_CHECK(layers.empty() || layers.count(pk.layer),
               "{}: tensor '{}' adapts layer {}, which is not in layers_to_transform", st_path, name, pk.layer);
      LT_CHECK(t.shape.size() == 2, "{}: tensor '{}' has shape [{}], expected 2 dimensions", st_path, name,
               fmt::join(t.shape, ", "));
      const bool is_A = pk.kind == ParsedKey::LoraA;
      const int64_t rank_dim = is_A ? t.shape[0] : t.shape[1];
      const int* rp = pattern_value(pattern.rank, fmt::format("model.layers.{}.{}.{}", pk.layer,
                                                              llama_module_parent(pk.module), pk.module), st_path);
      const int r = rp ? *rp : c.r;
      ranks[{pk.layer, pk.module}] = r;
      LT_CHECK(rank_dim == r, "{}: tensor '{}' has shape [{}]; expected {} with r = {} from {}", st_path, name,
               fmt::join(t.shape, ", "), is_A ? "(r, in)" : "(out, r)", r,
               rp ? std::string(kConfigFile) + "'s rank_pattern" : std::string(kConfigFile));
      auto& slot = pairs[{pk.layer, pk.module}];
      (is_A ? slot.first : slot.second) = &t;
    }
    if (const int64_t bad = first_non_finite(t); bad >= 0)
      fail("{}: tensor '{}' holds a non-finite value (NaN or infinity) at element {} of {}; the adapter is corrupt "
           "or its training diverged, and merging it would turn the model's weights into NaN", st_path, name, bad,
           t.numel());
    TensorInfo copy = t;
    copy.name = normalized_key(pk);
    LT_CHECK(!out.tensors.find(copy.name), "{}: tensors '{}' and another key both normalize to '{}'", st_path, name,
             copy.name);
    out.tensors.add(std::move(copy));
  }
  for (const auto& [where, ab] : pairs) {
    const auto& [layer, module] = where;
    LT_CHECK(ab.first, "{}: '{}' has no matching '{}'", st_path, peft_lora_key(layer, module, false),
             peft_lora_key(layer, module, true));
    LT_CHECK(ab.second, "{}: '{}' has no matching '{}'", st_path, peft_lora_key(layer, module, true),
             peft_lora_key(layer, module, false));
    LT_CHECK(!c.use_dora || magnitudes.count(where), "{}: use_dora is true but '{}' has no DoRA magnitude '{}'",
             st_path, peft_lora_key(layer, module, true), peft_magnitude_key(layer, module));
  }
  for (const auto& where : magnitudes)
    LT_CHECK(pairs.count(where), "{}: DoRA magnitude '{}' has no lora_A / lora_B", st_path,
             peft_magnitude_key(where.first, where.second));
  LT_CHECK(!pairs.empty(), "{}: no lora_A / lora_B tensors", st_path);
  if (!pattern.rank.empty() || !pattern.alpha.empty()) uniformize_ranks(out, pattern, ranks);
  return out;
}

void check_adapter_matches_model(const LoadedAdapter& ad, const ModelConfig& m, const std::string& dir) {
  const std::string where = join_path(dir, kWeightsFile);
  const int64_t C = m.dim, F = m.hidden_dim, R = ad.config.r;
  const auto& mods = llama_linear_modules();
  for (const auto& [name, t] : ad.tensors.all()) {
    ParsedKey pk;
    LT_ASSERT(parse_key(name, &pk));  // load_peft_adapter normalized every key
    LT_CHECK(pk.layer < m.n_layers, "{}: tensor '{}' adapts layer {}, but the base model has {} layers (0 to {}); the "
             "adapter was trained for another model and would lose this layer in a merge", where, name, pk.layer,
             m.n_layers, m.n_layers - 1);
    const auto [in, out] = m.linear_shape(*parse_proj(pk.module));  // parse_key accepted only the seven
    std::vector<int64_t> want = pk.kind == ParsedKey::LoraA   ? std::vector<int64_t>{R, in}
                                : pk.kind == ParsedKey::LoraB ? std::vector<int64_t>{out, R}
                                                              : std::vector<int64_t>{out};  // bias, magnitude
    LT_CHECK(t.shape == want, "{}: tensor '{}' has shape [{}], but the base model's {} weight is (out {}, in {}), so "
             "[{}] was expected; the adapter was trained for another model (hidden size {}, MLP width {} here)",
             where, name, fmt::join(t.shape, ", "), pk.module, out, in, fmt::join(want, ", "), C, F);
  }
  // every module the config adapts, in every layer it names, has its pair: an adapter for a model
  // with fewer layers would otherwise leave this model's last layers unadapted without a word
  const LoraConfig& c = ad.config;
  for (int l = 0; l < m.n_layers; ++l)
    for (const auto& mod : mods)
      if (is_adapted(c, l, mod) && !ad.tensors.find(peft_lora_key(l, mod, true)))
        fail("{}: the adapter's config adapts {} in {} but has no '{}' for layer {} of this {}-layer base model; it "
             "was trained for a model with fewer layers (or the file is incomplete)", where, mod,
             c.layers_to_transform.empty() ? std::string("every layer") : std::string("layers_to_transform"),
             peft_lora_key(l, mod, true), l, m.n_layers);
}

}  // namespace lt
