// The training config's boundary (train/train_config.h): every numeric key is refused outside its
// range with a message naming the key, the value and the range (YAML and flags alike), duplicate
// keys name both lines, unknown keys get a suggestion, and every valid value (the boundaries, the
// shipped example) still loads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../io/io_test_util.h"
#include "train/train_config.h"

namespace lt {
namespace {

using test::error_of;
using test::expect_contains;

TrainConfig from_yaml(const std::string& text) { return parse_train_config_text(text, "run.yaml"); }

struct Bad {
  const char* key;
  const char* value;
  const char* range;  // a piece of the allowed range the message must state
};

// One invalid value per numeric key (several for the issue's named examples).
const Bad kBad[] = {
    {"lora_alpha", "0", "> 0"},
    {"lora_alpha", "-8", "> 0"},
    {"weight_decay", "-0.1", ">= 0"},
    {"max_steps", "-1", ">= 0"},
    {"learning_rate", "0", "> 0"},
    {"learning_rate", "-0.001", "> 0"},
    {"learning_rate", ".nan", "> 0"},
    {"learning_rate", ".inf", "a finite number > 0"},
    {"weight_decay", ".inf", "a finite number >= 0"},
    {"sequence_len", "0", ">= 2"},
    {"sequence_len", "-5", ">= 2"},
    {"micro_batch_size", "0", ">= 1"},
    {"gradient_accumulation_steps", "-2", ">= 1"},
    {"lora_r", "0", ">= 1"},
    {"lora_dropout", "1", "< 1"},
    {"lora_dropout", "-0.1", ">= 0"},
    {"val_set_size", "1", "< 1"},
    {"num_epochs", "0", ">= 1"},
    {"warmup_steps", "-1", ">= 0"},
    {"eval_steps", "-1", ">= 0"},
    {"eval_batches", "-3", ">= 0"},
    {"save_steps", "-1", ">= 0"},
    {"logging_steps", "0", ">= 1"},
    {"threads", "10000", "<= 1024"},
    {"threads", "-1", ">= 0"},
    {"max_grad_norm", "-1", ">= 0"},
    {"initial_loss_scale", "0", "> 0"},
    {"loss_scale_window", "0", ">= 1"},
    {"zero_stage", "4", "<= 3"},
    {"min_blank_lines", "0", ">= 1"},
    {"micro_batch_size", "99999999999", ">= 1"},  // beyond int: a range error, not a type error
};

TEST(TrainConfigRanges, YamlValueOutOfRangeNamesKeyValueRangeAndLine) {
  for (const Bad& b : kBad) {
    SCOPED_TRACE(std::string(b.key) + ": " + b.value);
    const std::string yaml = std::string("datasets: [d.txt]\n") + b.key + ": " + b.value + "\n";
    const std::string msg = error_of([&] { from_yaml(yaml); });
    expect_contains(msg, {"run.yaml: line 2", b.key, "out of range", b.range});
    expect_contains(msg, {b.value});  // as written
  }
}

TEST(TrainConfigRanges, FlagValueOutOfRangeNamesFlagValueAndRange) {
  for (const Bad& b : kBad) {
    SCOPED_TRACE(std::string(b.key) + " " + b.value);
    std::string flag = std::string("--") + b.key;
    for (auto& ch : flag)
      if (ch == '_') ch = '-';
    const std::string msg = error_of([&] { parse_train_args({"--base_model", "m", flag, b.value}); });
    expect_contains(msg, {b.key, "out of range", b.range});
  }
}

TEST(TrainConfigRanges, NegativeSeedIsARangeErrorAndTheLargestSeedLoads) {
  expect_contains(error_of([&] { from_yaml("seed: -1\n"); }), {"seed", "-1", ">= 0", "18446744073709551615"});
  EXPECT_EQ(from_yaml("seed: 18446744073709551615\n").seed, 18446744073709551615ull);
  expect_contains(error_of([&] { from_yaml("seed: 18446744073709551616\n"); }), {"seed", "out of range"});
}

// min_blank_lines at the top applies to every dataset, listed before or after it.
TEST(TrainConfigRanges, TopLevelMinBlankLinesAppliesWhateverTheOrder) {
  const TrainConfig before = from_yaml("min_blank_lines: 3\ndatasets: [a.txt, {path: b.txt, min_blank_lines: 2}]\n");
  EXPECT_EQ(before.datasets[0].min_blank_lines, 3);
  EXPECT_EQ(before.datasets[1].min_blank_lines, 2);  // its own wins
  const TrainConfig after = from_yaml("datasets: [a.txt]\nmin_blank_lines: 4\n");
  EXPECT_EQ(after.datasets[0].min_blank_lines, 4);
}

TEST(TrainConfigRanges, NegativeLayerIndexIsRefused) {
  expect_contains(error_of([&] { from_yaml("layers_to_transform: [0, -1]\n"); }),
                  {"layers_to_transform", "-1", ">= 0"});
  expect_contains(error_of([&] { from_yaml("layers_to_transform: 2x\n"); }), {"layers_to_transform", "2x"});
}

TEST(TrainConfigRanges, WarmupBeyondMaxStepsIsAnError) {
  // a cross-key check, made once the file and every flag are read
  expect_contains(error_of([&] { parse_train_args({"--max_steps", "10", "--warmup_steps", "11"}); }),
                  {"warmup_steps", "11", "max_steps", "10"});
  TrainConfig c = from_yaml("base_model: m\ndatasets: [d]\nmax_steps: 10\nwarmup_steps: 11\n");
  expect_contains(error_of([&] { validate_train_config(c); }), {"warmup_steps", "11", "max_steps (10)"});
  EXPECT_EQ(parse_train_args({"--max_steps", "10", "--warmup_steps", "10"}).warmup_steps, 10);
  EXPECT_EQ(parse_train_args({"--warmup_steps", "50"}).warmup_steps, 50);  // max_steps 0: the epochs decide
}

TEST(TrainConfigRanges, NamedChoicesAreCheckedWithTheKey) {
  expect_contains(error_of([&] { parse_train_args({"--lr_scheduler", "cosin"}); }), {"lr_scheduler", "cosin"});
  expect_contains(error_of([&] { parse_train_args({"--method", "dora"}); }), {"method", "dora", "lora, full"});
  expect_contains(error_of([&] { parse_train_args({"--gradient_checkpointing", "every:0"}); }),
                  {"gradient_checkpointing"});
}

// method, precision and quantization are parsed as they are read: the error names the flag, or the
// file and line, and the value; the names read back as their types.
TEST(TrainConfigRanges, MethodPrecisionQuantizationAreParsedWhereRead) {
  EXPECT_EQ(error_of([&] { parse_train_args({"--method", "dora"}); }),
            "--method: method: 'dora' is not one of lora, full (qlora: lora with quantization)");
  EXPECT_EQ(error_of([&] { parse_train_args({"--precision", "f16"}); }),
            "--precision: precision 'f16' is not one of fp32, bf16, fp16");
  EXPECT_EQ(error_of([&] { from_yaml("lora_r: 4\nquantization: nf5\n"); }),
            "run.yaml: line 2: quantization 'nf5' is not one of none, nf4, fp4, int8, int4, int4_asym");
  const TrainConfig c = from_yaml("method: qlora\nquantization: int8\nprecision: bf16\n");
  EXPECT_EQ(c.method, Method::Lora);
  EXPECT_EQ(c.quantization, QuantType::Int8);
  EXPECT_EQ(c.precision, Precision::BF16);
  const TrainConfig d = parse_train_args({"--method", "full", "--quantization", "none", "--precision", "fp16"});
  EXPECT_EQ(d.method, Method::Full);
  EXPECT_EQ(d.quantization, std::nullopt);
  EXPECT_EQ(d.precision, Precision::FP16);
  // a long bad value is printed back as a short excerpt, not whole
  for (const char* key : {"--method", "--precision", "--quantization", "--attention-precision"}) {
    const std::string e = error_of([&] { parse_train_args({key, std::string(5000, '9')}); });
    EXPECT_NE(e.find("is not one of"), std::string::npos) << e;
    EXPECT_LT(e.size(), 300u) << key;
  }
}

// attention_precision: auto | f32 | bf16, read as its type; bf16 needs precision bf16; the errors
// name the key (and the flag or line).
TEST(TrainConfigRanges, AttentionPrecisionKey) {
  EXPECT_EQ(error_of([&] { from_yaml("precision: bf16\nattention_precision: fp32\n"); }),
            "run.yaml: line 2: attention_precision 'fp32' is not one of auto, f32, bf16");
  EXPECT_EQ(error_of([&] { parse_train_args({"--attention-precision", "half"}); }),
            "--attention_precision: attention_precision 'half' is not one of auto, f32, bf16");
  EXPECT_EQ(from_yaml("precision: bf16\n").attention_precision, AttentionPrecision::Auto);
  const TrainConfig c = from_yaml("base_model: m\ndatasets: [d.txt]\nprecision: bf16\nattention_precision: f32\n");
  validate_train_config(c);
  EXPECT_EQ(c.attention_precision, AttentionPrecision::F32);
  EXPECT_EQ(train_model_options(c).attention_precision, AttentionPrecision::F32);
  const TrainConfig b = parse_train_args({"--base_model", "m", "--datasets", "d", "--precision", "bf16",
                                          "--attention_precision", "bf16"});
  validate_train_config(b);
  EXPECT_EQ(train_model_options(b).attention_precision, AttentionPrecision::BF16);
  expect_contains(error_of([&] {
                    validate_train_config(from_yaml("base_model: m\ndatasets: [d.txt]\nattention_precision: bf16\n"));
                  }),
                  {"run.yaml", "attention_precision: bf16 needs precision: bf16", "precision: fp32"});
}

// The boundaries themselves are valid, and so is every key with a sensible value.
TEST(TrainConfigRanges, BoundaryValuesLoad) {
  const TrainConfig c = from_yaml(
      "base_model: m\ndatasets: [d.txt]\nlora_dropout: 0\nmax_steps: 0\nweight_decay: 0\nthreads: 1024\n"
      "zero_stage: -1\nval_set_size: 0\nmax_grad_norm: 0\neval_steps: 0\nsave_steps: 0\nsequence_len: 2\n"
      "lora_alpha: 0.5\nlearning_rate: 1e-7\n");
  validate_train_config(c);
  EXPECT_EQ(c.threads, 1024);
  EXPECT_EQ(c.sequence_len, 2);
  EXPECT_FLOAT_EQ(c.lora.alpha, 0.5f);
  validate_train_config(parse_train_args({"--base_model", "m", "--datasets", "d"}));  // the defaults
}

TEST(TrainConfigRanges, EveryDocumentedKeyLoads) {
  const TrainConfig c = from_yaml(R"(base_model: m
tokenizer: t
datasets:
  - path: a.jsonl
    type: completion
    min_blank_lines: 2
    doc_separator: file
eval_dataset: e.jsonl
val_set_size: 0.2
chat_template: llama3
skip_bad_lines: true
method: lora
lora_r: 16
lora_alpha: 32
lora_dropout: 0.05
lora_target_modules: [q_proj, v_proj]
use_rslora: true
lora_bias: none
lora_init: gaussian
use_dora: true
loraplus_lr_ratio: 16
qat: none
qat_group_size: 64
qat_symmetric: false
layers_to_transform: [0, 1]
freeze_embeddings: false
freeze_lm_head: false
micro_batch_size: 2
gradient_accumulation_steps: 4
sequence_len: 128
sample_packing: false
learning_rate: 1e-4
lr_scheduler: linear
warmup_steps: 5
weight_decay: 0.01
max_grad_norm: 1.0
num_epochs: 3
max_steps: 100
gradient_checkpointing: every:2
eval_steps: 10
eval_batches: 2
save_steps: 20
logging_steps: 5
output_dir: out
seed: 7
threads: 2
memory_budget: 6GiB
auto: false
quantization: none
double_quant: false
quant_blocksize: 128
int8_threshold: 6.0
precision: fp32
attention_precision: auto
initial_loss_scale: 1024
loss_scale_window: 100
zero_stage: 1
offload_optimizer: none
zero_overlap: false
)");
  validate_train_config(c);
  EXPECT_EQ(c.datasets[0].min_blank_lines, 2);
  EXPECT_EQ(c.lora.r, 16);
  EXPECT_EQ(c.max_steps, 100);
  EXPECT_EQ(c.seed, 7u);
}

// PEFT's LoRA variants and INT4 QAT: values read as PEFT / the docs name them, the rest refused
// with the key.
TEST(TrainConfigRanges, LoraVariantAndQatKeys) {
  EXPECT_EQ(from_yaml("init_lora_weights: true\n").lora.init, "default");
  EXPECT_EQ(from_yaml("init_lora_weights: pissa_niter_4\n").lora.init, "pissa_niter_4");
  EXPECT_EQ(from_yaml("init_lora_weights: olora\nuse_dora: true\n").lora.init, "olora");
  expect_contains(error_of([&] { from_yaml("init_lora_weights: false\n"); }), {"init_lora_weights", "false"});
  expect_contains(error_of([&] { from_yaml("init_lora_weights: loftq\n"); }), {"init_lora_weights 'loftq'", "olora"});
  expect_contains(error_of([&] { from_yaml("init_lora_weights: pissa_niter_x\n"); }), {"pissa_niter_x"});
  expect_contains(error_of([&] { from_yaml("loraplus_lr_ratio: -1\n"); }), {"loraplus_lr_ratio", "-1", ">= 0"});
  EXPECT_EQ(from_yaml("loraplus_lr_ratio: 16\n").loraplus_lr_ratio, 16.0);
  TrainConfig c = parse_train_args({"--base_model", "m", "--datasets", "d", "--qat", "int8"});
  expect_contains(error_of([&] { validate_train_config(c); }), {"qat 'int8'", "none, int4"});
  c.qat = "int4";
  expect_contains(error_of([&] { validate_train_config(c); }), {"qat: int4", "method: full"});
  c.method = Method::Full;
  validate_train_config(c);
  EXPECT_EQ(train_model_options(c).qat, QuantType::Int4);
  c.qat_symmetric = false;
  EXPECT_EQ(train_model_options(c).qat, QuantType::Int4Asym);
  c.qat_group_size = 48;
  expect_contains(error_of([&] { validate_train_config(c); }), {"qat_group_size", "48", "32"});
}

TEST(TrainConfigRanges, ShippedExampleLoads) {
  TrainConfig c = load_train_config(std::string(LT_SOURCE_DIR) + "/examples/aesop_lora.yaml");
  validate_train_config(c);
}

TEST(TrainConfigKeys, DuplicateKeyNamesTheKeyAndBothLines) {
  expect_contains(error_of([&] { from_yaml("lora_r: 8\nlearning_rate: 1e-4\nlora_r: 16\n"); }),
                  {"run.yaml", "'lora_r'", "twice", "line 1", "line 3"});
  // inside a datasets entry too
  expect_contains(error_of([&] { from_yaml("datasets:\n  - path: a.txt\n    path: b.txt\n"); }),
                  {"'path'", "line 2", "line 3"});
}

TEST(TrainConfigKeys, DuplicateKeyInAFileNamesTheFile) {
  test::TempDir dir;
  const std::string path = dir / "dup.yaml";
  test::write_bytes(path, "base_model: a\nbase_model: b\n");
  expect_contains(error_of([&] { load_train_config(path); }), {path, "'base_model'", "line 1", "line 2"});
}

TEST(TrainConfigKeys, UnknownKeySuggestsTheNearestKnownOne) {
  expect_contains(error_of([&] { from_yaml("lora_alpah: 16\n"); }),
                  {"run.yaml: line 1", "unknown key 'lora_alpah'", "did you mean 'lora_alpha'"});
  expect_contains(error_of([&] { parse_train_args({"--learning-rat", "1e-4"}); }),
                  {"unknown key 'learning_rat'", "did you mean 'learning_rate'"});
  const std::string far = error_of([&] { from_yaml("zzqqxx: 1\n"); });
  expect_contains(far, {"unknown key 'zzqqxx'", "--help"});
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
}

TEST(TrainConfigKeys, TextAndFileParseTheSame) {
  test::TempDir dir;
  const std::string yaml = "base_model: m\ndatasets: [a.txt, b.txt]\nlora_r: 4\nlearning_rate: 3e-4\n";
  test::write_bytes(dir / "c.yaml", yaml);
  const TrainConfig a = load_train_config(dir / "c.yaml"), b = parse_train_config_text(yaml, "c.yaml");
  EXPECT_EQ(a.datasets.size(), 2u);
  EXPECT_EQ(b.datasets.size(), 2u);
  EXPECT_EQ(a.lora.r, b.lora.r);
  EXPECT_EQ(a.learning_rate, b.learning_rate);
}

}  // namespace
}  // namespace lt
