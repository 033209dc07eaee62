// leantune::Trainer (include/leantune/trainer.h) over the training loop (train/train_loop.h) with
// the services of api/run_training.h.
#include "leantune/trainer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/demo.h"
#include "api/run_training.h"
#include "api/trainer_config.h"
#include "core/profiler.h"
#include "train/train_config.h"

namespace leantune {

struct Trainer::Impl {
  std::function<void(const TrainProgress&)> progress;
  std::function<void(const std::string&)> metrics, ledger;
  FaultInjection faults;
  std::string profile_trace;
  lt::Communicator* comm = nullptr;
  std::unique_ptr<lt::TrainLoop> loop;

  // the loop's callbacks forward to these members, so they can be set after construction
  lt::TrainHooks hooks() {
    lt::TrainHooks h;
    h.on_step_end = [this](int s) { if (faults.after_step) faults.after_step(s); };
    h.on_checkpoint_written = [this](int s) { if (faults.checkpoint_written) faults.checkpoint_written(s); };
    h.on_checkpoint_saved = [this](int s) { if (faults.checkpoint_published) faults.checkpoint_published(s); };
    return h;
  }
  lt::RunWatchers watchers(bool print) {
    lt::RunWatchers w;
    w.print = print;
    w.on_progress = [this](const lt::StepProgress& p) {
      if (progress) progress({p.step, p.total_steps, p.loss, p.lr, p.grad_norm, p.tokens_per_s, p.eta_s, p.rss_bytes});
    };
    w.on_metrics = [this](const nlohmann::json& j) { if (metrics) metrics(j.dump()); };
    w.on_ledger = [this](const std::string& j) { if (ledger) ledger(j); };
    return w;
  }
  // fn on the run's ranks: an error on one of several ends the job (api/run_training.h)
  template <class F>
  auto collective(F&& fn) {
    if (!comm) return fn();
    decltype(fn()) r{};
    lt::run_collectively(*comm, [&] { r = fn(); });
    return r;
  }
  TrainSummary summary(const lt::TrainResult& r) {
    TrainSummary s{r.losses, r.eval_losses, r.first_eval_loss, r.last_eval_loss, r.steps, r.output_dir, {}};
    if (!profile_trace.empty()) {
      lt::prof::stop();
      lt::prof::write_trace(profile_trace);
      s.profile_table = lt::prof::table();
    }
    return s;
  }
};

Trainer::Trainer(const TrainerConfig& config) : impl_(std::make_unique<Impl>()) {
  const lt::TrainConfig cfg = lt::read_trainer_config(config);
  lt::RunServices services = lt::training_services(cfg);
  impl_->comm = services.comm;
  impl_->profile_trace = config.profile_trace;
  if (!config.profile_trace.empty()) {  // before the model is built: its op table is the timed one
    lt::prof::route(true);
    lt::prof::start();
  }
  impl_->collective([&] {
    impl_->loop = std::make_unique<lt::TrainLoop>(cfg, std::move(services), impl_->hooks(), impl_->watchers(config.print));
    return 0;
  });
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

void Trainer::on_progress(std::function<void(const TrainProgress&)> fn) { impl_->progress = std::move(fn); }
void Trainer::on_metrics(std::function<void(const std::string&)> fn) { impl_->metrics = std::move(fn); }
void Trainer::on_ledger(std::function<void(const std::string&)> fn) { impl_->ledger = std::move(fn); }
void Trainer::set_fault_injection(FaultInjection faults) { impl_->faults = std::move(faults); }

void Trainer::resume(const std::string& checkpoint) { impl_->loop->resume(checkpoint); }

TrainStep Trainer::step() {
  const lt::StepStats s = impl_->collective([&] { return impl_->loop->step(); });
  return {s.step, s.loss, s.lr, s.grad_norm, s.applied, s.tokens, s.seconds};
}

float Trainer::evaluate() {
  return impl_->collective([&] { return impl_->loop->evaluate(); });
}

void Trainer::save() {
  impl_->collective([&] {
    impl_->loop->save_checkpoint();
    return 0;
  });
}

bool Trainer::done() const { return impl_->loop->done(); }
int Trainer::steps_taken() const { return impl_->loop->step_count(); }
int Trainer::total_steps() const { return impl_->loop->total_steps(); }
const std::string& Trainer::output_dir() const { return impl_->loop->config().output_dir; }
size_t Trainer::trainable_parameters() const { return impl_->loop->model().trainable_count(); }

TrainSummary Trainer::finish() {
  return impl_->summary(impl_->collective([&] { return impl_->loop->finish(); }));
}

TrainSummary Trainer::run() {
  return impl_->summary(impl_->collective([&] { return impl_->loop->run(); }));
}

void run_demo(const DemoOptions& o) {
  lt::DemoOptions d;
  d.dir = o.dir;
  d.synthetic = o.synthetic;
  d.pretrain_steps = o.pretrain_steps;
  d.lora_steps = o.lora_steps;
  d.threads = o.threads;
  d.model = o.model;
  d.tokenizer = o.tokenizer;
  d.data = o.data;
  d.prompt = o.prompt;
  lt::run_demo(d);
}

}  // namespace leantune
