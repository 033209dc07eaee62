// The training loop's evaluation, metrics, checkpoints and end of run (train/train_loop.h).
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/threads.h"
#include "train/report.h"
#include "train/train_loop.h"

namespace fs = std::filesystem;

namespace lt {

float TrainLoop::evaluate() {
  start();
  if (!evaluates_) return NAN;
  double sum = 0;
  long n = 0;
  for (const auto& b : eval_batches_) {
    if (!b.n_label_tokens) continue;
    const float l = model_->forward_loss(b.tokens.data(), b.labels.data(), b.positions.data(), b.doc_start.data());
    sum += double(l) * b.n_label_tokens;
    n += b.n_label_tokens;
  }
  return n ? float(sum / double(n)) : NAN;
}

// rank 0: an evaluation's loss in the results, on stdout and (record) in metrics.jsonl
void TrainLoop::log_eval(float loss, bool record, bool newline) {
  if (!lead_) return;
  result_.eval_losses.push_back(loss);
  say(fmt::format("{}step {:>5}  eval loss {:.4f}  perplexity {:.2f}\n", newline ? "\n" : "", step_, loss,
                  std::exp(loss)));
  if (record) log_metric({{"step", step_}, {"eval_loss", loss}, {"eval_ppl", std::exp(loss)}});
}

void TrainLoop::log_metric(const nlohmann::json& record) {
  if (!lead_) return;
  if (metrics_) metrics_->append(record);
  if (watchers_.on_metrics) watchers_.on_metrics(record);
}

void TrainLoop::save_checkpoint() {
  start();
  if (synthetic_) return;
  TrainerState st{step_, loader_->epoch(), loader_->position(), result_.losses};
  if (fp16_) {
    st.loss_scale = scaler_.scale();
    st.clean_steps = scaler_.clean_steps();
    st.skipped_steps = skipped_;
  }
  if (metrics_) {  // rank 0's count; the records it counts are on disk first
    metrics_->sync();
    st.metrics_records = metrics_->records();
  }
  strategy().save_checkpoint(config_.output_dir, st, info_, hooks_);
  saved_step_ = step_;
}

const MemoryPlan& TrainLoop::process_plan() const {
  const MemoryPlan* r = store_->strategy()->rank_plan();
  return r ? *r : model_->plan();
}

// Tokens per second over the steps' compute time (forward, backward and optimizer: no evaluation,
// no checkpoints), the model FLOPs utilization of one rank against this machine's measured peak,
// and with several ranks the bytes each sent per step.
void TrainLoop::print_throughput() {
  if (!lead_ || !watchers_.print || tokens_seen_ <= 0 || compute_seconds_ <= 0) return;
  const int R = comm_->size();
  const double tps = tokens_seen_ / compute_seconds_;
  std::string line = fmt::format("throughput: {:.0f} tokens/s over {:.1f} s of steps{}", tps, compute_seconds_,
                                 R > 1 ? fmt::format(" on {} ranks", R) : "");
  if (services_.flops_per_token && services_.peak_flops) {
    const FlopsPerToken f = services_.flops_per_token(files_.config, model_->options());
    const PeakRate pr = services_.peak_flops(config_.precision);
    const double per_rank = tps / R, peak = pr.flops;
    line += fmt::format("; model FLOPs utilization {:.1f}% of this machine's measured {} peak ({:.0f} GFLOP/s, {} "
                        "threads){}", 100.0 * f.model * per_rank / peak, pr.unit, peak / 1e9, num_threads(),
                        f.with_recompute > f.model
                            ? fmt::format("; with recomputation {:.1f}% of peak", 100.0 * f.with_recompute * per_rank / peak)
                            : "");
  }
  if (R > 1)
    line += fmt::format("; {:.0f} bytes communicated per step per rank",
                        double(comm_->stats().total()) / std::max(1, step_ - first_step_));
  say(line + "\n");
}

// The ledgers first (writing a full model at stage 3 gathers it whole on rank 0), then the trained
// model, then the report drawn from metrics.jsonl and ledger.json.
void TrainLoop::write_outputs() {
  const std::string& out = config_.output_dir;
  const size_t baseline = baseline_bytes_;
  const double step_comm = double(comm_->stats().total()) / std::max(1, step_ - first_step_);
  strategy().write_rank_outputs(out, model_->arenas(), baseline + data_bytes_, step_comm);
  if (lead_) {
    write_ledger(out, process_plan(), *ledger_, baseline, data_bytes_, strategy().engine_arenas(),
                 strategy().rank_allocator());
    if (watchers_.on_ledger) watchers_.on_ledger(read_text_file((fs::path(out) / "ledger.json").string()));
    if (watchers_.print) print_memory_summary(process_plan(), baseline, data_bytes_);
  }
  const TrainedTensorFn trained = strategy().trained_tensors();  // every rank takes part
  if (lead_) {
    write_trained_model(config_, single_plan_, *model_, files_.tensors, trained, watchers_.print,
                        strategy().rank_allocator());
    if (const RankAllocator* ra = strategy().rank_allocator()) {
      const RankReleaseStats& rs = ra->release_stats();
      say(fmt::format("adaptive rank: total rank {} -> {} over {} modules; LoRA parameters {} -> {}; optimizer state {}\n",
                      ra->modules().size() * size_t(ra->options().init_r), ra->active_total(), ra->modules().size(),
                      ra->init_lora_floats(), ra->active_lora_floats(),
                      rs.released ? fmt::format("resident {} -> {} after the release ({} returned; A, B and their "
                                                "gradients keep rank {})", format_bytes(rs.resident_before),
                                                format_bytes(rs.resident_after), format_bytes(rs.released_bytes),
                                                ra->options().init_r)
                                  : "not released (" + (rs.skipped.empty() ? "the budget is not final" : rs.skipped) + ")"));
    }
    const std::string report = write_training_report(out);
    say(fmt::format("report: {}\n", report));
  }
  comm_->barrier();
}

TrainResult TrainLoop::finish() {
  start();
  LT_CHECK(!finished_, "finish: the run has already finished");
  finished_ = true;
  if (tty_) say("\n");
  print_throughput();
  if (!synthetic_) {
    // the final checkpoint before the final evaluation's record, so that a resume from it logs that once
    if (saved_step_ != step_) save_checkpoint();
    if (const float e = evaluate(); lead_ && std::isfinite(e)) {
      result_.last_eval_loss = e;
      log_eval(e, true, false);
    }
    if (metrics_) metrics_->close();
    write_outputs();
  }
  result_.steps = step_;
  return result_;
}

TrainResult TrainLoop::run() {
  start();
  while (!done()) step();
  return finish();
}

}  // namespace lt
