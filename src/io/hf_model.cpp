// HF config.json and weight folders. Field defaults follow transformers' LlamaConfig /
// MistralConfig / Qwen2Config / Qwen3Config where a field is optional there and commonly omitted.
#include "io/hf_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/json_parse.h"
#include "core/rope_freqs.h"
#include "io/fused_proj.h"
#include "io/safetensors.h"

namespace lt {

namespace {

using json = nlohmann::json;

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reads fields of one config object, naming the file and field in every error.
struct Fields {
  const json& j;
  const std::string& where;

  const json* find(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int to_int(const json& v, const char* key) const {
    LT_CHECK(v.is_number_integer(), "{}: field '{}' must be an integer, got {}", where, key, json_excerpt(v));
    bool ok = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<int>::max())
                                     : v.get<int64_t>() >= std::numeric_limits<int>::min();
    LT_CHECK(ok, "{}: field '{}' is out of range: {}", where, key, json_excerpt(v));
    return int(v.get<int64_t>());
  }
  int req_int(const char* key) const {
    const json* v = find(key);
    LT_CHECK(v, "{}: missing required field '{}'", where, key);
    return to_int(*v, key);
  }
  int opt_int(const char* key, int def) const {
    const json* v = find(key);
    return v ? to_int(*v, key) : def;
  }
  float opt_float(const char* key, float def) const {
    const json* v = find(key);
    if (!v) return def;
    LT_CHECK(v->is_number(), "{}: field '{}' must be a number, got {}", where, key, json_excerpt(*v));
    return v->get<float>();
  }
  bool opt_bool(const char* key, bool def) const {
    const json* v = find(key);
    if (!v) return def;
    LT_CHECK(v->is_boolean(), "{}: field '{}' must be true or false, got {}", where, key, json_excerpt(*v));
    return v->get<bool>();
  }
  std::string opt_string(const char* key) const {
    const json* v = find(key);
    if (!v) return "";
    LT_CHECK(v->is_string(), "{}: field '{}' must be a string, got {}", where, key, json_excerpt(*v));
    return v->get<std::string>();
  }
  // An int, or a list of ints (the first is taken), or absent (-1).
  int opt_token_id(const char* key) const {
    const json* v = find(key);
    if (!v) return -1;
    if (v->is_array()) {
      if (v->empty()) return -1;
      return to_int((*v)[0], key);
    }
    return to_int(*v, key);
  }
};

// A list of positive numbers (longrope's short_factor / long_factor).
std::vector<float> float_list(const Fields& f, const char* key) {
  const json* v = f.find(key);
  LT_CHECK(v && v->is_array(), "{}: field '{}' must be a list of numbers, got {}", f.where, key,
           v ? json_excerpt(*v) : std::string("nothing"));
  std::vector<float> out;
  for (const auto& x : *v) {
    LT_CHECK(x.is_number(), "{}: field '{}' must hold numbers, got {}", f.where, key, json_excerpt(x));
    out.push_back(x.get<float>());
  }
  return out;
}

// rope_scaling (transformers < 5) or rope_parameters (transformers >= 5, which also holds
// rope_theta), read as transformers' standardize_rope_params and _compute_*_parameters do:
// original_max_position_embeddings (llama3, yarn, longrope) from a top-level field first, then the
// rope dict, then max_position_embeddings; a missing yarn / longrope factor is
// max_position_embeddings / original_max_position_embeddings.
// Phi-3's config reads the older names "su" and "yarn" as longrope (Phi3Config).
RopeScaling parse_rope_scaling(const json& j, const std::string& where, int max_pos, bool phi3) {
  RopeScaling rs;
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) it = j.find("rope_parameters");
  if (it == j.end() || it->is_null()) return rs;
  LT_CHECK(it->is_object(), "{}: field 'rope_scaling' must be an object or null, got {}", where, json_excerpt(*it));
  std::string sub = where + " (rope_scaling)";
  Fields f{*it, sub};
  std::string type = f.opt_string("rope_type");
  if (type.empty()) type = f.opt_string("type");
  LT_CHECK(!type.empty(), "{}: field 'rope_scaling' has no 'rope_type' (or 'type')", where);
  if (phi3 && (type == "su" || type == "yarn")) type = "longrope";
  LT_CHECK(f.opt_float("partial_rotary_factor", 1.0f) == 1.0f,
           "{}: rope_scaling.partial_rotary_factor {} is not supported (RoPE on part of each head); supported: 1",
           where, f.opt_float("partial_rotary_factor", 1.0f));
  if (type == "default") return rs;
  LT_CHECK(type == "linear" || type == "dynamic" || type == "yarn" || type == "longrope" || type == "llama3",
           "{}: rope_scaling type '{}' is not supported; supported: linear, dynamic, yarn, longrope, llama3 (or "
           "default / null)",
           where, excerpt(type));
  rs.type = type;
  const bool has_original = type == "llama3" || type == "yarn" || type == "longrope";
  if (has_original) {
    Fields top{j, where};
    rs.original_max_position_embeddings =
        top.find("original_max_position_embeddings") ? top.opt_int("original_max_position_embeddings", 0)
                                                     : f.opt_int("original_max_position_embeddings", max_pos);
  }
  const bool factor_derived = type == "yarn" || type == "longrope";
  LT_CHECK(factor_derived || f.find("factor"), "{}: missing required field 'rope_scaling.factor'", where);
  rs.factor = f.find("factor") || rs.original_max_position_embeddings <= 0
                  ? f.opt_float("factor", 1.0f)
                  : float(double(max_pos) / rs.original_max_position_embeddings);
  rs.low_freq_factor = f.opt_float("low_freq_factor", rs.low_freq_factor);
  rs.high_freq_factor = f.opt_float("high_freq_factor", rs.high_freq_factor);
  rs.attention_factor = f.opt_float("attention_factor", 0.0f);
  LT_CHECK(!f.find("attention_factor") || rs.attention_factor > 0,
           "{}: rope_scaling.attention_factor must be positive, got {}", where, rs.attention_factor);
  if (type == "yarn") {
    // transformers: `beta_fast or 32`, `beta_slow or 1` (0 means the default too)
    if (float b = f.opt_float("beta_fast", 0.0f); b != 0) rs.beta_fast = b;
    if (float b = f.opt_float("beta_slow", 0.0f); b != 0) rs.beta_slow = b;
    rs.mscale = f.opt_float("mscale", 0.0f);
    rs.mscale_all_dim = f.opt_float("mscale_all_dim", 0.0f);
    rs.truncate = f.opt_bool("truncate", true);
  }
  if (type == "longrope") {
    rs.short_factor = float_list(f, "short_factor");
    rs.long_factor = float_list(f, "long_factor");
  }
  return rs;
}

// Models that look like a supported family but are not one: mixture-of-experts configs (Mixtral,
// Qwen2/3-MoE, DeepSeek: an expert count) and vision-language ones (a vision tower), refused by
// what they are rather than by an unknown model_type or a missing tensor later.
void refuse_unsupported_variant(const Fields& f, const std::string& arch) {
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"}) {
    const json* v = f.find(key);
    if (!v || !v->is_number() || v->get<double>() <= 0) continue;
    fail("{}: model_type '{}' is a mixture-of-experts model ({} = {}), which is not supported; supported: dense "
         "decoder models of model types {}", f.where, excerpt(arch), key, json_excerpt(*v), kSupportedModelTypes);
  }
  const bool moe_type = arch == "mixtral" || arch.find("moe") != std::string::npos;
  LT_CHECK(!moe_type, "{}: model_type '{}' is a mixture-of-experts model, which is not supported; supported: dense "
           "decoder models of model types {}", f.where, excerpt(arch), kSupportedModelTypes);
  for (const char* key : {"vision_config", "vision_tower", "visual"})
    LT_CHECK(!f.find(key), "{}: model_type '{}' has a vision tower (field '{}'), which is not supported; supported: "
             "text-only decoder models of model types {}", f.where, excerpt(arch), key, kSupportedModelTypes);
}

// c.sliding_layers from the config's layer_types ("sliding_attention" / "full_attention", one per
// layer); false when the field is absent.
bool read_layer_types(const Fields& f, ModelConfig& c) {
  const json* types = f.find("layer_types");
  if (!types) return false;
  LT_CHECK(types->is_array() && types->size() == size_t(c.n_layers), "{}: field 'layer_types' must list one type "
           "per layer ({}), got {}", f.where, c.n_layers, json_excerpt(*types));
  for (size_t l = 0; l < types->size(); ++l) {
    const json& t = (*types)[l];
    LT_CHECK(t == "sliding_attention" || t == "full_attention", "{}: layer_types[{}] is {}; expected "
             "\"full_attention\" or \"sliding_attention\"", f.where, l, json_excerpt(t));
    c.sliding_layers[l] = t == "sliding_attention";
  }
  return true;
}

// Sliding-window attention as transformers applies it: Mistral on every layer when sliding_window
// is set; Qwen2 / Qwen3 only with use_sliding_window, on the layers layer_types names
// "sliding_attention", else (older configs) on layers max_window_layers (default 28) and up.
void read_sliding_window(const Fields& f, ModelConfig& c) {
  const bool qwen = c.arch == "qwen2" || c.arch == "qwen3";
  const bool every_layer = c.arch == "mistral" || c.arch == "phi3";  // Phi-3: every layer when set
  if (!every_layer && !(qwen && f.opt_bool("use_sliding_window", false))) return;
  c.sliding_window = f.opt_int("sliding_window", 0);
  LT_CHECK(c.sliding_window >= 0, "{}: field 'sliding_window' must be positive or null, got {}", f.where,
           c.sliding_window);
  if (!qwen || c.sliding_window == 0) return;
  c.sliding_layers.assign(size_t(std::max(c.n_layers, 0)), false);
  if (!read_layer_types(f, c)) {
    const int first = f.opt_int("max_window_layers", 28);
    for (int l = std::max(first, 0); l < c.n_layers; ++l) c.sliding_layers[size_t(l)] = true;
  }
}

// Gemma 2 / Gemma 3 (text) as transformers' Gemma2Config / Gemma3TextConfig build them: GeGLU
// (hidden_activation gelu_pytorch_tanh), (1 + w) norms, four norms per layer, embeddings times
// sqrt(hidden_size), query_pre_attn_scalar, soft-capping, and sliding layers from layer_types, else
// every other layer (Gemma 2: layers 0, 2, ...) or all but every sliding_window_pattern-th (Gemma 3,
// default 6). Gemma 3's global and local RoPE: rope_parameters {full_attention, sliding_attention}
// (transformers >= 5), else rope_theta / rope_scaling and rope_local_base_freq.
void read_gemma(const json& j, const Fields& f, ModelConfig& c) {
  const bool g3 = c.arch == "gemma3_text";
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    const std::string act = f.opt_string(key);
    if (act.empty()) continue;
    LT_CHECK(act == "gelu_pytorch_tanh", "{}: {} '{}' is not supported for {}; supported: gelu_pytorch_tanh",
             f.where, key, excerpt(act), c.arch);
    break;
  }
  c.mlp_act = MlpAct::GeluTanh;
  c.embed_scale = float(std::sqrt(double(c.dim)));
  c.norm_offset = c.sandwich_norms = true;
  c.qk_norm = g3;
  c.attention_bias = c.o_proj_bias = f.opt_bool("attention_bias", false);
  c.tie_embeddings = f.opt_bool("tie_word_embeddings", true);
  c.query_pre_attn_scalar = f.opt_float("query_pre_attn_scalar", 256.0f);
  c.attn_softcap = f.opt_float("attn_logit_softcapping", g3 ? 0.0f : 50.0f);
  c.final_softcap = f.opt_float("final_logit_softcapping", g3 ? 0.0f : 30.0f);
  LT_CHECK(!f.opt_bool("use_bidirectional_attention", false), "{}: use_bidirectional_attention (an embedding "
           "model) is not supported; supported: causal {} decoders", f.where, c.arch);
  c.sliding_window = f.find("sliding_window") ? f.opt_int("sliding_window", 0) : 4096;
  LT_CHECK(c.sliding_window >= 0, "{}: field 'sliding_window' must be positive or null, got {}", f.where,
           c.sliding_window);
  c.sliding_layers.assign(size_t(std::max(c.n_layers, 0)), false);
  if (!read_layer_types(f, c)) {
    const int pattern = g3 ? f.opt_int("sliding_window_pattern", 6) : 2;
    LT_CHECK(pattern >= 1, "{}: sliding_window_pattern must be positive, got {}", f.where, pattern);
    for (int l = 0; l < c.n_layers; ++l) c.sliding_layers[size_t(l)] = (l + 1) % pattern != 0;
  }
  if (!g3) return;
  c.head_dim = f.opt_int("head_dim", 256);
  auto rp = j.find("rope_parameters");
  if (rp != j.end() && rp->is_object() && rp->contains("full_attention")) {
    json top = j;  // the global layers' parameters read as a plain config's rope_parameters
    top["rope_parameters"] = (*rp)["full_attention"];
    top.erase("rope_scaling");
    const std::string where = f.where + " (rope_parameters.full_attention)";
    c.rope_theta = Fields{top["rope_parameters"], where}.opt_float("rope_theta", 1e6f);
    c.rope_scaling = parse_rope_scaling(top, where, c.max_seq_len, false);
    const json* local = Fields{*rp, f.where}.find("sliding_attention");
    LT_CHECK(!local || local->is_object(), "{}: rope_parameters.sliding_attention must be an object", f.where);
    Fields lf{local ? *local : json::object(), f.where + " (rope_parameters.sliding_attention)"};
    const std::string type = lf.opt_string("rope_type");
    LT_CHECK(type.empty() || type == "default", "{}: rope_parameters.sliding_attention.rope_type '{}' is not "
             "supported; supported: default", f.where, excerpt(type));
    c.rope_local_theta = lf.opt_float("rope_theta", 10000.0f);
  } else {
    c.rope_theta = f.opt_float("rope_theta", 1e6f);
    c.rope_local_theta = f.opt_float("rope_local_base_freq", 10000.0f);
  }
  c.rope_attention_factor = rope_attention_factor(c.rope_scaling);
}

}  // namespace

ModelConfig parse_hf_config(const std::string& json_text, const std::string& where) {
  json j = parse_json(json_text, where);
  LT_CHECK(j.is_object(), "{}: config must be a JSON object, got {}", where, j.type_name());
  Fields f{j, where};

  ModelConfig c;
  const json* mt = f.find("model_type");
  LT_CHECK(mt, "{}: missing required field 'model_type'", where);
  c.arch = f.opt_string("model_type");
  refuse_unsupported_variant(f, c.arch);
  LT_CHECK(c.arch != "gemma3", "{}: model_type 'gemma3' is Gemma 3 with its vision tower "
           "(Gemma3ForConditionalGeneration), which is not supported; supported: the text-only model_type "
           "'gemma3_text' (Gemma3ForCausalLM) and {}", where, kSupportedModelTypes);
  LT_CHECK(c.arch == "llama" || c.arch == "mistral" || c.arch == "qwen2" || c.arch == "qwen3" || c.arch == "phi3" ||
               c.arch == "gemma2" ||
               c.arch == "gemma3_text",
           "unknown architecture '{}' in {}; supported model types: {}", excerpt(c.arch), where, kSupportedModelTypes);

  c.dim = f.req_int("hidden_size");
  c.n_layers = f.req_int("num_hidden_layers");
  c.n_heads = f.req_int("num_attention_heads");
  c.n_kv_heads = f.opt_int("num_key_value_heads", c.n_heads);
  c.hidden_dim = f.req_int("intermediate_size");
  c.vocab_size = f.req_int("vocab_size");
  LT_CHECK(c.n_heads > 0, "{}: field 'num_attention_heads' must be positive, got {}", where, c.n_heads);
  // transformers' Qwen3Config defaults head_dim to 128, the others to hidden_size / heads
  c.head_dim = f.opt_int("head_dim", c.arch == "qwen3" ? 128 : c.arch == "gemma2" ? 256 : c.dim / c.n_heads);
  c.max_seq_len = f.opt_int("max_position_embeddings", c.max_seq_len);
  c.norm_eps = f.opt_float("rms_norm_eps", c.arch == "phi3" ? 1e-5f : 1e-6f);  // Phi3Config: 1e-5
  c.rope_theta = f.opt_float("rope_theta", 10000.0f);
  if (!f.find("rope_theta")) {
    auto rp = j.find("rope_parameters");
    if (rp != j.end() && rp->is_object())
      c.rope_theta = Fields{*rp, where + " (rope_parameters)"}.opt_float("rope_theta", 10000.0f);
  }
  // Phi-3 (and transformers 5 configs) give partial_rotary_factor at the top level
  LT_CHECK(f.opt_float("partial_rotary_factor", 1.0f) == 1.0f, "{}: partial_rotary_factor {} is not supported (RoPE "
           "on part of each head, as Phi-3-small / Phi-4-mini configs use); supported: 1", where,
           f.opt_float("partial_rotary_factor", 1.0f));
  // Gemma 3's rope_parameters holds one dict per layer type: read_gemma reads them
  const auto rp = j.find("rope_parameters");
  const bool per_layer_type = rp != j.end() && rp->is_object() && rp->contains("full_attention");
  if (!per_layer_type) c.rope_scaling = parse_rope_scaling(j, where, c.max_seq_len, c.arch == "phi3");
  c.rope_attention_factor = rope_attention_factor(c.rope_scaling);
  c.rope_layout = RopeLayout::Halves;
  c.tie_embeddings = f.opt_bool("tie_word_embeddings", false);
  // Biases as transformers builds the modules: Qwen2 always has q/k/v biases (o_proj none, and
  // it has no attention_bias / mlp_bias fields); Llama's and Qwen3's attention_bias covers q, k, v
  // and o, Llama's mlp_bias gate, up and down; Mistral has no biases whatever the config says.
  if (c.arch == "qwen2") {
    c.attention_bias = true;
  } else if (c.arch == "llama") {
    c.attention_bias = c.o_proj_bias = f.opt_bool("attention_bias", false);
    c.mlp_bias = f.opt_bool("mlp_bias", false);
  } else if (c.arch == "qwen3") {  // attention_bias: q, k, v and o (Qwen3Attention); the MLP has none
    c.attention_bias = c.o_proj_bias = f.opt_bool("attention_bias", false);
  }
  c.qk_norm = c.arch == "qwen3";
  c.fused_proj = c.arch == "phi3";  // qkv_proj and gate_up_proj (io/fused_proj.h); Phi-3 has no biases
  read_sliding_window(f, c);
  if (c.arch == "gemma2" || c.arch == "gemma3_text") read_gemma(j, f, c);
  c.bos_token_id = f.opt_token_id("bos_token_id");
  c.eos_token_id = f.opt_token_id("eos_token_id");
  if (const json* q = f.find("quantization_config")) {
    LT_CHECK(q->is_object(), "{}: field 'quantization_config' must be an object", where);
    Fields qf{*q, where + " (quantization_config)"};
    const std::string method = qf.opt_string("quant_method");
    LT_CHECK(method == "leantune", "{}: quantization_config.quant_method '{}' is not supported: leantune reads the "
             "quantized folders that `leantune quantize` writes (quant_method \"leantune\"); start from the "
             "unquantized model", where, excerpt(method));
    const std::string type = qf.opt_string("type");
    c.quantization = find_quant_type(type);
    LT_CHECK(c.quantization, "{}: quantization_config.type '{}' is not one of nf4, fp4, int8, int4, int4_asym, q8_0, q4_0", where, excerpt(type));
    c.quant_blocksize = qf.opt_int("blocksize", is_ggml_block(*c.quantization) ? 32 : 64);
    c.quant_double_quant = qf.opt_bool("double_quant", false);
  }
  validate_config(c, where);
  return c;
}

ModelConfig load_hf_config(const std::string& config_json_path) {
  return parse_hf_config(read_text_file(config_json_path), config_json_path);
}

TensorSet load_hf_weights(const std::string& dir) {
  TensorSet set;
  set.source = dir;
  std::string single = dir + "/model.safetensors", index_path = dir + "/model.safetensors.index.json";
  if (is_file(single)) {
    load_safetensors(single, set);
    return set;
  }
  LT_CHECK(is_file(index_path), "{}: no model.safetensors or model.safetensors.index.json in this folder", dir);

  json index = load_json_file(index_path);
  auto wm = index.is_object() ? index.find("weight_map") : index.end();
  LT_CHECK(index.is_object() && wm != index.end() && wm->is_object(), "{}: missing object field 'weight_map'",
           index_path);
  std::set<std::string> shards;
  for (const auto& [name, shard] : wm->items()) {
    LT_CHECK(shard.is_string(), "{}: weight_map entry '{}' must be a file name string", index_path, name);
    const std::string& s = shard.get_ref<const std::string&>();
    LT_CHECK(!s.empty() && s.find('/') == std::string::npos && s != "." && s != "..",
             "{}: weight_map entry '{}' names '{}', which is not a file name in this folder", index_path, name, s);
    shards.insert(s);
  }
  for (const auto& s : shards) {
    std::string p = dir + "/" + s;
    LT_CHECK(is_file(p), "{}: shard '{}' listed in the weight_map is missing", index_path, s);
    load_safetensors(p, set);
  }
  for (const auto& [name, shard] : wm->items()) {
    const TensorInfo* t = set.find(name);
    std::string p = dir + "/" + shard.get<std::string>();
    LT_CHECK(t, "{}: tensor '{}' is listed in the weight_map but not found in its shard '{}'", index_path, name, p);
    LT_CHECK(t->file == p, "{}: tensor '{}' is listed in shard '{}' but found in '{}'", index_path, name, p, t->file);
  }
  return set;
}

HfModelFiles load_hf_folder(const std::string& dir) {
  HfModelFiles m;
  m.config = load_hf_config(dir + "/config.json");
  m.tensors = load_hf_weights(dir);
  split_fused_tensors(m.config, m.tensors);
  return m;
}

}  // namespace lt
