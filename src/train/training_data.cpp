// Loading a run's tokenizer and examples (train/training_data.h).
#include "train/training_data.h"

#include <cstdio>
#include <filesystem>
#include <fmt/format.h>

#include "core/hf_cache.h"
#include "core/mapped_file.h"
#include "core/memory_plan.h"
#include "io/model_files.h"
#include "model/model_tokenizer.h"
#include "train/chat_template.h"
#include "train/data_loader.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

std::string default_tokenizer_path(const std::string& model_or_repo) {
  const std::string model = resolve_model_path(model_or_repo);
  if (fs::is_directory(model) || is_gguf_model_path(model)) return model;  // a GGUF carries its tokenizer
  return fs::path(model).parent_path().string();
}

std::vector<Example> load_all(const TrainConfig& c, const Tokenizer& tok) {
  std::vector<Example> all;
  for (const auto& ds : c.datasets) {
    DataOptions o;
    o.doc_separator = parse_doc_separator(ds.doc_separator);
    o.min_blank_lines = ds.min_blank_lines;
    const ChatFormat f = resolve_chat_format(c.chat_template, tok);
    o.chat_template = f.builtin;
    o.jinja = f.jinja;
    o.jinja_name = f.jinja_name;
    o.skip_bad_lines = c.skip_bad_lines;
    DataStats st;
    auto ex = load_examples(ds.path, tok, o, &st);
    check_labels_survive(ex, c.sequence_len, c.sample_packing, ds.path);  // no "loss 0.0" on a truncated dataset
    if (st.n_skipped_lines) fmt::print(stderr, "warning: {}: skipped {} malformed lines\n", ds.path, st.n_skipped_lines);
    for (auto& e : ex) all.push_back(std::move(e));
  }
  return all;
}

}  // namespace

TrainingData load_training_data(const TrainConfig& c) {
  TrainingData d;
  const size_t rss0 = process_rss_bytes();
  d.tokenizer = load_tokenizer_for_model(c.base_model, c.tokenizer.empty() ? default_tokenizer_path(c.base_model)
                                                                          : c.tokenizer);
  const size_t rss1 = process_rss_bytes();
  d.tokenizer_bytes = rss1 > rss0 ? rss1 - rss0 : 0;
  if (!c.eval_dataset.empty()) {
    d.train = load_all(c, *d.tokenizer);
    TrainConfig ec = c;
    ec.datasets = {{c.eval_dataset}};
    d.eval = load_all(ec, *d.tokenizer);
  } else {
    auto split = split_train_eval(load_all(c, *d.tokenizer), c.val_set_size, c.seed);
    d.train = std::move(split.train);
    d.eval = std::move(split.eval);
  }
  for (const auto* v : {&d.train, &d.eval})
    for (const auto& e : *v) d.example_bytes += (e.ids.capacity() + e.labels.capacity()) * sizeof(int);
  return d;
}

size_t batch_bytes(int B, int T) { return size_t(4) * B * T * sizeof(int); }

size_t training_data_bytes(const TrainingData& d, const TrainConfig& c) {
  size_t eval = 0;
  if (!d.eval.empty()) {
    eval = make_eval_batches(d.eval, c.micro_batch_size, c.sequence_len, c.sample_packing, 0).size();
    if (c.eval_batches > 0) eval = std::min(eval, size_t(c.eval_batches));
  }
  // a step's micro-batches are all held (the step's label count comes before its first backward)
  return d.tokenizer_bytes + d.example_bytes +
         batch_bytes(c.micro_batch_size, c.sequence_len) * (size_t(c.gradient_accumulation_steps) + eval);
}

}  // namespace lt
