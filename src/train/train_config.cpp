// YAML and flag parsing for TrainConfig (yaml-cpp). Every key is one entry of apply_data_key(),
// apply_optim_key() or apply_run_key(); method, precision and quantization are parsed there once.
#include "train/train_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <limits>
#include <map>
#include <type_traits>

#include "core/error.h"
#include "train/grad_topk.h"
#include "core/mapped_file.h"
#include "core/threads.h"
#include "train/chat_template.h"
#include "train/data.h"
#include "train/schedule.h"

namespace lt {

namespace {

// What a value of type T must be, for messages.
template <class T>
const char* expected_type() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, long long>)  // int keys are read wide
    return "an integer from -2147483648 to 2147483647";
  else if constexpr (std::is_same_v<T, uint64_t>) return "an integer from 0 to 18446744073709551615";
  else if constexpr (std::is_same_v<T, double>) return "a number";
  else if constexpr (std::is_same_v<T, std::string>) return "a single value (a string)";
  else return "a list of strings";
}

// The value as the user wrote it (cut short), or its kind when it is not a scalar.
std::string yaml_value(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + excerpt(n.Scalar()) + "'";
  return n.IsSequence() ? "a list" : n.IsMap() ? "a mapping" : "nothing";
}

// The value's column in a YAML file ("" for a --flag, whose value has no file position).
std::string yaml_column(const YAML::Node& n, const std::string& where) {
  if (where.rfind("--", 0) == 0 || n.Mark().is_null()) return "";
  return fmt::format(" (column {})", n.Mark().column + 1);
}

// yaml-cpp's conversion, with its exceptions turned into a message naming the key, where it is,
// the expected type and the value found.
template <class T>
T as(const YAML::Node& n, const std::string& key, const std::string& where) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail("{}{}: key '{}' must be {}, got {}", where, yaml_column(n, where), key, expected_type<T>(), yaml_value(n));
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

// ---- allowed values of every numeric key -------------------------------------------------------
constexpr double kIntMax = double(INT_MAX);
constexpr double kInf = std::numeric_limits<double>::infinity();  // no upper bound (the value must still be finite)

struct KeyRange {
  const char* key;
  double lo, hi;
  bool lo_open;      // > lo instead of >= lo
  bool hi_open;      // < hi instead of <= hi
  const char* note;  // what the value means (for the message)
  double (*get)(const TrainConfig&);
};

// One entry per numeric key of TrainConfig (seed and layers_to_transform are checked where parsed;
// quant_blocksize and int8_threshold by validate_train_config, whose messages state their ranges).
const KeyRange kRanges[] = {
    {"val_set_size", 0, 1, false, true, "the fraction of the data held out for evaluation",
     [](const TrainConfig& c) { return c.val_set_size; }},
    {"min_blank_lines", 1, kIntMax, false, false, "blank lines that separate two documents",
     [](const TrainConfig& c) { return double(c.min_blank_lines); }},
    {"lora_r", 1, 65536, false, false, "the LoRA rank; at most min(in, out) of each adapted projection",
     [](const TrainConfig& c) { return double(c.lora.r); }},
    {"lora_alpha", 0, 1e9, true, false, "the LoRA scale is lora_alpha / lora_r",
     [](const TrainConfig& c) { return double(c.lora.alpha); }},
    {"lora_dropout", 0, 1, false, true, "the probability of dropping an input of lora_A",
     [](const TrainConfig& c) { return double(c.lora.dropout); }},
    {"loraplus_lr_ratio", 0, 1e6, false, false, "LoRA+: the lr of lora_B (and of biases, DoRA magnitudes) is "
     "learning_rate times this; 0 turns LoRA+ off", [](const TrainConfig& c) { return c.loraplus_lr_ratio; }},
    {"micro_batch_size", 1, 1 << 20, false, false, "sequences per forward/backward pass",
     [](const TrainConfig& c) { return double(c.micro_batch_size); }},
    {"gradient_accumulation_steps", 1, 1 << 20, false, false, "micro-batches per optimizer step",
     [](const TrainConfig& c) { return double(c.gradient_accumulation_steps); }},
    {"sequence_len", 2, 1 << 24, false, false, "tokens per sequence; also at most the model's max_position_embeddings",
     [](const TrainConfig& c) { return double(c.sequence_len); }},
    {"learning_rate", 0, kInf, true, false, "the peak AdamW learning rate, e.g. 2e-4",
     [](const TrainConfig& c) { return c.learning_rate; }},
    {"warmup_steps", 0, kIntMax, false, false, "optimizer steps of linear warmup; at most max_steps",
     [](const TrainConfig& c) { return double(c.warmup_steps); }},
    {"weight_decay", 0, kInf, false, false, "decoupled AdamW weight decay; 0 turns it off",
     [](const TrainConfig& c) { return c.weight_decay; }},
    {"max_grad_norm", 0, kInf, false, false, "the gradient-norm clip; 0 turns clipping off",
     [](const TrainConfig& c) { return c.max_grad_norm; }},
    {"num_epochs", 1, 1e6, false, false, "passes over the training data (max_steps > 0 stops earlier)",
     [](const TrainConfig& c) { return double(c.num_epochs); }},
    {"max_steps", 0, kIntMax, false, false, "optimizer steps to run; 0 means no limit: num_epochs decides",
     [](const TrainConfig& c) { return double(c.max_steps); }},
    {"eval_steps", 0, kIntMax, false, false, "evaluate every N steps; 0: only before and after training",
     [](const TrainConfig& c) { return double(c.eval_steps); }},
    {"eval_batches", 0, kIntMax, false, false, "a cap on the evaluation batches; 0: all of them",
     [](const TrainConfig& c) { return double(c.eval_batches); }},
    {"save_steps", 0, kIntMax, false, false, "checkpoint every N steps; 0: only at the end",
     [](const TrainConfig& c) { return double(c.save_steps); }},
    {"logging_steps", 1, kIntMax, false, false, "print the loss every N steps",
     [](const TrainConfig& c) { return double(c.logging_steps); }},
    {"threads", 0, kMaxThreads, false, false, "worker threads; 0: one per hardware thread",
     [](const TrainConfig& c) { return double(c.threads); }},
    {"initial_loss_scale", 0, 3e38, true, false, "the fp16 dynamic loss scale's start; 65536 is the default",
     [](const TrainConfig& c) { return c.initial_loss_scale; }},
    {"loss_scale_window", 1, kIntMax, false, false, "clean fp16 steps before the loss scale doubles",
     [](const TrainConfig& c) { return double(c.loss_scale_window); }},
    {"zero_stage", -1, 3, false, false, "ZeRO stage 0-3; -1: one process",
     [](const TrainConfig& c) { return double(c.zero_stage); }},
};

const KeyRange* find_range(const std::string& key) {
  for (const auto& r : kRanges)
    if (key == r.key) return &r;
  return nullptr;
}

std::string range_text(const KeyRange& r) {
  std::string s = fmt::format("{} {}", r.lo_open ? ">" : ">=", r.lo);
  if (std::isfinite(r.hi)) s += fmt::format(" and {} {}", r.hi_open ? "<" : "<=", r.hi);
  else s = "a finite number " + s;
  return s;
}

// lt::Error naming the key, the value (as written, when `text` is given) and the allowed range
// when `value` is outside it (NaN too).
void check_range(const std::string& key, double value, const std::string& where, const std::string& text = "") {
  const KeyRange* r = find_range(key);
  if (!r) return;
  const bool ok = std::isfinite(value) && (r->lo_open ? value > r->lo : value >= r->lo) &&
                  (r->hi_open ? value < r->hi : value <= r->hi);
  const std::string shown = text.empty() ? fmt::format("{}", value) : text.size() > 40 ? text.substr(0, 40) + "..." : text;
  LT_CHECK(ok, "{}: {}: {} is out of range: it must be {} ({})", where, key, shown, range_text(*r), r->note);
}

// seed: a whole number from 0 to 2^64 - 1.
uint64_t parse_seed(const std::string& s, const std::string& where) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  LT_CHECK(!s.empty() && s[0] != '-' && ec == std::errc() && p == s.data() + s.size(),
           "{}: seed: '{}' is out of range: it must be a whole number >= 0 and <= {}", where,
           s.size() > 40 ? s.substr(0, 40) + "..." : s, std::numeric_limits<uint64_t>::max());
  return v;
}

// A layer index of layers_to_transform: a whole number >= 0.
int parse_layer_index(const std::string& s, const std::string& where) {
  int v = -1;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  LT_CHECK(ec == std::errc() && p == s.data() + s.size(), "{}: layers_to_transform: '{}' is not a layer index", where,
           s.size() > 40 ? s.substr(0, 40) + "..." : s);
  LT_CHECK(v >= 0, "{}: layers_to_transform: {} is out of range: a layer index is >= 0", where, v);
  return v;
}

// Every key apply_key() accepts (for the suggestion on an unknown key).
const char* const kKnownKeys[] = {
    "base_model", "tokenizer", "datasets", "dataset", "min_blank_lines", "eval_dataset", "val_set_size",
    "chat_template", "skip_bad_lines", "method", "adapter", "lora_r", "lora_alpha", "lora_dropout",
    "lora_target_modules", "lora_target_linear", "use_rslora", "lora_bias", "lora_init", "layers_to_transform",
    "init_lora_weights", "use_dora", "loraplus_lr_ratio", "qat", "qat_group_size", "qat_symmetric",
    "freeze_embeddings", "freeze_lm_head", "micro_batch_size", "gradient_accumulation_steps", "sequence_len",
    "sample_packing", "learning_rate", "lr_scheduler", "warmup_steps", "weight_decay", "max_grad_norm", "num_epochs",
    "max_steps", "gradient_checkpointing", "unfreeze_schedule", "eval_steps", "eval_batches", "save_steps",
    "logging_steps", "output_dir", "seed", "threads", "resume", "memory_budget", "auto", "quantization",
    "double_quant", "quant_blocksize", "int8_threshold", "precision", "attention_precision", "initial_loss_scale", "loss_scale_window",
    "zero_stage", "zero", "offload_optimizer", "offload_dir", "zero_overlap", "overwrite_output_dir",
    "grad_topk", "grad_topk_feedback", "grad_topk_workers", "grad_topk_variance_correction", "lora_rank_policy",
    "lora_target_r", "lora_rank_importance", "lora_rank_tinit", "lora_rank_tfinal", "lora_rank_delta_t", "lora_rank_beta1",
    "lora_rank_beta2"};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& where) {
  const std::string shown = excerpt(key, 60);
  std::string best;
  size_t best_d = 4;  // suggest only a key within 3 edits (or one that contains / is contained in it)
  for (const char* k : kKnownKeys) {
    size_t d = key.size() > 64 ? 99 : edit_distance(key, k);
    if (std::string(k).find(key) != std::string::npos && key.size() >= 4) d = std::min<size_t>(d, 3);
    if (d < best_d) best_d = d, best = k;
  }
  if (!best.empty()) fail("{}: unknown key '{}'; did you mean '{}'? (`leantune train --help` lists the keys)", where, shown, best);
  fail("{}: unknown key '{}' (`leantune train --help` lists the keys)", where, shown);
}

// Duplicate keys in any mapping of the document (yaml-cpp keeps both and apply_key would let the
// last win silently): lt::Error naming the key and both lines.
void check_duplicate_keys(const YAML::Node& root, const std::string& path) {
  std::vector<YAML::Node> todo{root};
  while (!todo.empty()) {
    YAML::Node n = todo.back();
    todo.pop_back();
    if (n.IsSequence()) {
      for (const auto& e : n) todo.push_back(e);
    } else if (n.IsMap()) {
      std::map<std::string, int> seen;  // key -> line (1-based)
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) continue;
        const std::string k = kv.first.Scalar();
        const int line = kv.first.Mark().line + 1;
        auto [it, fresh] = seen.emplace(k, line);
        LT_CHECK(fresh, "{}: key '{}' appears twice (line {} and line {}); keep one of them", path,
                 k.size() > 60 ? k.substr(0, 60) + "..." : k, it->second, line);
        todo.push_back(kv.second);
      }
    }
  }
}

// One `key: value` being applied: the value read as the key's type, checked against its range
// (lt::Error naming where it is, the key, the value and what it must be).
struct KeyValue {
  const std::string& key;
  const YAML::Node& v;
  const std::string& where;

  std::string S() const { return as<std::string>(v, key, where); }
  bool B() const { return as<bool>(v, key, where); }
  int I() const {  // read wide, so an out-of-range value is reported as such, not as a wrong type
    const long long x = as<long long>(v, key, where);
    check_range(key, double(x), where, v.IsScalar() ? v.Scalar() : "");
    LT_CHECK(x >= INT_MIN && x <= INT_MAX, "{}: {}: {} is out of range (a whole number of at most {})", where, key, x,
             INT_MAX);
    return int(x);
  }
  double D() const {
    const double x = as<double>(v, key, where);
    check_range(key, x, where, v.IsScalar() ? v.Scalar() : "");
    return x;
  }
  // The named choices, parsed here once: lt::Error naming where, the key and the choices.
  Method method() const {
    const std::string s = S(), m = s == "qlora" ? "lora" : s;
    const std::optional<Method> r = find_method(m);
    LT_CHECK(r, "{}: method: '{}' is not one of lora, full (qlora: lora with quantization)", where, excerpt(m));
    return *r;
  }
  Quantization quantization() const {
    const std::string s = S();
    if (s == "none") return std::nullopt;
    const std::optional<QuantType> r = find_quant_type(s);
    LT_CHECK(r, "{}: quantization '{}' is not one of none, nf4, fp4, int8, int4, int4_asym", where, excerpt(s));
    return r;
  }
  Precision precision() const {
    const std::string s = S();
    const std::optional<Precision> r = find_precision(s);
    LT_CHECK(r, "{}: precision '{}' is not one of fp32, bf16, fp16", where, excerpt(s));
    return *r;
  }
  AttentionPrecision attention_precision() const {
    const std::string s = S();
    const std::optional<AttentionPrecision> r = find_attention_precision(s);
    LT_CHECK(r, "{}: attention_precision '{}' is not one of auto, f32, bf16", where, excerpt(s));
    return *r;
  }
};

// datasets: a list of paths, or of mappings {path, type, min_blank_lines, doc_separator}.
void apply_datasets(TrainConfig& c, const KeyValue& kv) {
  const std::string& where = kv.where;
  c.datasets.clear();
  if (!kv.v.IsSequence()) {
    for (const auto& p : as_list(kv.v, kv.key, where)) c.datasets.push_back({p, c.min_blank_lines});
    return;
  }
  for (const auto& d : kv.v) {
    DatasetSpec ds;
    ds.min_blank_lines = c.min_blank_lines;
    if (d.IsScalar()) {
      ds.path = as<std::string>(d, kv.key, where);
      c.datasets.push_back(ds);
      continue;
    }
    LT_CHECK(d["path"], "{}: each entry of 'datasets' needs a 'path'", where);
    ds.path = as<std::string>(d["path"], "datasets.path", where);
    if (d["min_blank_lines"]) {
      ds.min_blank_lines = as<int>(d["min_blank_lines"], "datasets.min_blank_lines", where);
      check_range("min_blank_lines", ds.min_blank_lines, where);
    }
    if (d["doc_separator"]) ds.doc_separator = as<std::string>(d["doc_separator"], "datasets.doc_separator", where);
    for (const auto& e : d) {
      // a list or mapping as key: yaml-cpp's exception, named by file:line:column in parse_train_config_text
      auto k = e.first.as<std::string>();
      LT_CHECK(k == "path" || k == "min_blank_lines" || k == "doc_separator" || k == "type",
               "{}: unknown key 'datasets.{}' (expected path, type, min_blank_lines, doc_separator)", where, k);
    }
    c.datasets.push_back(ds);
  }
}

// The model, the data and what is trained. false: not one of these keys.
bool apply_data_key(TrainConfig& c, const KeyValue& kv) {
  const std::string& key = kv.key;
  if (key == "base_model") c.base_model = kv.S();
  else if (key == "tokenizer") c.tokenizer = kv.S();
  else if (key == "datasets") apply_datasets(c, kv);
  else if (key == "dataset") c.datasets = {{kv.S(), c.min_blank_lines}};
  else if (key == "min_blank_lines") {  // every dataset listed so far, and those listed after it
    c.min_blank_lines = kv.I();
    for (auto& d : c.datasets) d.min_blank_lines = c.min_blank_lines;
  }
  else if (key == "eval_dataset") c.eval_dataset = kv.S();
  else if (key == "val_set_size") c.val_set_size = kv.D();
  else if (key == "chat_template") c.chat_template = kv.S();
  else if (key == "skip_bad_lines") c.skip_bad_lines = kv.B();
  else if (key == "method" || key == "adapter") c.method = kv.method();
  else if (key == "lora_r") c.lora.r = kv.I();
  else if (key == "lora_alpha") c.lora.alpha = float(kv.D());
  else if (key == "lora_dropout") c.lora.dropout = float(kv.D());
  else if (key == "lora_target_modules") c.lora.target_modules = as_list(kv.v, key, kv.where);
  else if (key == "lora_target_linear") { if (kv.B()) c.lora.target_modules = {"all-linear"}; }
  else if (key == "use_rslora") c.lora.use_rslora = kv.B();
  else if (key == "lora_bias") c.lora.bias = kv.S();
  else if (key == "lora_init" || key == "init_lora_weights") c.lora.init = parse_lora_init(kv.S(), kv.where);
  else if (key == "use_dora") c.lora.use_dora = kv.B();
  else if (key == "qat") c.qat = kv.S();
  else if (key == "qat_group_size") c.qat_group_size = kv.I();
  else if (key == "qat_symmetric") c.qat_symmetric = kv.B();
  else if (key == "loraplus_lr_ratio") c.loraplus_lr_ratio = kv.D();
  else if (key == "layers_to_transform") {
    c.lora.layers_to_transform.clear();
    for (const auto& s : as_list(kv.v, key, kv.where))
      c.lora.layers_to_transform.push_back(parse_layer_index(s, kv.where));
  } else if (key == "freeze_embeddings") c.freeze_embeddings = kv.B();
  else if (key == "freeze_lm_head") c.freeze_lm_head = kv.B();
  else return false;
  return true;
}

// The optimization: batch shape, schedule, checkpointing, evaluation and saving. false: not one of these keys.
bool apply_optim_key(TrainConfig& c, const KeyValue& kv) {
  const std::string& key = kv.key;
  if (key == "micro_batch_size") c.micro_batch_size = kv.I();
  else if (key == "gradient_accumulation_steps") c.gradient_accumulation_steps = kv.I();
  else if (key == "sequence_len") c.sequence_len = kv.I();
  else if (key == "sample_packing") c.sample_packing = kv.B();
  else if (key == "learning_rate") c.learning_rate = kv.D();
  else if (key == "lr_scheduler") c.lr_scheduler = kv.S();
  else if (key == "warmup_steps") c.warmup_steps = kv.I();
  else if (key == "weight_decay") c.weight_decay = kv.D();
  else if (key == "max_grad_norm") c.max_grad_norm = kv.D();
  else if (key == "num_epochs") c.num_epochs = kv.I();
  else if (key == "max_steps") c.max_steps = kv.I();
  else if (key == "gradient_checkpointing") {
    std::string s = kv.S();
    c.gradient_checkpointing = s == "true" ? "every" : s == "false" ? "none" : s;
  } else if (key == "unfreeze_schedule") c.unfreeze_schedule = kv.S();
  else if (key == "eval_steps") c.eval_steps = kv.I();
  else if (key == "eval_batches") c.eval_batches = kv.I();
  else if (key == "save_steps") c.save_steps = kv.I();
  else if (key == "logging_steps") c.logging_steps = kv.I();
  else return false;
  return true;
}

// The run: output, seed, threads, resume, memory, quantization, precision, ZeRO. false: not one of these keys.
bool apply_run_key(TrainConfig& c, const KeyValue& kv) {
  const std::string& key = kv.key;
  if (key == "output_dir") c.output_dir = kv.S();
  else if (key == "seed") c.seed = parse_seed(kv.S(), kv.where);
  else if (key == "threads") c.threads = kv.I();
  else if (key == "resume") c.resume = kv.S();
  else if (key == "overwrite_output_dir") c.overwrite_output_dir = kv.B();
  else if (key == "memory_budget") c.memory_budget = kv.S();
  else if (key == "auto") c.auto_fit = kv.B();
  else if (key == "quantization") c.quantization = kv.quantization();
  else if (key == "double_quant") c.double_quant = kv.B();
  else if (key == "quant_blocksize") c.quant_blocksize = kv.I();
  else if (key == "int8_threshold") c.int8_threshold = kv.D();
  else if (key == "precision") c.precision = kv.precision();
  else if (key == "attention_precision") c.attention_precision = kv.attention_precision();
  else if (key == "initial_loss_scale") c.initial_loss_scale = kv.D();
  else if (key == "loss_scale_window") c.loss_scale_window = kv.I();
  else if (key == "zero_stage" || key == "zero") c.zero_stage = kv.I();
  else if (key == "offload_optimizer") c.offload_optimizer = kv.S();
  else if (key == "offload_dir") c.offload_dir = kv.S();
  else if (key == "zero_overlap") c.zero_overlap = kv.B();
  else if (key == "grad_topk") c.grad_topk = kv.D();
  else if (key == "grad_topk_feedback") c.grad_topk_feedback = kv.S();
  else if (key == "grad_topk_workers") c.grad_topk_workers = kv.I();
  else if (key == "grad_topk_variance_correction") c.grad_topk_variance_correction = kv.B();
  else if (key == "lora_rank_policy") c.lora_rank_policy = kv.S();
  else if (key == "lora_target_r") c.lora_target_r = kv.I();
  else if (key == "lora_rank_importance") c.lora_rank_importance = kv.S();
  else if (key == "lora_rank_tinit") c.lora_rank_tinit = kv.I();
  else if (key == "lora_rank_tfinal") c.lora_rank_tfinal = kv.I();
  else if (key == "lora_rank_delta_t") c.lora_rank_delta_t = kv.I();
  else if (key == "lora_rank_beta1") c.lora_rank_beta1 = kv.D();
  else if (key == "lora_rank_beta2") c.lora_rank_beta2 = kv.D();
  else return false;
  return true;
}

void apply_key(TrainConfig& c, const std::string& key, const YAML::Node& v, const std::string& where) {
  const KeyValue kv{key, v, where};
  if (!apply_data_key(c, kv) && !apply_optim_key(c, kv) && !apply_run_key(c, kv)) unknown_key(key, where);
}

// Applies every key of the document's top-level mapping, after refusing duplicate keys.
void apply_root(TrainConfig& c, const YAML::Node& root, const std::string& path) {
  check_duplicate_keys(root, path);
  for (const auto& kv : root) {
    const std::string where = fmt::format("{}: line {}", path, kv.first.Mark().line + 1);
    LT_CHECK(kv.first.IsScalar(), "{}:{}:{}: this entry is not of the form 'key: value': a key must be a plain name "
             "(e.g. lora_r), not a list or mapping", path, kv.first.Mark().line + 1, kv.first.Mark().column + 1);
    apply_key(c, kv.first.Scalar(), kv.second, where);
  }
}

// lora_rank_policy and its keys (train/adaptive_rank.h).
void check_adaptive_rank(const TrainConfig& c) {
  LT_CHECK(c.lora_rank_policy == "fixed" || c.lora_rank_policy == "adaptive", "{}: lora_rank_policy '{}' is not one "
           "of fixed, adaptive", c.source, excerpt(c.lora_rank_policy));
  if (c.lora_rank_policy == "fixed") {
    LT_CHECK(c.lora_target_r == 0, "{}: lora_target_r applies to lora_rank_policy: adaptive (it is the final average "
             "rank); set lora_rank_policy: adaptive or remove lora_target_r", c.source);
    return;
  }
  LT_CHECK(c.method == Method::Lora, "{}: lora_rank_policy: adaptive prunes LoRA ranks; it needs method: lora",
           c.source);
  LT_CHECK(c.lora_target_r >= 1 && c.lora_target_r < c.lora.r, "{}: lora_target_r: {} is out of range: adaptive rank "
           "needs a final average rank per module from 1 to lora_r - 1 ({}); lora_r is the starting rank (AdaLoRA's "
           "init_r)", c.source, c.lora_target_r, c.lora.r - 1);
  try {
    parse_rank_importance(c.lora_rank_importance);
  } catch (const Error& e) {
    fail("{}: {}", c.source, e.what());
  }
  LT_CHECK(c.lora_rank_tinit >= 0 && c.lora_rank_tfinal >= 0, "{}: lora_rank_tinit ({}) and lora_rank_tfinal ({}) "
           "must be >= 0", c.source, c.lora_rank_tinit, c.lora_rank_tfinal);
  LT_CHECK(c.lora_rank_delta_t >= 1, "{}: lora_rank_delta_t must be >= 1 (got {})", c.source, c.lora_rank_delta_t);
  for (auto [key, b] : {std::pair{"lora_rank_beta1", c.lora_rank_beta1}, std::pair{"lora_rank_beta2", c.lora_rank_beta2}})
    LT_CHECK(std::isfinite(b) && b >= 0 && b < 1, "{}: {} must be in [0, 1) (got {}; AdaLoRA's default 0.85)",
             c.source, key, b);
  LT_CHECK(c.max_steps == 0 || c.lora_rank_tinit + c.lora_rank_tfinal < c.max_steps, "{}: lora_rank_tinit ({}) + "
           "lora_rank_tfinal ({}) must be below max_steps ({}): pruning needs a window", c.source, c.lora_rank_tinit,
           c.lora_rank_tfinal, c.max_steps);
  LT_CHECK(!c.lora.mutates_base(), "{}: lora_rank_policy: adaptive does not combine with init_lora_weights: {} (its "
           "saved adapter is converted to rank 2r); use the default initialisation", c.source, c.lora.init);
}

}  // namespace

static TrainConfig parse_yaml_text(const std::string& text, const std::string& path) {
  TrainConfig c;
  c.source = path.empty() ? "flags" : path;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail("{}:{}:{}: malformed YAML: {}", path, e.mark.line + 1, e.mark.column + 1, excerpt(e.msg, 160));
  }
  if (root.IsNull()) return c;
  LT_CHECK(root.IsMap(), "{}: the config must be a mapping of keys to values", path);
  apply_root(c, root, path);
  return c;
}

// parse_yaml_text with any yaml-cpp exception that escapes the converters above (a list or
// mapping used as a key, a malformed entry of datasets) named by file, line and column.
TrainConfig parse_train_config_text(const std::string& yaml_text, const std::string& path) {
  try {
    return parse_yaml_text(yaml_text, path);
  } catch (const YAML::Exception& e) {
    const std::string at = e.mark.is_null() ? path : fmt::format("{}:{}:{}", path, e.mark.line + 1, e.mark.column + 1);
    fail("{}: this entry is not of the form 'key: value' with a plain name as key and a single value or a list as "
         "value; see the keys in README.md", at);
  }
}

TrainConfig load_train_config(const std::string& path) {
  if (path.empty()) {
    TrainConfig c;
    c.source = "flags";
    return c;
  }
  return parse_train_config_text(read_text_file(path), path);  // names a missing, unreadable or directory path
}

void set_train_config_key(TrainConfig& c, const std::string& key, const std::string& value) {
  YAML::Node v;
  try {
    v = YAML::Load(value);
  } catch (const YAML::Exception&) {
    v = YAML::Node(value);
  }
  if (v.IsNull()) v = YAML::Node(value);
  try {
    apply_key(c, key, v, "--" + key);
  } catch (const YAML::Exception&) {
    fail("--{}: the value '{}' is not a single value or a list of the form this key takes", excerpt(key),
         excerpt(value));
  }
}

void apply_train_flags(TrainConfig& cfg, const std::vector<std::string>& args, size_t first) {
  for (size_t i = first; i < args.size(); ++i) {
    std::string arg = args[i];
    LT_CHECK(arg.rfind("--", 0) == 0, "unexpected argument '{}' (keys are given as --key value)", arg);
    arg = arg.substr(2);
    std::string key = arg, value;
    auto eq = arg.find('=');
    if (eq != std::string::npos) {
      key = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if ((key == "overwrite-output-dir" || key == "overwrite_output_dir") &&
               (i + 1 == args.size() || args[i + 1].rfind("--", 0) == 0)) {
      value = "true";  // a flag: --overwrite-output-dir alone
    } else {
      LT_CHECK(i + 1 < args.size(), "--{} needs a value", key);
      value = args[++i];
    }
    for (auto& ch : key)
      if (ch == '-') ch = '_';
    set_train_config_key(cfg, key, value);
  }
  check_train_config_ranges(cfg);
}

TrainConfig parse_train_args(const std::vector<std::string>& args) {
  size_t first = 0;
  std::string path;
  if (!args.empty() && args[0].rfind("--", 0) != 0) path = args[first++];
  TrainConfig cfg = load_train_config(path);
  apply_train_flags(cfg, args, first);
  return cfg;
}

void validate_train_config(const TrainConfig& c) {
  LT_CHECK(!c.base_model.empty(), "{}: 'base_model' is required", c.source);
  LT_CHECK(!c.datasets.empty(), "{}: 'datasets' is required (a list of paths)", c.source);
  check_train_config_ranges(c);
  LT_CHECK(c.micro_batch_size >= 1, "micro_batch_size must be >= 1 (got {})", c.micro_batch_size);
  LT_CHECK(c.gradient_accumulation_steps >= 1, "gradient_accumulation_steps must be >= 1 (got {})",
           c.gradient_accumulation_steps);
  LT_CHECK(c.val_set_size >= 0 && c.val_set_size < 1, "val_set_size must be in [0, 1) (got {})", c.val_set_size);
  LT_CHECK(c.learning_rate > 0, "learning_rate must be > 0 (got {})", c.learning_rate);
  LT_CHECK(c.num_epochs >= 1 || c.max_steps > 0, "num_epochs must be >= 1 or max_steps > 0");
  LT_CHECK(c.max_grad_norm >= 0, "max_grad_norm must be >= 0");
  LT_CHECK(c.logging_steps >= 1, "logging_steps must be >= 1");
  const Quantization q = c.quantization;
  if (q)
    LT_CHECK(c.method == Method::Lora, "{}: quantization: {} quantizes the frozen base of a LoRA run; method: {} "
             "trains the base weights themselves. Use method: lora (QLoRA) or quantization: none", c.source,
             quantization_name(q), method_name(c.method));
  const int bs = c.quant_blocksize;
  LT_CHECK(bs >= 64 && bs <= 4096 && (bs & (bs - 1)) == 0,
           "{}: quant_blocksize {} is not a power of two from 64 to 4096 (64 is the NF4 default)", c.source, bs);
  LT_CHECK(!(c.double_quant && q == QuantType::Int8), "{}: double_quant applies to nf4 and fp4; int8 keeps one f32 "
           "scale per row", c.source);
  LT_CHECK(std::isfinite(c.int8_threshold) && c.int8_threshold >= 0,
           "{}: int8_threshold must be >= 0 (got {}; 0 disables the outlier columns)", c.source, c.int8_threshold);
  LT_CHECK(std::isfinite(c.initial_loss_scale) && c.initial_loss_scale > 0 && c.initial_loss_scale <= 3e38,
           "{}: initial_loss_scale must be a finite number > 0 (got {}; 65536 is the default)", c.source,
           c.initial_loss_scale);
  LT_CHECK(c.loss_scale_window >= 1, "{}: loss_scale_window must be >= 1 (got {})", c.source, c.loss_scale_window);
  LT_CHECK(c.zero_stage >= -1 && c.zero_stage <= 3, "{}: zero_stage must be 0, 1, 2 or 3 (got {})", c.source,
           c.zero_stage);
  LT_CHECK(c.offload_optimizer == "none" || c.offload_optimizer == "disk",
           "{}: offload_optimizer '{}' is not one of none, disk", c.source, excerpt(c.offload_optimizer));
  LT_CHECK(c.offload_optimizer == "none" || !c.offload_dir.empty(), "{}: offload_optimizer: disk needs offload_dir, "
           "a folder for the optimizer state file", c.source);
  if (c.grad_topk != 0) {
    LT_CHECK(std::isfinite(c.grad_topk) && c.grad_topk > 0 && c.grad_topk <= 1, "{}: grad_topk: {} is out of range: "
             "it must be in (0, 1] (the fraction of each tensor's gradient kept per step; 0: off)", c.source, c.grad_topk);
    parse_topk_feedback(c.grad_topk_feedback);
    LT_CHECK(c.grad_topk_workers >= 1 && c.gradient_accumulation_steps % c.grad_topk_workers == 0,
             "{}: grad_topk_workers: {} must be >= 1 and divide gradient_accumulation_steps ({}): each emulated "
             "worker sparsifies its own run of micro-batches", c.source, c.grad_topk_workers,
             c.gradient_accumulation_steps);
    LT_CHECK(c.precision != Precision::FP16, "{}: grad_topk keeps a residual of unscaled gradients; with precision: "
             "fp16 the loss scale changes it. Use precision: bf16 or fp32", c.source);
  }
  check_adaptive_rank(c);
  LT_CHECK(c.attention_precision != AttentionPrecision::BF16 || c.precision == Precision::BF16,
           "{}: attention_precision: bf16 needs precision: bf16 (got precision: {}); use attention_precision: auto "
           "or f32", c.source, precision_name(c.precision));
  LT_CHECK(c.qat == "none" || c.qat == "int4", "{}: qat '{}' is not one of none, int4", c.source, excerpt(c.qat));
  if (c.qat != "none") {
    LT_CHECK(c.method == Method::Full, "{}: qat: int4 trains the base weights through their 4-bit version: it needs "
             "method: full (for LoRA, merge the adapter and fine-tune the merged model)", c.source);
    try {
      check_quant_spec({QuantType::Int4, c.qat_group_size, false});
    } catch (const Error& e) {
      fail("{}: qat_group_size: {}", c.source, e.what());
    }
  }
}

void check_train_config_ranges(const TrainConfig& c) {
  for (const auto& r : kRanges) check_range(r.key, r.get(c), c.source);
  for (const auto& d : c.datasets) check_range("min_blank_lines", d.min_blank_lines, c.source + ": " + d.path);
  for (int l : c.lora.layers_to_transform)
    LT_CHECK(l >= 0, "{}: layers_to_transform: {} is out of range: a layer index is >= 0", c.source, l);
  LT_CHECK(c.max_steps == 0 || c.warmup_steps <= c.max_steps,
           "{}: warmup_steps: {} is out of range: it must be <= max_steps ({}); the learning rate would never "
           "finish warming up", c.source, c.warmup_steps, c.max_steps);
  // the named choices, checked by their own parsers; the message gains the file and the key
  auto named = [&](const char* key, auto&& parse) {
    try {
      parse();
    } catch (const Error& e) {
      fail("{}: {}: {}", c.source, key, e.what());
    }
  };
  named("lr_scheduler", [&] { parse_schedule_kind(c.lr_scheduler); });
  named("chat_template", [&] { check_chat_template_name(c.chat_template); });
  named("doc_separator", [&] { for (const auto& d : c.datasets) parse_doc_separator(d.doc_separator); });
  named("gradient_checkpointing", [&] { TrainModelOptions o; parse_checkpointing(c.gradient_checkpointing, o); });
}

AdaptiveRankOptions adaptive_rank_options(const TrainConfig& c, int total_steps) {
  AdaptiveRankOptions o;
  o.init_r = c.lora.r;
  o.target_r = c.lora_target_r;
  o.tinit = c.lora_rank_tinit;
  o.tfinal = c.lora_rank_tfinal;
  o.delta_t = c.lora_rank_delta_t;
  o.total_steps = total_steps;
  o.beta1 = c.lora_rank_beta1;
  o.beta2 = c.lora_rank_beta2;
  o.importance = parse_rank_importance(c.lora_rank_importance);
  // an internal switch for the tests that compare against the masked run without release
  if (const char* v = std::getenv("LEANTUNE_RANK_NO_RELEASE"); v && std::string_view(v) == "1") o.release = false;
  return o;
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
  o.attention_precision = c.attention_precision;
  o.loraplus_lr_ratio = float(c.loraplus_lr_ratio);
  if (c.qat == "int4") o.qat = c.qat_symmetric ? QuantType::Int4 : QuantType::Int4Asym;
  o.qat_group_size = c.qat_group_size;
  o.adaptive_rank = c.method == Method::Lora && c.lora_rank_policy == "adaptive";
  if (c.grad_topk > 0)
    o.topk = {c.grad_topk, parse_topk_feedback(c.grad_topk_feedback), c.grad_topk_workers, c.grad_topk_variance_correction};
  return o;
}

}  // namespace lt
