// YAML and flag parsing for TrainConfig (yaml-cpp). Every key is one entry in apply_key().
#include "train/train_config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>

#include "core/error.h"

namespace lt {

namespace {

template <class T>
T as(const YAML::Node& n, const std::string& key, const std::string& where) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail("{}: key '{}' has a value of the wrong type", where, key);
  }
}

std::vector<std::string> as_list(const YAML::Node& n, const std::string& key, const std::string& where) {
  if (n.IsSequence()) return as<std::vector<std::string>>(n, key, where);
  std::string s = as<std::string>(n, key, where);
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {  // comma-separated scalar
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

void apply_key(TrainConfig& c, const std::string& key, const YAML::Node& v, const std::string& where) {
  auto S = [&] { return as<std::string>(v, key, where); };
  auto I = [&] { return as<int>(v, key, where); };
  auto D = [&] { return as<double>(v, key, where); };
  auto B = [&] { return as<bool>(v, key, where); };
  if (key == "base_model") c.base_model = S();
  else if (key == "tokenizer") c.tokenizer = S();
  else if (key == "datasets") {
    c.datasets.clear();
    if (v.IsSequence()) {
      for (const auto& d : v) {
        DatasetSpec ds;
        if (d.IsScalar()) {
          ds.path = as<std::string>(d, key, where);
        } else {
          LT_CHECK(d["path"], "{}: each entry of 'datasets' needs a 'path'", where);
          ds.path = as<std::string>(d["path"], "datasets.path", where);
          if (d["min_blank_lines"]) ds.min_blank_lines = as<int>(d["min_blank_lines"], "datasets.min_blank_lines", where);
          if (d["doc_separator"]) ds.doc_separator = as<std::string>(d["doc_separator"], "datasets.doc_separator", where);
          for (const auto& kv : d) {
            LT_CHECK(kv.first.IsScalar(), "{}: the keys of a 'datasets' entry must be names (path, type, "
                     "min_blank_lines, doc_separator), not a list or mapping", where);
            auto k = kv.first.as<std::string>();
            LT_CHECK(k == "path" || k == "min_blank_lines" || k == "doc_separator" || k == "type",
                     "{}: unknown key 'datasets.{}' (expected path, type, min_blank_lines, doc_separator)", where, k);
          }
        }
        c.datasets.push_back(ds);
      }
    } else {
      for (const auto& p : as_list(v, key, where)) c.datasets.push_back({p});
    }
  } else if (key == "dataset") c.datasets = {{S()}};
  else if (key == "min_blank_lines") { for (auto& d : c.datasets) d.min_blank_lines = I(); }
  else if (key == "eval_dataset") c.eval_dataset = S();
  else if (key == "val_set_size") c.val_set_size = D();
  else if (key == "chat_template") c.chat_template = S();
  else if (key == "skip_bad_lines") c.skip_bad_lines = B();
  else if (key == "method" || key == "adapter") c.method = S() == "qlora" ? "lora" : S();
  else if (key == "lora_r") c.lora.r = I();
  else if (key == "lora_alpha") c.lora.alpha = float(D());
  else if (key == "lora_dropout") c.lora.dropout = float(D());
  else if (key == "lora_target_modules") c.lora.target_modules = as_list(v, key, where);
  else if (key == "lora_target_linear") { if (B()) c.lora.target_modules = {"all-linear"}; }
  else if (key == "use_rslora") c.lora.use_rslora = B();
  else if (key == "lora_bias") c.lora.bias = S();
  else if (key == "lora_init") c.lora.init = S();
  else if (key == "layers_to_transform") {
    c.lora.layers_to_transform.clear();
    for (const auto& s : as_list(v, key, where)) {
      try {
        c.lora.layers_to_transform.push_back(std::stoi(s));
      } catch (...) {
        fail("{}: layers_to_transform: '{}' is not a layer index", where, s);
      }
    }
  } else if (key == "freeze_embeddings") c.freeze_embeddings = B();
  else if (key == "freeze_lm_head") c.freeze_lm_head = B();
  else if (key == "micro_batch_size") c.micro_batch_size = I();
  else if (key == "gradient_accumulation_steps") c.gradient_accumulation_steps = I();
  else if (key == "sequence_len") c.sequence_len = I();
  else if (key == "sample_packing") c.sample_packing = B();
  else if (key == "learning_rate") c.learning_rate = D();
  else if (key == "lr_scheduler") c.lr_scheduler = S();
  else if (key == "warmup_steps") c.warmup_steps = I();
  else if (key == "weight_decay") c.weight_decay = D();
  else if (key == "max_grad_norm") c.max_grad_norm = D();
  else if (key == "num_epochs") c.num_epochs = I();
  else if (key == "max_steps") c.max_steps = I();
  else if (key == "gradient_checkpointing") {
    std::string s = S();
    c.gradient_checkpointing = s == "true" ? "every" : s == "false" ? "none" : s;
  } else if (key == "unfreeze_schedule") c.unfreeze_schedule = S();
  else if (key == "eval_steps") c.eval_steps = I();
  else if (key == "eval_batches") c.eval_batches = I();
  else if (key == "save_steps") c.save_steps = I();
  else if (key == "logging_steps") c.logging_steps = I();
  else if (key == "output_dir") c.output_dir = S();
  else if (key == "seed") c.seed = as<uint64_t>(v, key, where);
  else if (key == "threads") c.threads = I();
  else if (key == "resume") c.resume = S();
  else if (key == "memory_budget") c.memory_budget = S();
  else if (key == "auto") c.auto_fit = B();
  else if (key == "quantization") c.quantization = S();
  else if (key == "double_quant") c.double_quant = B();
  else if (key == "quant_blocksize") c.quant_blocksize = I();
  else if (key == "int8_threshold") c.int8_threshold = D();
  else if (key == "precision") c.precision = S();
  else if (key == "initial_loss_scale") c.initial_loss_scale = D();
  else if (key == "loss_scale_window") c.loss_scale_window = I();
  else if (key == "zero_stage" || key == "zero") c.zero_stage = I();
  else if (key == "offload_optimizer") c.offload_optimizer = S();
  else if (key == "offload_dir") c.offload_dir = S();
  else if (key == "zero_overlap") c.zero_overlap = B();
  else fail("{}: unknown key '{}'", where, key);
}

}  // namespace

TrainConfig load_train_config(const std::string& path) {
  TrainConfig c;
  c.source = path.empty() ? "flags" : path;
  if (path.empty()) return c;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail("{}: cannot open", path);
  } catch (const YAML::Exception& e) {
    fail("{}: line {}: malformed YAML: {}", path, e.mark.line + 1, e.msg);
  }
  if (root.IsNull()) return c;
  LT_CHECK(root.IsMap(), "{}: the config must be a mapping of keys to values", path);
  for (const auto& kv : root) {
    LT_CHECK(kv.first.IsScalar(), "{}: line {}: a key must be a name, not a list or mapping", path,
             kv.first.Mark().line + 1);
    std::string key = kv.first.as<std::string>();
    apply_key(c, key, kv.second, fmt::format("{}: line {}", path, kv.first.Mark().line + 1));
  }
  return c;
}

void set_train_config_key(TrainConfig& c, const std::string& key, const std::string& value) {
  YAML::Node v;
  try {
    v = YAML::Load(value);
  } catch (const YAML::Exception&) {
    v = YAML::Node(value);
  }
  if (v.IsNull()) v = YAML::Node(value);
  apply_key(c, key, v, "--" + key);
}

TrainConfig parse_train_args(const std::vector<std::string>& args) {
  size_t first = 0;
  std::string path;
  if (!args.empty() && args[0].rfind("--", 0) != 0) path = args[first++];
  TrainConfig cfg = load_train_config(path);
  for (size_t i = first; i < args.size(); ++i) {
    std::string arg = args[i];
    LT_CHECK(arg.rfind("--", 0) == 0, "unexpected argument '{}' (keys are given as --key value)", arg);
    arg = arg.substr(2);
    std::string key = arg, value;
    auto eq = arg.find('=');
    if (eq != std::string::npos) {
      key = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else {
      LT_CHECK(i + 1 < args.size(), "--{} needs a value", key);
      value = args[++i];
    }
    for (auto& ch : key)
      if (ch == '-') ch = '_';
    set_train_config_key(cfg, key, value);
  }
  return cfg;
}

void validate_train_config(const TrainConfig& c) {
  LT_CHECK(!c.base_model.empty(), "{}: 'base_model' is required", c.source);
  LT_CHECK(!c.datasets.empty(), "{}: 'datasets' is required (a list of paths)", c.source);
  LT_CHECK(c.micro_batch_size >= 1, "micro_batch_size must be >= 1 (got {})", c.micro_batch_size);
  LT_CHECK(c.gradient_accumulation_steps >= 1, "gradient_accumulation_steps must be >= 1 (got {})",
           c.gradient_accumulation_steps);
  LT_CHECK(c.val_set_size >= 0 && c.val_set_size < 1, "val_set_size must be in [0, 1) (got {})", c.val_set_size);
  LT_CHECK(c.learning_rate > 0, "learning_rate must be > 0 (got {})", c.learning_rate);
  LT_CHECK(c.num_epochs >= 1 || c.max_steps > 0, "num_epochs must be >= 1 or max_steps > 0");
  LT_CHECK(c.max_grad_norm >= 0, "max_grad_norm must be >= 0");
  LT_CHECK(c.logging_steps >= 1, "logging_steps must be >= 1");
  const std::string& q = c.quantization;
  LT_CHECK(q == "none" || q == "nf4" || q == "fp4" || q == "int8",
           "{}: quantization '{}' is not one of none, nf4, fp4, int8", c.source, q);
  if (q != "none")
    LT_CHECK(c.method == "lora", "{}: quantization: {} quantizes the frozen base of a LoRA run; method: {} trains "
             "the base weights themselves. Use method: lora (QLoRA) or quantization: none", c.source, q, c.method);
  const int bs = c.quant_blocksize;
  LT_CHECK(bs >= 64 && bs <= 4096 && (bs & (bs - 1)) == 0,
           "{}: quant_blocksize {} is not a power of two from 64 to 4096 (64 is the NF4 default)", c.source, bs);
  LT_CHECK(!(c.double_quant && q == "int8"), "{}: double_quant applies to nf4 and fp4; int8 keeps one f32 scale "
           "per row", c.source);
  LT_CHECK(std::isfinite(c.int8_threshold) && c.int8_threshold >= 0,
           "{}: int8_threshold must be >= 0 (got {}; 0 disables the outlier columns)", c.source, c.int8_threshold);
  LT_CHECK(c.precision == "fp32" || c.precision == "bf16" || c.precision == "fp16",
           "{}: precision '{}' is not one of fp32, bf16, fp16", c.source, c.precision);
  LT_CHECK(std::isfinite(c.initial_loss_scale) && c.initial_loss_scale > 0 && c.initial_loss_scale <= 3e38,
           "{}: initial_loss_scale must be a finite number > 0 (got {}; 65536 is the default)", c.source,
           c.initial_loss_scale);
  LT_CHECK(c.loss_scale_window >= 1, "{}: loss_scale_window must be >= 1 (got {})", c.source, c.loss_scale_window);
  LT_CHECK(c.zero_stage >= -1 && c.zero_stage <= 3, "{}: zero_stage must be 0, 1, 2 or 3 (got {})", c.source,
           c.zero_stage);
  LT_CHECK(c.offload_optimizer == "none" || c.offload_optimizer == "disk",
           "{}: offload_optimizer '{}' is not one of none, disk", c.source, c.offload_optimizer);
  LT_CHECK(c.offload_optimizer == "none" || !c.offload_dir.empty(), "{}: offload_optimizer: disk needs offload_dir, "
           "a folder for the optimizer state file", c.source);
}

TrainModelOptions train_model_options(const TrainConfig& c) {
  TrainModelOptions o;
  o.method = c.method;
  o.lora = c.lora;
  o.micro_batch = c.micro_batch_size;
  o.seq_len = c.sequence_len;
  parse_checkpointing(c.gradient_checkpointing, o);
  o.freeze_embeddings = c.freeze_embeddings;
  o.freeze_lm_head = c.freeze_lm_head;
  o.seed = c.seed;
  o.quantization = c.quantization;
  o.quant_blocksize = c.quant_blocksize;
  o.double_quant = c.double_quant;
  o.int8_threshold = float(c.int8_threshold);
  o.precision = c.precision;
  return o;
}

}  // namespace lt
