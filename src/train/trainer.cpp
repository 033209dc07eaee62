// The training loop. A step = gradient_accumulation_steps micro-batches, all loaded first; the
// step's loss is the sum of every label token's loss over them divided by their label-token count,
// so accumulation gives the larger batch's gradients (each micro-batch's gradients accumulate,
// scaled by its share of that count), then clipping, a finiteness check, AdamW at the
// scheduled lr, zeroed gradients. fp16 runs scale the loss dynamically (train/loss_scaler.h): the
// gradients are unscaled before clipping and a step whose gradients overflowed is skipped.
// Checkpoints hold the trainable tensors, both AdamW moments, the step, the data position and the
// loss scaler's state (dropout masks are keyed by step, so there is no RNG state): a resumed run
// repeats an uninterrupted one bit for bit at the same thread count. Each checkpoint is written to
// a new folder and then published by atomically replacing output_dir/LATEST, so a crash mid-write
// leaves the previous checkpoint loadable. A checkpoint name read from LATEST is validated before
// anything is opened or removed (train/output_dir.h), and on resume metrics.jsonl is cut back to the
// records written up to the checkpoint, so it reads as if the run had not stopped.
#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/ledger.h"
#include "core/memory_plan.h"
#include "core/threads.h"
#include "dist/comm.h"
#include "dist/zero_trainer.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "plan/baseline.h"
#include "plan/budget.h"
#include "plan/flops.h"
#include "plan/peak.h"
#include "kernels/ops.h"
#include "model/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "train/data.h"
#include "train/data_loader.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"
#include "train/output_dir.h"
#include "train/report.h"
#include "train/run_outputs.h"
#include "train/schedule.h"
#include "train/train_model.h"
#include "train/trainer_state.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

using Clock = std::chrono::steady_clock;

std::string default_tokenizer_path(const std::string& model) {
  if (fs::is_directory(model)) return model;
  return fs::path(model).parent_path().string();
}

std::vector<Example> load_all(const TrainConfig& c, const Tokenizer& tok) {
  std::vector<Example> all;
  for (const auto& ds : c.datasets) {
    DataOptions o;
    o.doc_separator = parse_doc_separator(ds.doc_separator);
    o.min_blank_lines = ds.min_blank_lines;
    o.chat_template = parse_chat_template(c.chat_template);
    o.skip_bad_lines = c.skip_bad_lines;
    DataStats st;
    auto ex = load_examples(ds.path, tok, o, &st);
    check_labels_survive(ex, c.sequence_len, c.sample_packing, ds.path);  // no "loss 0.0" on a truncated dataset
    if (st.n_skipped_lines) fmt::print(stderr, "warning: {}: skipped {} malformed lines\n", ds.path, st.n_skipped_lines);
    for (auto& e : ex) all.push_back(std::move(e));
  }
  return all;
}

// Writes checkpoint-<step> (tensors, moments, trainer_state.json), then publishes it in LATEST and
// removes the previous one. A failed write removes the unfinished folder and says the previous
// checkpoint is intact.
void save_checkpoint(const std::string& out_dir, TrainModel& m, const TrainerState& state, const TrainHooks& hooks) {
  const std::string name = checkpoint_name(state.step), previous = read_latest(out_dir);
  if (name != previous) fs::remove_all(fs::path(out_dir) / name);  // left by a run killed before publishing it
  write_checkpoint_folder(out_dir, name, previous, [&](const std::string& dir) {
    std::vector<TensorInfo> ts;
    for (const auto& p : m.params()) {
      for (auto [prefix, ptr] : {std::pair{"param.", p.p}, std::pair{"adam_m.", p.m}, std::pair{"adam_v.", p.v}}) {
        TensorInfo t;
        t.name = prefix + p.name;
        t.dtype = DType::F32;
        t.shape = p.shape;
        t.data = ptr;
        t.nbytes = p.n * sizeof(float);
        ts.push_back(t);
      }
    }
    save_safetensors((fs::path(dir) / "state.safetensors").string(), ts);
    write_text_file_atomic((fs::path(dir) / "trainer_state.json").string(), trainer_state_json(state).dump(1));
  });
  if (hooks.on_checkpoint_written) hooks.on_checkpoint_written(state.step);
  publish_checkpoint(out_dir, name, previous);
  if (hooks.on_checkpoint_saved) hooks.on_checkpoint_saved(state.step);
}

TrainerState load_checkpoint(const std::string& path, const std::string& out_dir, TrainModel& m) {
  const std::string dir = resolve_checkpoint(path, out_dir);
  if (dir.empty()) return {};
  // the state first: a corrupt step is reported before megabytes of tensors are read
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  TrainerState r = parse_trainer_state(read_text_file(state_path), state_path);
  TensorSet ts;
  ts.source = dir;
  load_safetensors(dir + "/state.safetensors", ts);
  for (auto& p : m.params()) {
    for (auto [prefix, ptr] : {std::pair{"param.", p.p}, std::pair{"adam_m.", p.m}, std::pair{"adam_v.", p.v}}) {
      const TensorInfo& t = ts.get(prefix + p.name, p.shape);
      convert_to_f32(ptr, t.data, t.dtype, p.n);
    }
  }
  return r;
}

}  // namespace

TrainConfig fit_memory_budget(const TrainConfig& c, const ModelConfig& m, size_t baseline) {
  if (c.memory_budget.empty()) {
    LT_CHECK(!c.auto_fit, "auto needs a memory_budget");
    return c;
  }
  const size_t budget = parse_bytes(c.memory_budget);
  const size_t weights = model_weight_bytes(m);
  LT_CHECK(budget >= weights + baseline, "the memory budget of {} is smaller than the model's weights alone ({} in "
           "fp32, plus {} of process baseline and data): no micro-batch, checkpointing or LoRA setting can fit it. Raise the "
           "budget or use a smaller model; nothing was allocated.", format_bytes(budget), format_bytes(weights),
           format_bytes(baseline));
  if (c.auto_fit) {
    FitCandidate f = auto_fit(m, c, budget, baseline);
    fmt::print("auto: {} fits {} (predicted peak {})\n", f.change, format_bytes(budget), format_bytes(f.predicted_bytes));
    return f.config;
  }
  size_t need = predict_training_bytes(m, c, baseline);
  if (need <= budget) return c;
  std::string msg = fmt::format("the run needs {} (arenas {} + process baseline and data {}), over the memory budget of {}; "
                                "nothing was allocated.", format_bytes(need), format_bytes(need - baseline),
                                format_bytes(baseline), format_bytes(budget));
  auto fits = cheaper_fits(m, c, budget, baseline);
  if (fits.empty()) msg += " No single change tried (checkpointing, LoRA, smaller micro-batches) fits.";
  else msg += " Changes that fit, in the order to try them:";
  for (const auto& f : fits) msg += fmt::format("\n  {:<90} predicted peak {}", f.change, format_bytes(f.predicted_bytes));
  if (!fits.empty()) msg += "\n(or run with auto: true to pick the largest micro-batch that fits)";
  throw Error(msg);
}

TrainingData load_training_data(const TrainConfig& c) {
  TrainingData d;
  const size_t rss0 = process_rss_bytes();
  d.tokenizer = load_tokenizer_for_model(c.base_model, c.tokenizer.empty() && !is_gguf_model_path(c.base_model)
                                                            ? default_tokenizer_path(c.base_model)
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

TrainResult run_training(const TrainConfig& c, const TrainHooks& hooks) {
  if (c.zero_stage >= 0 || world().size() > 1) return run_training_zero(c, zero_options(c), world(), hooks);
  return run_training_single(c, hooks);
}

TrainResult run_training_single(const TrainConfig& requested, const TrainHooks& hooks) {
  validate_train_config(requested);
  set_num_threads(requested.threads);
  const size_t baseline = process_baseline_bytes();
  auto files = load_model_files(requested.base_model);
  const ModelConfig& mc = files.config;
  validate_config(mc, requested.base_model);
  LT_CHECK(requested.sequence_len <= mc.max_seq_len, "sequence_len {} is longer than the model's context ({} "
           "positions)", requested.sequence_len, mc.max_seq_len);
  TrainingData data = load_training_data(requested);
  check_tokenizer_fits_model(*data.tokenizer, mc.vocab_size, requested.base_model);
  // the budget counts the data as planned for the requested batch shape (auto only shrinks it)
  const TrainConfig c = fit_memory_budget(requested, mc, baseline + training_data_bytes(data, requested));
  auto& tok = data.tokenizer;
  std::vector<Example>& train_ex = data.train;
  std::vector<Example>& eval_ex = data.eval;
  const int pad = tok->eos_id() >= 0 ? tok->eos_id() : 0;
  DataLoader loader(std::move(train_ex), c.micro_batch_size, c.sequence_len, c.sample_packing, c.seed, pad);
  std::vector<Batch> eval_batches;
  if (!eval_ex.empty()) eval_batches = make_eval_batches(eval_ex, c.micro_batch_size, c.sequence_len, c.sample_packing, pad);
  if (c.eval_batches > 0 && int(eval_batches.size()) > c.eval_batches) eval_batches.resize(size_t(c.eval_batches));

  // model
  TrainModelOptions o = train_model_options(c);
  UnfreezeSchedule unfreeze;
  if (!c.unfreeze_schedule.empty()) {
    LT_CHECK(c.method == "full", "unfreeze_schedule applies to method: full");
    unfreeze = UnfreezeSchedule::parse(c.unfreeze_schedule);
    unfreeze.check_layers(mc.n_layers);
  }
  MemoryPlan plan = plan_training(mc, o);
  fmt::print("memory plan ({} {}, micro-batch {} x {} tokens, checkpointing {}):\n{}", c.method,
             c.method == "lora" ? fmt::format("r={}", c.lora.r) : "", c.micro_batch_size, c.sequence_len,
             c.gradient_checkpointing, plan.format_table(false));
  TrainModel model(mc, files.tensors, o, ops_cpu());
  const size_t data_bytes = training_data_bytes(data, c);
  Ledger ledger(model.arenas(), size_t(4 * mc.n_layers + 16));
  ledger.mark("loaded");
  fmt::print("trainable parameters: {} ({} tensors); {} training batches per epoch, {} eval batches\n",
             model.trainable_count(), model.params().size(), loader.batches_per_epoch(), eval_batches.size());

  // everything checked and loaded: a previous run's outputs are refused (or replaced on purpose)
  prepare_output_dir(c.output_dir, !c.resume.empty(), c.overwrite_output_dir);
  fs::create_directories(c.output_dir);
  const int accum = c.gradient_accumulation_steps;
  const int steps_per_epoch = std::max<int>(1, int(loader.batches_per_epoch()) / accum);
  const int total_steps = c.max_steps > 0 ? c.max_steps : steps_per_epoch * c.num_epochs;
  ScheduleOptions so;
  so.kind = parse_schedule_kind(c.lr_scheduler);
  so.lr = c.learning_rate;
  so.warmup_steps = c.warmup_steps;
  AdamWOptions ao;
  ao.weight_decay = c.weight_decay;

  std::vector<ParamGroup> groups;
  for (auto& p : model.params()) {
    ParamGroup g;
    g.param = p.p; g.grad = p.g; g.m = p.m; g.v = p.v; g.n = p.n;
    g.weight_decay = p.decay;
    groups.push_back(g);
  }
  TrainResult res;
  res.output_dir = c.output_dir;
  TrainerState rs;
  if (!c.resume.empty()) {
    rs = load_checkpoint(c.resume, c.output_dir, model);
    if (rs.step > 0) fmt::print("resumed from step {} (epoch {}, batch {})\n", rs.step, rs.epoch, rs.position);
  }
  res.losses = rs.losses;
  int epoch = rs.epoch;
  loader.start_epoch(epoch);
  if (rs.position) loader.seek(epoch, rs.position);

  auto evaluate = [&]() -> float {
    if (eval_batches.empty()) return NAN;
    double sum = 0;
    long n = 0;
    for (const auto& b : eval_batches) {
      if (!b.n_label_tokens) continue;
      float l = model.forward_loss(b.tokens.data(), b.labels.data(), b.positions.data(), b.doc_start.data());
      sum += double(l) * b.n_label_tokens;
      n += b.n_label_tokens;
    }
    return n ? float(sum / double(n)) : NAN;
  };
  // resumed: the records after the checkpoint go (the steps after it run again)
  MetricsLog metrics(c.output_dir, !rs.step ? -1 : rs.metrics_records >= 0 ? rs.metrics_records
                                                                           : metrics_records_up_to(c.output_dir, rs.step));
  auto log_metric = [&](const nlohmann::json& j) { metrics.append(j); };
  const bool tty = isatty(fileno(stdout));
  float ev = evaluate();
  if (std::isfinite(ev)) {
    res.eval_losses.push_back(ev);
    res.first_eval_loss = ev;
    fmt::print("step {:>5}  eval loss {:.4f}  perplexity {:.2f}\n", rs.step, ev, std::exp(ev));
    if (!rs.step) log_metric({{"step", rs.step}, {"eval_loss", ev}, {"eval_ppl", std::exp(ev)}});  // not on resume
  }

  std::vector<Batch> batches(static_cast<size_t>(accum));  // a step's micro-batches, loaded before its first backward
  model.zero_grads();
  auto t_start = Clock::now();
  long tokens_seen = 0;
  double compute_seconds = 0;  // forward, backward and optimizer only (no evaluation, no checkpoints)
  int step = rs.step;
  const int first_step = step;
  // fp16: dynamic loss scaling (train/loss_scaler.h); checkpoints carry its state
  const bool fp16 = c.precision == "fp16";
  LossScaler scaler({float(c.initial_loss_scale), 2.0f, 0.5f, c.loss_scale_window});
  if (fp16 && rs.loss_scale > 0) scaler.set_state(rs.loss_scale, rs.clean_steps);
  int skipped_steps = rs.skipped_steps;
  // the checkpoint's state; metrics.jsonl is synced first so the records it counts are on disk
  int saved_step = c.resume == "auto" && rs.step > 0 ? rs.step : -1;
  auto checkpoint = [&]() {
    TrainerState st{step, loader.epoch(), loader.position(), res.losses};
    if (fp16) {
      st.loss_scale = scaler.scale();
      st.clean_steps = scaler.clean_steps();
      st.skipped_steps = skipped_steps;
    }
    metrics.sync();
    st.metrics_records = metrics.records();
    save_checkpoint(c.output_dir, model, st, hooks);
    saved_step = step;
  };
  model.set_ledger(&ledger);  // the first step's timeline, layer by layer
  for (; step < total_steps;) {
    // staged unfreezing: which layers train this step, at what lr factor
    if (!unfreeze.empty())
      for (size_t i = 0; i < groups.size(); ++i) {
        int layer = model.params()[i].layer;
        int l = layer < 0 ? mc.n_layers - 1 : layer;  // embeddings/head/final norm follow the top layer
        groups[i].frozen = !unfreeze.layer_trainable(l, step);
        groups[i].lr_factor = unfreeze.lr_factor(l, step);
      }
    const auto step_t0 = Clock::now();
    const float loss_scale = fp16 ? scaler.scale() : 1.0f;
    // the step's loss and gradients: the sum over the label tokens of all its micro-batches divided
    // by their count, which the first backward needs (transformers' num_items_in_batch)
    int64_t step_labels = 0;
    for (Batch& b : batches) {
      if (!loader.next(b)) {
        loader.start_epoch(++epoch);
        LT_CHECK(loader.next(b), "the training set yields no batch");
      }
      step_labels += b.n_label_tokens;
    }
    double loss_sum = 0;  // token losses of the step
    int tokens_step = 0;
    for (int a = 0; a < accum; ++a) {
      const Batch& batch = batches[size_t(a)];
      float l = model.forward_backward(batch.tokens.data(), batch.labels.data(), batch.positions.data(),
                                       batch.doc_start.data(), loss_scale, uint64_t(step) * accum + a, step_labels);
      LT_CHECK(std::isfinite(l), "loss is {} at step {} (micro-batch {}); stopping. The last good checkpoint in {} "
               "is intact; try a lower learning_rate", l, step + 1, a, c.output_dir);
      loss_sum += double(l) * batch.n_label_tokens;
      tokens_step += batch.B * batch.T;
    }
    // fp16: unscale; a step with an Inf/NaN gradient is skipped and the scale backs off
    const bool apply = !fp16 || scaler.update(scaler.unscale(groups));
    skipped_steps += !apply;
    float gnorm = apply && c.max_grad_norm > 0 ? clip_grad_norm(groups, float(c.max_grad_norm)) : 0.0f;
    LT_CHECK(!apply || grads_finite(groups), "non-finite gradient at step {}; stopping. The last good checkpoint in {} "
             "is intact; try a lower learning_rate", step + 1, c.output_dir);
    float lr = lr_at(so, step, total_steps);
    if (apply) adamw_step(groups, ao, lr, step + 1 - skipped_steps);  // AdamW counts the updates it made
    model.zero_grads();
    compute_seconds += std::chrono::duration<double>(Clock::now() - step_t0).count();
    if (step == first_step) {
      ledger.mark("optimizer");
      model.set_ledger(nullptr);
    }
    ++step;
    float loss = step_labels ? float(loss_sum / double(step_labels)) : 0.0f;
    if (hooks.on_step_end) hooks.on_step_end(step);
    res.losses.push_back(loss);
    tokens_seen += tokens_step;
    double elapsed = std::chrono::duration<double>(Clock::now() - t_start).count();
    double tps = tokens_seen / std::max(elapsed, 1e-9);
    double eta = elapsed / (step - rs.step) * (total_steps - step);
    size_t rss = process_rss_bytes();
    nlohmann::json mj = {{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", gnorm}, {"tokens_per_s", tps},
                         {"rss_bytes", rss}, {"epoch", epoch}};
    if (fp16) mj["loss_scale"] = loss_scale;
    if (!apply) mj["skipped"] = true;
    log_metric(mj);
    if (!apply)
      fmt::print("{}step {:>5}: an fp16 gradient overflowed at loss scale {}; step skipped, scale now {}\n",
                 tty ? "\n" : "", step, loss_scale, scaler.scale());
    print_step_progress({step, total_steps, loss, lr, gnorm, tps, eta, rss}, tty, c.logging_steps);
    if (c.eval_steps > 0 && step % c.eval_steps == 0 && step < total_steps) {
      float e = evaluate();
      if (std::isfinite(e)) {
        res.eval_losses.push_back(e);
        fmt::print("{}step {:>5}  eval loss {:.4f}  perplexity {:.2f}\n", tty ? "\n" : "", step, e, std::exp(e));
        log_metric({{"step", step}, {"eval_loss", e}, {"eval_ppl", std::exp(e)}});
      }
    }
    if (c.save_steps > 0 && step % c.save_steps == 0) checkpoint();
  }
  if (tty) fmt::print("\n");
  if (tokens_seen > 0 && compute_seconds > 0) {
    const double tps = tokens_seen / compute_seconds;
    const double model_flops = training_flops_per_token(mc, o).forward + training_flops_per_token(mc, o).backward;
    const double peak = peak_f32_gflops() * 1e9;
    fmt::print("throughput: {:.0f} tokens/s over {:.1f} s of steps; model FLOPs utilization {:.1f}% of this machine's "
               "measured f32 peak ({:.0f} GFLOP/s, {} threads){}\n", tps, compute_seconds,
               100.0 * model_flops * tps / peak, peak / 1e9, num_threads(),
               o.checkpointing != Checkpointing::None ? fmt::format("; with recomputation {:.1f}% of peak",
                   100.0 * training_flops_per_token(mc, o).total() * tps / peak) : "");
  }
  // the final checkpoint before the final evaluation's record, so that a resume from it logs that once
  if (saved_step != step) checkpoint();
  float fe = evaluate();
  if (std::isfinite(fe)) {
    res.eval_losses.push_back(fe);
    res.last_eval_loss = fe;
    fmt::print("step {:>5}  eval loss {:.4f}  perplexity {:.2f}\n", step, fe, std::exp(fe));
    log_metric({{"step", step}, {"eval_loss", fe}, {"eval_ppl", std::exp(fe)}});
  }
  metrics.close();
  write_trained_model(c, plan, model, files.tensors, [&](size_t i) -> const float* { return model.params()[i].p; });
  write_ledger(c.output_dir, plan, ledger, baseline, data_bytes);
  fmt::print("report: {}\n", write_training_report(c.output_dir));
  print_memory_summary(plan, baseline, data_bytes);
  res.steps = step;
  return res;
}

}  // namespace lt
