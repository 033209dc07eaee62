// The RunServices of a training run and whole runs (api/run_training.h).
#include "api/run_training.h"

#include <cstdio>
#include <fmt/format.h>

#include "core/error.h"
#include "dist/comm.h"
#include "plan/baseline.h"
#include "plan/budget.h"
#include "plan/flops.h"
#include "plan/peak.h"
#include "train/local_strategy.h"

namespace lt {

namespace {

// baseline, FLOPs and peak: what every run's services share
RunServices common_services() {
  RunServices s;
  s.baseline_bytes = [] { return process_baseline_bytes(); };
  s.flops_per_token = [](const ModelConfig& m, const TrainModelOptions& o) {
    const PhaseFlops f = training_flops_per_token(m, o);
    return FlopsPerToken{f.forward + f.backward, f.total()};
  };
  s.peak_flops = [](Precision p) {
    const MfuPeak m = mfu_peak(p == Precision::BF16);
    const std::string_view u = m.unit;
    return PeakRate{m.gflops * 1e9, u == "amx_bf16" ? "AMX bf16" : u == "avx512_bf16" ? "AVX512-BF16" : "f32 FMA"};
  };
  return s;
}

}  // namespace

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

RunServices local_services() {
  RunServices s = common_services();
  s.setup = [](const TrainConfig& requested, const ModelConfig& m, size_t fixed) {
    // the budget counts the data as planned for the requested batch shape (auto only shrinks it)
    return RunSetup{fit_memory_budget(requested, m, fixed), std::make_unique<LocalStrategy>()};
  };
  return s;
}

RunServices zero_services(const ZeroOptions& zero, Communicator& comm) {
  RunServices s = common_services();
  s.comm = &comm;
  s.setup = [zero, &comm](const TrainConfig& c, const ModelConfig& m, size_t fixed) {
    const MemoryPlan single = plan_training(m, train_model_options(c));
    const ZeroOptions zo = fit_zero_budget(c, single, m.n_layers, comm.size(), zero, fixed);
    return RunSetup{c, make_zero_strategy(single, m.n_layers, comm, zo)};
  };
  return s;
}

RunServices training_services(const TrainConfig& c) {
  if (c.zero_stage >= 0 || world().size() > 1) return zero_services(zero_options(c), world());
  return local_services();
}

void run_collectively(Communicator& comm, const std::function<void()>& fn) {
  if (comm.size() == 1) return fn();
  try {
    fn();
  } catch (const std::exception& e) {
    // one rank's error would leave the others waiting in a collective: end the whole job
    std::fflush(stdout);
    std::fprintf(stderr, "error on rank %d of %d: %s\n", comm.rank(), comm.size(), e.what());
    comm.abort(1);
  }
}

TrainResult run_training(const TrainConfig& config, const TrainHooks& hooks) {
  if (config.zero_stage >= 0 || world().size() > 1) return run_training_zero(config, zero_options(config), world(), hooks);
  return run_training_single(config, hooks);
}

TrainResult run_training_single(const TrainConfig& config, const TrainHooks& hooks) {
  return TrainLoop(config, local_services(), hooks).run();
}

TrainResult run_training_zero(const TrainConfig& config, const ZeroOptions& zero, Communicator& comm,
                              const TrainHooks& hooks) {
  TrainResult r;
  run_collectively(comm, [&] { r = TrainLoop(config, zero_services(zero, comm), hooks).run(); });
  return r;
}

}  // namespace lt
