// leantune::run_sweep: measured LoRA sweeps (`leantune sweep`). A grid of config overrides, e.g.
// "lora_r=4,8,16,32,64;lora_target_modules=attn,mlp,all-linear;lora_alpha=r,2r", is expanded into
// its cartesian product and each configuration is trained in turn, in this process, by the one
// training loop (the same as `leantune train` with those flags: a configuration's losses equal a
// single run's bit for bit at the same thread count). The base model is loaded once: the first run
// maps its files and converts its frozen weights (16-bit, quantized, f32), which are then kept
// read-only and lent to every later run, each allocating only its own adapter, optimizer and
// activation memory; a configuration that changes the frozen weights' format (precision,
// quantization) converts them again, and PiSSA / OLoRA, which rewrite them, convert their own. Each run is measured — held-out loss before
// and after, trainable parameters, peak RSS (the process's high-water mark is reset before each
// run) against the plan's prediction, tokens/s, wall time and its price — and the sweep writes
// sweep.jsonl, sweep.csv, sweep.md (also returned) and sweep.html (charts: held-out loss against
// trainable parameters, time and peak memory with the Pareto front, and per configuration), with
// what the grid says about α/r, the target modules and rank against cost, the Pareto front (held-out
// loss against price) and a recommendation.
//
// Usage:
//   leantune::SweepOptions o;
//   o.yaml_file = "run.yaml";
//   o.grid = "lora_r=4,8;lora_alpha=r,2r";
//   o.out_dir = "sweep-out";
//   leantune::SweepResult r = leantune::run_sweep(o);
//   for (const auto& row : r.rows) use(row.label, row.eval_loss, row.trainable_params);
//
// Grid values: numbers and words are passed as the flag's value; lora_alpha also takes multiples of
// the row's lora_r ("r", "2r", "0.5r"); lora_target_modules also takes "attn" (q,k,v,o_proj), "mlp"
// (gate,up,down_proj) and lists joined by '+' ("q_proj+v_proj"). Errors: leantune::Error naming the
// grid part or the configuration (and its flag) that is wrong.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "leantune/error.h"

namespace leantune {

struct SweepOptions {
  std::string yaml_file;           // the base `leantune train` config ("": defaults and flags only)
  std::vector<std::string> flags;  // overrides applied before each configuration's
  std::string grid;                // "key=v1,v2;key2=w1,w2"
  std::string out_dir = "sweep-out";  // each run in out_dir/run-NN, the tables and report here
  double price_per_hour = 0;       // US dollars per hour of this machine (0: prices are 0, cost is time)
  double loss_tolerance = 0.01;    // the recommendation: cheapest within this fraction of the best loss
  bool print = true;               // each run's progress and the table on stdout
};

struct SweepRow {
  std::string label;                                     // "lora_r=8 lora_alpha=2r"
  std::vector<std::pair<std::string, std::string>> grid;  // the grid's values, as written
  std::vector<std::string> flags;                        // the flags the run was given
  std::string output_dir;
  int lora_r = 0;
  double lora_alpha = 0;
  std::string target_modules;                            // as resolved ("q_proj,k_proj,...")
  size_t trainable_params = 0;
  int steps = 0;
  float first_eval_loss = 0, eval_loss = 0, train_loss = 0;  // held out before / after; the last step's
  long tokens = 0;
  double seconds = 0;           // the whole run's wall time (evaluations and outputs included)
  double train_seconds = 0;     // forward, backward and optimizer of every step
  double tokens_per_s = 0;      // tokens / train_seconds
  size_t peak_rss_bytes = 0, predicted_peak_bytes = 0;
  double usd = 0;               // seconds · price_per_hour
  double loss_reduction = 0;    // first_eval_loss - eval_loss
  double loss_reduction_per_hour = 0;
  bool pareto = false;          // no other run is both cheaper (time) and better (held-out loss)
  bool base_loaded = false;     // this run loaded the base model's files (the sweep's first run does)
  bool frozen_converted = false;  // this run converted the frozen weights (else it borrowed the previous run's)
};

struct SweepResult {
  std::vector<SweepRow> rows;
  int recommended = -1;         // index into rows
  std::string markdown;         // sweep.md's text
  int base_loads = 0;           // times the base model's files were loaded (1: once for the whole sweep)
  int frozen_conversions = 0;   // times its frozen weights were converted (more when the grid changes their format)
};

SweepResult run_sweep(const SweepOptions& options);

}  // namespace leantune
