// The training loop's setup and its steps (train/train_loop.h); evaluation, checkpoints and the
// end of a run are in train_loop_outputs.cpp.
#include "train/train_loop.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "core/memory_plan.h"
#include "core/threads.h"
#include "io/peft_adapter.h"
#include "kernels/ops.h"

namespace fs = std::filesystem;

namespace lt {

TrainLoop::TrainLoop(const TrainConfig& config, RunServices services, TrainHooks hooks, RunWatchers watchers)
    : TrainLoop(config, std::move(services), std::move(hooks), std::move(watchers), std::nullopt) {}

std::unique_ptr<TrainLoop> TrainLoop::synthetic(const TrainConfig& config, RunServices services, uint64_t seed) {
  RunWatchers quiet;
  quiet.print = false;
  return std::unique_ptr<TrainLoop>(new TrainLoop(config, std::move(services), {}, quiet, seed));
}

TrainLoop::TrainLoop(const TrainConfig& requested, RunServices services, TrainHooks hooks, RunWatchers watchers,
                     std::optional<uint64_t> synthetic_seed)
    : services_(std::move(services)), hooks_(std::move(hooks)), watchers_(std::move(watchers)),
      synthetic_(synthetic_seed.has_value()) {
  LT_CHECK(services_.setup, "TrainLoop: no setup (memory budget and sharding) was given");
  const size_t fixed = load_inputs(requested);
  RunSetup s = services_.setup(requested, files_.config, baseline_bytes_ + fixed);
  LT_CHECK(s.strategy, "TrainLoop: the setup returned no sharding strategy");
  LT_CHECK(!services_.comm || &s.strategy->comm() == services_.comm,
           "TrainLoop: the sharding strategy runs on another communicator than the run's");
  config_ = std::move(s.config);
  store_ = std::make_unique<UnitStore>(std::move(s.strategy));
  comm_ = &strategy().comm();
  lead_ = comm_->rank() == 0;
  const size_t scratch = comm_->size() > 1 ? batch_bytes(config_.micro_batch_size, config_.sequence_len) : 0;
  data_bytes_ = synthetic_ ? batch_bytes(config_.micro_batch_size, config_.sequence_len)
                           : training_data_bytes(data_, config_) + scratch;
  build_model();
  prepare_batches(synthetic_seed);
}

TrainLoop::~TrainLoop() = default;

void TrainLoop::say(const std::string& text) const {
  if (lead_ && watchers_.print) fmt::print("{}", text);
}

// The config checked, the model's files mapped and the data tokenized; returns the data bytes the
// budget counts (with several ranks, one more batch: the scratch for the other ranks' micro-batches).
size_t TrainLoop::load_inputs(const TrainConfig& c) {
  if (synthetic_) {
    LT_CHECK(!c.base_model.empty(), "{}: 'base_model' is required", c.source);
    check_train_config_ranges(c);
  } else {
    validate_train_config(c);
  }
  set_num_threads(c.threads);
  baseline_bytes_ = services_.baseline_bytes ? services_.baseline_bytes() : 0;
  files_ = services_.base ? services_.base->files(c.base_model) : load_model_files(c.base_model);
  const ModelConfig& mc = files_.config;
  validate_config(mc, c.base_model);
  LT_CHECK(c.sequence_len <= mc.max_seq_len, "{}: sequence_len {} is longer than the model's context ({} positions, "
           "max_position_embeddings); use sequence_len {} or less", c.base_model, c.sequence_len, mc.max_seq_len,
           mc.max_seq_len);
  const size_t batch = batch_bytes(c.micro_batch_size, c.sequence_len);
  if (synthetic_) return batch;
  data_ = load_training_data(c);
  check_tokenizer_fits_model(*data_.tokenizer, mc.vocab_size, c.base_model);
  const int ranks = services_.comm ? services_.comm->size() : 1;
  return training_data_bytes(data_, c) + (ranks > 1 ? batch : 0);
}

void TrainLoop::build_model() {
  const ModelConfig& mc = files_.config;
  const TrainConfig& c = config_;
  if (!c.unfreeze_schedule.empty()) {
    LT_CHECK(c.method == Method::Full, "unfreeze_schedule applies to method: full");
    unfreeze_ = UnfreezeSchedule::parse(c.unfreeze_schedule);
    unfreeze_.check_layers(mc.n_layers);
  }
  TrainModelOptions o = train_model_options(c);
  single_plan_ = plan_training(mc, o);  // every weight, trained or frozen, whatever the sharding
  ShardingStrategy& st = strategy();
  o.optimizer_state = !st.holds_moments();
  o.store_grads = st.holds_grads();
  o.store_params = st.holds_params();
  const MemoryPlan plan = plan_training(mc, o);
  const std::string shape = fmt::format("{} {}, micro-batch {} x {} tokens, checkpointing {}", method_name(c.method),
                                        c.method == Method::Lora ? fmt::format("r={}", c.lora.r) : "", c.micro_batch_size,
                                        c.sequence_len, c.gradient_checkpointing);
  if (st.rank_plan())
    say(fmt::format("memory plan per rank ({}; {}):\n{}", st.describe(), shape, st.rank_plan()->format_table(false)));
  else
    say(fmt::format("memory plan ({}):\n{}", shape, plan.format_table(false)));
  if (services_.base) frozen_ = services_.base->frozen(c.base_model, mc, o);
  model_ = std::make_unique<TrainModel>(mc, files_.tensors, o, ops_cpu(), store_.get(), frozen_.get());
  if (o.topk.fraction > 0) st.set_grad_topk(o.topk);  // top-k gradient sparsification (train/grad_topk.h)
  if (lead_) {  // the first step's timeline of the model's arenas
    ledger_.emplace(model_->arenas(), size_t(4 * mc.n_layers + 16));
    ledger_->mark("loaded");
  }
  info_ = {c.method, c.base_model,
           c.method == Method::Lora ? peft_adapter_config_json(lora_config_for_peft(c.lora, mc.fused_proj), c.base_model)
                                    : std::string()};
}

// B x T pseudo-random token ids, each row one document, every token but a row's last labelled.
static Batch synthetic_batch(int B, int T, int vocab, uint64_t seed) {
  Batch b;
  b.B = B;
  b.T = T;
  const int N = B * T;
  std::mt19937 rng(uint32_t(seed & 0xffffffffu));
  b.tokens.resize(size_t(N));
  b.labels.resize(size_t(N));
  b.positions.resize(size_t(N));
  b.doc_start.resize(size_t(N));
  for (int i = 0; i < N; ++i) {
    b.tokens[size_t(i)] = int(rng() % unsigned(vocab));
    b.positions[size_t(i)] = i % T;
    b.doc_start[size_t(i)] = i - i % T;
  }
  for (int i = 0; i < N; ++i) {
    b.labels[size_t(i)] = (i + 1) % T ? b.tokens[size_t(i) + 1] : kIgnoreLabel;
    b.n_label_tokens += b.labels[size_t(i)] != kIgnoreLabel;
  }
  return b;
}

void TrainLoop::prepare_batches(std::optional<uint64_t> synthetic_seed) {
  const TrainConfig& c = config_;
  const int R = comm_->size(), accum = c.gradient_accumulation_steps;
  // this rank's micro-batches of a step, loaded before its first backward, and with several ranks
  // a scratch batch for the other ranks' micro-batches, which every rank reads past
  batches_.resize(size_t(accum + (R > 1)));
  // when the strategy holds the parameters a forward gathers them from every rank: all evaluate
  evaluates_ = lead_ || strategy().holds_params();
  if (synthetic_seed) {
    synthetic_batch_ = synthetic_batch(c.micro_batch_size, c.sequence_len, files_.config.vocab_size, *synthetic_seed);
    total_steps_ = c.max_steps;
    return;
  }
  const int pad = data_.tokenizer->eos_id() >= 0 ? data_.tokenizer->eos_id() : 0;
  loader_.emplace(std::move(data_.train), c.micro_batch_size, c.sequence_len, c.sample_packing, c.seed, pad);
  if (evaluates_ && !data_.eval.empty())
    eval_batches_ = make_eval_batches(data_.eval, c.micro_batch_size, c.sequence_len, c.sample_packing, pad);
  if (c.eval_batches > 0 && int(eval_batches_.size()) > c.eval_batches) eval_batches_.resize(size_t(c.eval_batches));
  const int steps_per_epoch = std::max<int>(1, int(loader_->batches_per_epoch()) / (R * accum));
  total_steps_ = c.max_steps > 0 ? c.max_steps : steps_per_epoch * c.num_epochs;
  say(fmt::format("trainable parameters: {} ({} tensors); {} training batches per epoch, {} eval batches\n",
                  model_->trainable_count(), model_->params().size(), loader_->batches_per_epoch(),
                  eval_batches_.size()));
}

void TrainLoop::resume(const std::string& checkpoint) {
  LT_CHECK(!started_, "resume: the run has started; resume before its first step");
  config_.resume = checkpoint;
}

void TrainLoop::start() {
  if (started_) return;
  started_ = true;
  const TrainConfig& c = config_;
  if (!synthetic_) {
    if (lead_) {  // a previous run's outputs are refused (or replaced on purpose)
      prepare_output_dir(c.output_dir, !c.resume.empty(), c.overwrite_output_dir);
      fs::create_directories(c.output_dir);
    }
    comm_->barrier();
  }
  schedule_.kind = parse_schedule_kind(c.lr_scheduler);
  schedule_.lr = c.learning_rate;
  schedule_.warmup_steps = c.warmup_steps;
  adamw_.weight_decay = c.weight_decay;
  fp16_ = c.precision == Precision::FP16;
  scaler_ = LossScaler({float(c.initial_loss_scale), 2.0f, 0.5f, c.loss_scale_window});
  if (c.lora_rank_policy == "adaptive")  // before the checkpoint, which holds its masks
    strategy().set_adaptive_rank(adaptive_rank_options(c, total_steps_), model_->arenas(),
                                 category_plan(process_plan(), Category::OptimizerState));
  const TrainerState rs = resume_state();
  model_->zero_grads();  // also the working copies (16-bit, QAT) of the weights a checkpoint just loaded
  tty_ = lead_ && watchers_.print && isatty(fileno(stdout));
  if (const float ev = synthetic_ ? NAN : evaluate(); lead_ && std::isfinite(ev)) {
    result_.first_eval_loss = ev;
    log_eval(ev, /*record=*/!rs.step, /*newline=*/false);  // on resume it was logged before
  }
  t_start_ = Clock::now();
  comm_->reset_stats();
  if (ledger_) model_->set_ledger(&*ledger_);  // the first step's timeline, layer by layer
}

// The checkpoint to resume (config.resume) loaded into the model and the strategy, and the loop's
// state set from it: losses, data position, loss scaler, metrics.jsonl cut back to its records.
TrainerState TrainLoop::resume_state() {
  const TrainConfig& c = config_;
  TrainerState rs;
  if (!synthetic_ && !c.resume.empty()) {
    rs = strategy().load_checkpoint(c.resume, c.output_dir);
    if (rs.step > 0) say(fmt::format("resumed from step {} (epoch {}, batch {})\n", rs.step, rs.epoch, rs.position));
  }
  result_.output_dir = c.output_dir;
  result_.losses = rs.losses;
  step_ = first_step_ = rs.step;
  epoch_ = rs.epoch;
  skipped_ = rs.skipped_steps;
  saved_step_ = c.resume == "auto" && rs.step > 0 ? rs.step : -1;
  if (fp16_ && rs.loss_scale > 0) scaler_.set_state(rs.loss_scale, rs.clean_steps);
  if (loader_) {
    loader_->start_epoch(epoch_);
    if (rs.position) loader_->seek(epoch_, rs.position);
  }
  // resumed: the records after the checkpoint go (the steps after it run again)
  if (lead_ && !synthetic_)
    metrics_.emplace(c.output_dir, !rs.step ? -1 : rs.metrics_records >= 0 ? rs.metrics_records
                                                                           : metrics_records_up_to(c.output_dir, rs.step));
  return rs;
}

// staged unfreezing: which layers train this step, at what lr factor (embeddings, head and final
// norm follow the top layer)
void TrainLoop::apply_unfreeze() {
  if (unfreeze_.empty()) return;
  const auto& params = model_->params();
  for (size_t i = 0; i < params.size(); ++i) {
    const int l = params[i].layer < 0 ? files_.config.n_layers - 1 : params[i].layer;
    strategy().set_frozen(i, !unfreeze_.layer_trainable(l, step_), unfreeze_.lr_factor(l, step_) * params[i].lr_factor);
  }
}

void TrainLoop::next_batch(Batch& b) {
  if (!loader_) {  // synthetic: the same batch every time
    if (b.tokens.empty()) b = synthetic_batch_;
    return;
  }
  if (!loader_->next(b)) {
    loader_->start_epoch(++epoch_);
    LT_CHECK(loader_->next(b), "the training set yields no batch");
  }
}

// Every rank reads the step's R·accumulation micro-batches, keeping its own; the step's label
// count (all ranks, all micro-batches) is all-reduced, since the first backward needs it
// (transformers' num_items_in_batch).
int64_t TrainLoop::load_step_batches() {
  const int rank = comm_->rank(), accum = config_.gradient_accumulation_steps, global = comm_->size() * accum;
  double labels = 0;
  for (int j = 0; j < global; ++j) {
    const bool mine = j / accum == rank;
    Batch& b = mine ? batches_[size_t(j % accum)] : batches_.back();
    next_batch(b);
    if (mine) labels += b.n_label_tokens;
  }
  comm_->allreduce_sum(&labels, 1);
  return int64_t(labels);
}

StepStats TrainLoop::step() {
  start();
  LT_CHECK(!done(), "step: the run has taken all of its {} steps", total_steps_);
  apply_unfreeze();
  const auto t0 = Clock::now();
  const float loss_scale = fp16_ ? scaler_.scale() : 1.0f;
  const int64_t labels = load_step_batches();
  const int rank = comm_->rank(), accum = config_.gradient_accumulation_steps;
  const uint64_t global = uint64_t(comm_->size()) * uint64_t(accum);
  double sums[2] = {0, 0};  // this rank's token-loss sum and tokens, then all ranks'
  for (int a = 0; a < accum; ++a) {
    const Batch& b = batches_[size_t(a)];
    const int j = rank * accum + a;  // the micro-batch's index in the step (its dropout masks)
    strategy().set_last_micro_batch(a == accum - 1);
    const float l = model_->forward_backward(b.tokens.data(), b.labels.data(), b.positions.data(), b.doc_start.data(),
                                             loss_scale, uint64_t(step_) * global + uint64_t(j), labels);
    LT_CHECK(std::isfinite(l), "loss is {} at step {} (micro-batch {}); stopping. The last good checkpoint in {} is "
             "intact; try a lower learning_rate", l, step_ + 1, j, config_.output_dir);
    strategy().micro_batch_done(a, accum);
    sums[0] += double(l) * b.n_label_tokens;
    sums[1] += double(b.B) * b.T;
  }
  comm_->allreduce_sum(sums, 2);
  const StepStats s = optimize(loss_scale, sums[0], labels, sums[1], t0);
  record_step(s, loss_scale);
  return s;
}

// The strategy's optimizer step at the scheduled lr (AdamW counts the updates it made); fp16: a
// step whose gradients overflowed is skipped by every rank and the loss scale backs off.
StepStats TrainLoop::optimize(float loss_scale, double loss_sum, int64_t labels, double tokens, Clock::time_point t0) {
  OptimizerStepArgs a;
  a.adamw = adamw_;
  a.lr = lr_at(schedule_, step_, total_steps_);
  a.adam_step = step_ + 1 - skipped_;
  a.step = step_ + 1;
  a.max_grad_norm = float(config_.max_grad_norm);
  a.grad_scale = loss_scale;
  a.skip_nonfinite = fp16_;
  const OptimizerStepResult r = strategy().optimizer_step(a);
  LT_CHECK(fp16_ || r.finite, "non-finite gradient at step {}; stopping. The last good checkpoint in {} is intact; try "
           "a lower learning_rate", step_ + 1, config_.output_dir);
  const bool apply = !fp16_ || scaler_.update(r.finite);
  skipped_ += !apply;
  model_->zero_grads();
  StepStats s;
  s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  compute_seconds_ += s.seconds;
  if (step_ == first_step_ && ledger_) {
    ledger_->mark("optimizer");
    model_->set_ledger(nullptr);
  }
  s.step = ++step_;
  s.loss = labels ? float(loss_sum / double(labels)) : 0.0f;
  s.lr = a.lr;
  s.grad_norm = apply ? r.grad_norm : 0.0f;
  s.applied = apply;
  s.tokens = long(tokens);
  if (!apply)
    say(fmt::format("{}step {:>5}: an fp16 gradient overflowed at loss scale {}; step skipped, scale now {}\n",
                    tty_ ? "\n" : "", step_, loss_scale, scaler_.scale()));
  return s;
}

// After a step: the hook, its metrics record, the progress bar, and the evaluation and checkpoint
// that fall on it.
void TrainLoop::record_step(const StepStats& s, float loss_scale) {
  if (hooks_.on_step_end) hooks_.on_step_end(step_);
  result_.losses.push_back(s.loss);
  tokens_seen_ += s.tokens;
  const double elapsed = std::chrono::duration<double>(Clock::now() - t_start_).count();
  const double tps = tokens_seen_ / std::max(elapsed, 1e-9);
  const size_t rss = process_rss_bytes();
  nlohmann::json mj = {{"step", step_}, {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.grad_norm},
                       {"tokens_per_s", tps}, {"rss_bytes", rss}, {"epoch", epoch_},
                       {"comm_bytes_per_step", double(comm_->stats().total()) / (step_ - first_step_)}};
  if (fp16_) mj["loss_scale"] = loss_scale;
  if (!s.applied) mj["skipped"] = true;
  if (const RankAllocator* ra = strategy().rank_allocator()) mj["lora_rank_total"] = ra->active_total();
  log_metric(mj);
  const StepProgress p{step_, total_steps_, s.loss, s.lr, s.grad_norm, tps,
                       elapsed / (step_ - first_step_) * (total_steps_ - step_), rss};
  if (lead_ && watchers_.print) print_step_progress(p, tty_, config_.logging_steps);
  if (watchers_.on_progress) watchers_.on_progress(p);
  if (synthetic_) return;
  if (config_.eval_steps > 0 && step_ % config_.eval_steps == 0 && step_ < total_steps_)
    if (const float e = evaluate(); std::isfinite(e)) log_eval(e, true, tty_);
  if (config_.save_steps > 0 && step_ % config_.save_steps == 0) save_checkpoint();
}

}  // namespace lt
