// The ZeRO data-parallel training loop (dist/zero_trainer.h).
#include "dist/zero_trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/ledger.h"
#include "core/threads.h"
#include "dist/shard_checkpoint.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/peft_adapter.h"
#include "kernels/ops.h"
#include "plan/baseline.h"
#include "plan/budget.h"
#include "train/data_loader.h"
#include "train/loss_scaler.h"
#include "train/output_dir.h"
#include "train/report.h"
#include "train/run_outputs.h"
#include "train/schedule.h"
#include "train/train_model.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

using Clock = std::chrono::steady_clock;

// ledger-rank<r>.json: this rank's planned bytes per category against what the model's and the
// engine's arenas allocated and what of that is resident at the end (mincore), and the bytes
// offloaded to disk.
void write_rank_ledger(const std::string& out_dir, const MemoryPlan& rank_plan, const TrainModel& model,
                       ZeroOptimizer& z, int rank, double comm_bytes_per_step, size_t fixed_bytes) {
  nlohmann::json j;
  std::vector<unsigned char> scratch;
  for (size_t k = 0; k < kNumCategories; ++k) {
    const Category c = Category(k);
    const size_t planned = rank_plan.arena_bytes(c);
    const size_t allocated = model.arenas().allocated_bytes(c) + z.arenas().allocated_bytes(c);
    const size_t resident = model.arenas().resident_bytes(c, scratch) + z.arenas().resident_bytes(c, scratch);
    if (planned || allocated)
      j["categories"][std::string(category_name(c))] = {{"planned", planned}, {"allocated", allocated},
                                                        {"resident", resident}};
  }
  j["rank"] = rank;
  j["ranks"] = z.layout().ranks;
  j["zero_stage"] = z.options().stage;
  j["trainable_floats"] = z.layout().total;
  j["shard_floats"] = z.layout().shard;
  j["unit_floats"] = z.tensors().unit_max;
  j["layer_unit_floats"] = z.tensors().layer_max;
  j["tied_embedding_floats"] = z.tensors().tied_floats;
  for (int u = 0; u < z.units(); ++u) j["unit_sizes"].push_back(z.unit_end(u) - z.unit_begin(u));
  j["offloaded_bytes"] = z.offloaded_bytes();
  j["comm_bytes"] = z.comm().stats().total();
  j["comm_bytes_per_step"] = comm_bytes_per_step;  // sent by this rank during the training steps
  const auto& os = z.overlap_stats();
  j["overlap"] = {{"enabled", z.options().overlap}, {"prefetched_units", os.prefetched},
                  {"gathered_units", os.gathered}, {"reductions_overlapped", os.reductions_overlapped},
                  {"reductions_blocking", os.reductions_blocking}};
  // the peak: predicted (arenas + process baseline + data) against this process's VmHWM
  j["predicted_peak_bytes"] = rank_plan.total_bytes() + fixed_bytes;
  j["measured_peak_bytes"] = process_peak_rss_bytes();
  write_text_file_atomic((fs::path(out_dir) / fmt::format("ledger-rank{}.json", rank)).string(), j.dump(1));
}

// memory_budget under ZeRO: one rank's predicted peak (its arenas, plan_zero_rank, plus the process
// baseline and the data, `fixed`) must fit. auto: the lowest stage from the requested one up that
// fits (the least communication). Otherwise an error listing every stage's need.
ZeroOptions fit_zero_budget(const TrainConfig& c, const MemoryPlan& single_plan, int n_layers, int R, ZeroOptions zo,
                            size_t fixed) {
  if (c.memory_budget.empty()) {
    LT_CHECK(!c.auto_fit, "auto needs a memory_budget");
    return zo;
  }
  const size_t budget = parse_bytes(c.memory_budget);
  auto need = [&](int stage, OptimizerOffload off) {
    ZeroOptions z = zo;
    z.stage = stage;
    z.offload = off;
    return fixed + plan_zero_rank(single_plan, n_layers, R, z).total_bytes();
  };
  if (need(zo.stage, zo.offload) <= budget) return zo;
  if (c.auto_fit)
    for (int s = zo.stage + 1; s <= 3; ++s)
      if (const size_t n = need(s, zo.offload); n <= budget) {
        if (world().rank() == 0)
          fmt::print("auto: zero_stage {} fits {} per rank on {} ranks (predicted peak {})\n", s, format_bytes(budget), R,
                     format_bytes(n));
        zo.stage = s;
        return zo;
      }
  std::string msg = fmt::format("zero_stage {} on {} rank{} needs {} per rank (arenas plus {} of process baseline and data), "
                                "over the memory budget of {}; nothing was allocated. Per rank, by stage:",
                                zo.stage, R, R > 1 ? "s" : "", format_bytes(need(zo.stage, zo.offload)),
                                format_bytes(fixed), format_bytes(budget));
  for (int s = 0; s <= 3; ++s)
    for (auto off : {OptimizerOffload::None, OptimizerOffload::Disk}) {
      if (off == OptimizerOffload::Disk && zo.offload_dir.empty()) continue;
      const size_t n = need(s, off);
      msg += fmt::format("\n  zero_stage {}{:<28} {:>12}  {}", s, off == OptimizerOffload::Disk ? ", offload_optimizer: disk" : "",
                         format_bytes(n), n <= budget ? "fits" : "over");
    }
  msg += "\n(more ranks shrink stages 1-3 further; auto: true picks the lowest stage that fits)";
  throw Error(msg);
}

TrainResult run(const TrainConfig& c, const ZeroOptions& requested_zo, Communicator& comm, const TrainHooks& hooks) {
  validate_train_config(c);
  set_num_threads(c.threads);
  const int R = comm.size(), rank = comm.rank();
  const bool lead = rank == 0;
  auto files = load_model_files(c.base_model);
  const ModelConfig& mc = files.config;
  validate_config(mc, c.base_model);
  LT_CHECK(c.sequence_len <= mc.max_seq_len, "sequence_len {} is longer than the model's context ({} positions)",
           c.sequence_len, mc.max_seq_len);
  const size_t baseline = process_baseline_bytes();
  TrainingData data = load_training_data(c);
  check_tokenizer_fits_model(*data.tokenizer, mc.vocab_size, c.base_model);
  // with several ranks, one more batch: the scratch for the micro-batches of the other ranks
  const size_t data_bytes =
      training_data_bytes(data, c) + (comm.size() > 1 ? batch_bytes(c.micro_batch_size, c.sequence_len) : 0);
  TrainModelOptions o = train_model_options(c);
  o.optimizer_state = false;  // the engine holds the moments (sharded, or in the offload file)
  UnfreezeSchedule unfreeze;
  if (!c.unfreeze_schedule.empty()) {
    LT_CHECK(c.method == "full", "unfreeze_schedule applies to method: full");
    unfreeze = UnfreezeSchedule::parse(c.unfreeze_schedule);
    unfreeze.check_layers(mc.n_layers);
  }
  TrainModelOptions single = o;
  single.optimizer_state = true;
  const MemoryPlan single_plan = plan_training(mc, single);
  const ZeroOptions zo = fit_zero_budget(c, single_plan, mc.n_layers, R, requested_zo, baseline + data_bytes);
  o.store_grads = zo.stage >= 2;  // the engine also holds the gradients / parameters from stage 2 / 3
  o.store_params = zo.stage == 3;

  const int pad = data.tokenizer->eos_id() >= 0 ? data.tokenizer->eos_id() : 0;
  DataLoader loader(std::move(data.train), c.micro_batch_size, c.sequence_len, c.sample_packing, c.seed, pad);
  // stage 3: a forward gathers parameters from every rank, so every rank evaluates (rank 0 reports)
  const bool evaluates = lead || zo.stage == 3;
  std::vector<Batch> eval_batches;
  if (evaluates && !data.eval.empty())
    eval_batches = make_eval_batches(data.eval, c.micro_batch_size, c.sequence_len, c.sample_packing, pad);
  if (c.eval_batches > 0 && int(eval_batches.size()) > c.eval_batches) eval_batches.resize(size_t(c.eval_batches));
  const MemoryPlan rank_plan = plan_zero_rank(single_plan, mc.n_layers, R, zo);
  if (lead)
    fmt::print("memory plan per rank (ZeRO stage {}, {} rank{}{}):\n{}", zo.stage, R, R > 1 ? "s" : "",
               zo.offload == OptimizerOffload::Disk ? ", optimizer state offloaded to disk" : "",
               rank_plan.format_table(false));
  ZeroOptimizer zero(zero_tensors(single_plan, mc.n_layers), comm, zo);
  TrainModel model(mc, files.tensors, o, ops_cpu(), &zero);
  zero.attach(model.params());
  if (lead)
    fmt::print("trainable parameters: {} ({} tensors), {} per rank's shard; {} training batches per epoch\n",
               model.trainable_count(), model.params().size(), zero.layout().shard, loader.batches_per_epoch());
  // rank 0's ledger.json: the first step's timeline of the model's arenas, as in one process
  std::optional<Ledger> ledger;
  if (lead) {
    ledger.emplace(model.arenas(), size_t(4 * mc.n_layers + 16));
    ledger->mark("loaded");
  }

  if (lead) {  // a previous run's outputs are refused (or replaced on purpose)
    prepare_output_dir(c.output_dir, !c.resume.empty(), c.overwrite_output_dir);
    fs::create_directories(c.output_dir);
  }
  comm.barrier();
  const int accum = c.gradient_accumulation_steps, global_accum = R * accum;
  const int steps_per_epoch = std::max<int>(1, int(loader.batches_per_epoch()) / global_accum);
  const int total_steps = c.max_steps > 0 ? c.max_steps : steps_per_epoch * c.num_epochs;
  ScheduleOptions so;
  so.kind = parse_schedule_kind(c.lr_scheduler);
  so.lr = c.learning_rate;
  so.warmup_steps = c.warmup_steps;
  AdamWOptions ao;
  ao.weight_decay = c.weight_decay;

  TrainResult res;
  res.output_dir = c.output_dir;
  TrainingPosition rs;
  if (!c.resume.empty()) {
    rs = load_sharded_checkpoint(c.resume, c.output_dir, zero, model.params());
    if (lead && rs.step > 0) fmt::print("resumed from step {} (epoch {}, batch {})\n", rs.step, rs.epoch, rs.position);
  }
  res.losses = rs.losses;
  int epoch = rs.epoch;
  loader.start_epoch(epoch);
  if (rs.position) loader.seek(epoch, rs.position);

  auto evaluate = [&]() -> float {
    double sum = 0;
    long n = 0;
    for (const auto& b : eval_batches) {
      if (!b.n_label_tokens) continue;
      sum += double(model.forward_loss(b.tokens.data(), b.labels.data(), b.positions.data(), b.doc_start.data())) *
             b.n_label_tokens;
      n += b.n_label_tokens;
    }
    return n ? float(sum / double(n)) : NAN;
  };
  // rank 0 writes metrics.jsonl; resumed, the records after the checkpoint go (those steps run again)
  std::optional<MetricsLog> metrics;
  if (lead)
    metrics.emplace(c.output_dir, !rs.step ? -1 : rs.metrics_records >= 0 ? rs.metrics_records
                                                                          : metrics_records_up_to(c.output_dir, rs.step));
  auto log_metric = [&](const nlohmann::json& j) {
    if (metrics) metrics->append(j);
  };
  const bool tty = lead && isatty(fileno(stdout));
  if (float ev = evaluates ? evaluate() : NAN; lead && std::isfinite(ev)) {
    res.eval_losses.push_back(ev);
    res.first_eval_loss = ev;
    fmt::print("step {:>5}  eval loss {:.4f}  perplexity {:.2f}\n", rs.step, ev, std::exp(ev));
    if (!rs.step) log_metric({{"step", rs.step}, {"eval_loss", ev}, {"eval_ppl", std::exp(ev)}});  // not on resume
  }

  TrainedModelInfo info{c.method, c.base_model,
                        c.method == "lora" ? peft_adapter_config_json(c.lora, c.base_model) : std::string()};
  // fp16: dynamic loss scaling; every rank sees the same global norm, so all skip the same steps
  const bool fp16 = c.precision == "fp16";
  LossScaler scaler({float(c.initial_loss_scale), 2.0f, 0.5f, c.loss_scale_window});
  if (fp16 && rs.loss_scale > 0) scaler.set_state(rs.loss_scale, rs.clean_steps);
  int skipped_steps = rs.skipped_steps;
  // this rank's micro-batches of a step, loaded before its first backward (and, with several
  // ranks, a scratch batch for the other ranks' micro-batches, which every rank reads past)
  std::vector<Batch> batches(size_t(accum + (R > 1)));
  model.zero_grads();
  const auto t_start = Clock::now();
  long tokens_seen = 0;
  int step = rs.step;
  const int first_step = step;
  auto position = [&]() {
    TrainingPosition p{step, loader.epoch(), loader.position(), res.losses};
    if (fp16) {
      p.loss_scale = scaler.scale();
      p.clean_steps = scaler.clean_steps();
      p.skipped_steps = skipped_steps;
    }
    if (metrics) {  // rank 0's count goes into the manifest; the records it counts are on disk first
      metrics->sync();
      p.metrics_records = metrics->records();
    }
    return p;
  };
  int saved_step = c.resume == "auto" && rs.step > 0 ? rs.step : -1;
  auto checkpoint = [&]() {
    save_sharded_checkpoint(c.output_dir, zero, model.params(), position(), info, &hooks);
    saved_step = step;
  };
  comm.reset_stats();
  if (ledger) model.set_ledger(&*ledger);  // the first step's timeline, layer by layer
  for (; step < total_steps;) {
    if (!unfreeze.empty())
      for (size_t i = 0; i < model.params().size(); ++i) {
        const int layer = model.params()[i].layer, l = layer < 0 ? mc.n_layers - 1 : layer;
        zero.set_frozen(i, !unfreeze.layer_trainable(l, step), unfreeze.lr_factor(l, step));
      }
    const float loss_scale = fp16 ? scaler.scale() : 1.0f;
    // the loss and gradients of the step: the sum over every label token of all ranks' micro-batches
    // divided by their label-token count, all-reduced before the first backward
    double sums[3] = {0, 0, 0};  // label tokens of the whole step, then this rank's loss sum and tokens
    for (int j = 0; j < global_accum; ++j) {
      Batch& b = j / accum == rank ? batches[size_t(j % accum)] : batches.back();
      if (!loader.next(b)) {
        loader.start_epoch(++epoch);
        LT_CHECK(loader.next(b), "the training set yields no batch");
      }
      if (j / accum == rank) sums[0] += b.n_label_tokens;
    }
    comm.allreduce_sum(sums, 1);
    const auto step_labels = int64_t(sums[0]);
    for (int a = 0; a < accum; ++a) {
      const Batch& batch = batches[size_t(a)];
      const int j = rank * accum + a;
      zero.set_last_micro_batch(a == accum - 1);
      const float l = model.forward_backward(batch.tokens.data(), batch.labels.data(), batch.positions.data(),
                                             batch.doc_start.data(), loss_scale,
                                             uint64_t(step) * uint64_t(global_accum) + uint64_t(j), step_labels);
      LT_CHECK(std::isfinite(l), "loss is {} at step {} (micro-batch {}); stopping. The last good checkpoint in {} is "
               "intact; try a lower learning_rate", l, step + 1, j, c.output_dir);
      sums[1] += double(l) * batch.n_label_tokens;
      sums[2] += double(batch.B) * batch.T;
    }
    comm.allreduce_sum(sums + 1, 2);
    const float lr = lr_at(so, step, total_steps);
    // AdamW counts the updates it made; fp16 skips a step whose gradients overflowed
    const float gnorm = zero.step(ao, lr, step + 1 - skipped_steps, float(c.max_grad_norm), loss_scale, fp16);
    const bool apply = !fp16 || scaler.update(std::isfinite(gnorm));
    skipped_steps += !apply;
    if (!apply && lead)
      fmt::print("{}step {:>5}: an fp16 gradient overflowed at loss scale {}; step skipped, scale now {}\n",
                 tty ? "\n" : "", step + 1, loss_scale, scaler.scale());
    model.zero_grads();
    if (step == first_step && ledger) {
      ledger->mark("optimizer");
      model.set_ledger(nullptr);
    }
    ++step;
    const float loss = step_labels ? float(sums[1] / double(step_labels)) : 0.0f;
    if (hooks.on_step_end) hooks.on_step_end(step);
    res.losses.push_back(loss);
    tokens_seen += long(sums[2]);
    const double elapsed = std::chrono::duration<double>(Clock::now() - t_start).count();
    const double tps = tokens_seen / std::max(elapsed, 1e-9);
    const size_t rss = process_rss_bytes();
    nlohmann::json mj = {{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", apply ? gnorm : 0.0f},
                         {"tokens_per_s", tps}, {"rss_bytes", rss}, {"epoch", epoch},
                         {"comm_bytes_per_step", double(comm.stats().total()) / (step - rs.step)}};
    if (fp16) mj["loss_scale"] = loss_scale;
    if (!apply) mj["skipped"] = true;
    log_metric(mj);
    if (lead)
      print_step_progress({step, total_steps, loss, lr, apply ? gnorm : 0.0f, tps,
                           elapsed / (step - rs.step) * (total_steps - step), rss}, tty, c.logging_steps);
    if (evaluates && c.eval_steps > 0 && step % c.eval_steps == 0 && step < total_steps)
      if (float e = evaluate(); lead && std::isfinite(e)) {
        res.eval_losses.push_back(e);
        fmt::print("{}step {:>5}  eval loss {:.4f}  perplexity {:.2f}\n", tty ? "\n" : "", step, e, std::exp(e));
        log_metric({{"step", step}, {"eval_loss", e}, {"eval_ppl", std::exp(e)}});
      }
    if (c.save_steps > 0 && step % c.save_steps == 0) checkpoint();
  }
  if (tty) fmt::print("\n");
  const double step_comm = double(comm.stats().total()) / std::max(1, step - rs.step);
  if (lead && tokens_seen > 0) {
    const double s = std::chrono::duration<double>(Clock::now() - t_start).count();
    fmt::print("throughput: {:.0f} tokens/s over {} rank{} ({:.1f} s); {:.0f} bytes communicated per step per rank\n",
               tokens_seen / s, R, R > 1 ? "s" : "", s, double(comm.stats().total()) / std::max(1, step - rs.step));
  }
  // the final checkpoint before the final evaluation's record, so that a resume from it logs that once
  if (saved_step != step) checkpoint();
  if (float fe = evaluates ? evaluate() : NAN; lead && std::isfinite(fe)) {
    res.eval_losses.push_back(fe);
    res.last_eval_loss = fe;
    fmt::print("step {:>5}  eval loss {:.4f}  perplexity {:.2f}\n", step, fe, std::exp(fe));
    log_metric({{"step", step}, {"eval_loss", fe}, {"eval_ppl", std::exp(fe)}});
  }
  if (metrics) metrics->close();
  // the ledgers before the outputs: writing a full model at stage 3 gathers it whole on rank 0
  write_rank_ledger(c.output_dir, rank_plan, model, zero, rank, step_comm, baseline + data_bytes);
  if (lead) {
    write_ledger(c.output_dir, rank_plan, *ledger, baseline, data_bytes, &zero.arenas());
    print_memory_summary(rank_plan, baseline, data_bytes);
  }
  // the trained tensors: the model's, or at stage 3 gathered unit by unit (every rank takes part)
  std::vector<float> gathered;
  if (zo.stage == 3) {
    if (lead) gathered.resize(zero.layout().total);
    for (int u = 0; u < zero.units(); ++u) {
      if (zero.unit_begin(u) == zero.unit_end(u)) continue;
      const float* slot = zero.acquire_params(u, -1);
      if (lead) std::copy(slot, slot + (zero.unit_end(u) - zero.unit_begin(u)), gathered.begin() + ptrdiff_t(zero.unit_begin(u)));
      zero.release_params(u);
    }
  }
  if (lead) {  // the same outputs as one process (train/run_outputs.h)
    write_trained_model(c, single_plan, model, files.tensors, [&](size_t i) -> const float* {
      return zo.stage == 3 ? gathered.data() + zero.layout().offset[i] : model.params()[i].p;
    });
    fmt::print("report: {}\n", write_training_report(c.output_dir));
  }
  comm.barrier();
  res.steps = step;
  return res;
}

}  // namespace

ZeroOptions zero_options(const TrainConfig& c) {
  ZeroOptions z;
  z.stage = std::max(0, c.zero_stage);
  z.offload = parse_optimizer_offload(c.offload_optimizer);
  z.offload_dir = c.offload_dir;
  z.overlap = c.zero_overlap;
  return z;
}

TrainResult run_training_zero(const TrainConfig& config, const ZeroOptions& zero, Communicator& comm,
                              const TrainHooks& hooks) {
  if (comm.size() == 1) return run(config, zero, comm, hooks);
  try {
    return run(config, zero, comm, hooks);
  } catch (const std::exception& e) {
    // one rank's error would leave the others waiting in a collective: end the whole job
    std::fprintf(stderr, "error on rank %d of %d: %s\n", comm.rank(), comm.size(), e.what());
    comm.abort(1);
  }
  return {};  // not reached: abort() does not return
}

}  // namespace lt
