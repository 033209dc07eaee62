// The Trainer and plans (include/leantune/trainer.h, plan.h). The Python package drives a run step
// by step (leantune/_train.py), so Ctrl-C ends it between two steps, where the last published
// checkpoint is whole; the engine's callbacks (metrics records, progress) call back into Python
// with the GIL taken again.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "bindings.h"
#include "leantune/plan.h"
#include "leantune/trainer.h"

namespace leantune_py {

using namespace nb::literals;

namespace {

// A Trainer with Python callbacks. The engine's std::functions capture only `this` (its address in
// the Python object is fixed), so copying them never touches a Python reference count.
struct PyTrainer {
  std::unique_ptr<leantune::Trainer> trainer;
  PendingError pending;
  nb::object on_metrics = nb::none(), on_progress = nb::none();

  leantune::Trainer& t() {
    if (!trainer) throw nb::value_error("this Trainer has finished");
    return *trainer;
  }
  void connect() {
    trainer->on_metrics([this](const std::string& record) {
      nb::gil_scoped_acquire gil;
      if (!on_metrics.is_none()) pending.run([&] { on_metrics(to_str(record)); });
    });
    trainer->on_progress([this](const leantune::TrainProgress& p) {
      nb::gil_scoped_acquire gil;
      if (on_progress.is_none()) return;
      pending.run([&] {
        nb::dict d;
        d["step"] = p.step;
        d["total_steps"] = p.total_steps;
        d["loss"] = p.loss;
        d["lr"] = p.lr;
        d["grad_norm"] = p.grad_norm;
        d["tokens_per_s"] = p.tokens_per_s;
        d["eta_s"] = p.eta_s;
        d["rss_bytes"] = p.rss_bytes;
        on_progress(d);
      });
    });
  }
};

nb::dict step_dict(const leantune::TrainStep& s) {
  nb::dict d;
  d["step"] = s.step;
  d["loss"] = s.loss;
  d["lr"] = s.lr;
  d["grad_norm"] = s.grad_norm;
  d["applied"] = s.applied;
  d["tokens"] = s.tokens;
  d["seconds"] = s.seconds;
  return d;
}

nb::dict summary_dict(const leantune::TrainSummary& s) {
  nb::dict d;
  d["losses"] = s.losses;
  d["eval_losses"] = s.eval_losses;
  d["first_eval_loss"] = s.first_eval_loss;
  d["last_eval_loss"] = s.last_eval_loss;
  d["steps"] = s.steps;
  d["output_dir"] = s.output_dir;
  return d;
}

void bind_trainer(nb::module_& m) {
  nb::class_<PyTrainer>(m, "Trainer", "A training run (leantune::Trainer), driven step by step.")
      .def("__init__", [](PyTrainer* self, const std::string& yaml_file, const std::string& yaml_text,
                          const std::vector<std::string>& flags, bool print) {
             leantune::TrainerConfig c;
             c.yaml_file = yaml_file;
             c.yaml_text = yaml_text;
             c.flags = flags;
             c.print = print;
             PendingError none;
             auto trainer = without_gil(none, [&] { return std::make_unique<leantune::Trainer>(c); });
             auto* p = new (self) PyTrainer();
             p->trainer = std::move(trainer);
             p->connect();
           }, "yaml_file"_a, "yaml_text"_a, "flags"_a, "print"_a)
      .def("set_callbacks", [](PyTrainer& p, nb::object on_metrics, nb::object on_progress) {
             p.on_metrics = std::move(on_metrics);
             p.on_progress = std::move(on_progress);
           }, "on_metrics"_a.none(), "on_progress"_a.none())
      .def("resume", [](PyTrainer& p, const std::string& checkpoint) {
             without_gil(p.pending, [&] { p.t().resume(checkpoint); });
           }, "checkpoint"_a = "auto")
      .def("step", [](PyTrainer& p) { return step_dict(without_gil(p.pending, [&] { return p.t().step(); })); })
      .def("evaluate", [](PyTrainer& p) { return without_gil(p.pending, [&] { return p.t().evaluate(); }); })
      .def("save", [](PyTrainer& p) { without_gil(p.pending, [&] { p.t().save(); }); })
      .def("finish", [](PyTrainer& p) {
             nb::dict d = summary_dict(without_gil(p.pending, [&] { return p.t().finish(); }));
             p.trainer.reset();  // the run's memory goes now, not when Python collects this object
             return d;
           })
      .def_prop_ro("done", [](PyTrainer& p) { return p.t().done(); })
      .def_prop_ro("steps_taken", [](PyTrainer& p) { return p.t().steps_taken(); })
      .def_prop_ro("total_steps", [](PyTrainer& p) { return p.t().total_steps(); })
      .def_prop_ro("output_dir", [](PyTrainer& p) { return p.t().output_dir(); });
}

nb::dict cost_dict(const leantune::CostEstimate& c) {
  nb::dict d;
  d["forward_flops"] = c.forward_flops;
  d["backward_flops"] = c.backward_flops;
  d["recompute_flops"] = c.recompute_flops;
  d["gemm_gflops"] = c.gemm_gflops;
  d["threads"] = c.threads;
  d["step_tokens"] = c.step_tokens;
  d["step_seconds"] = c.step_seconds;
  d["tokens"] = c.tokens;
  d["cpu_hours"] = c.cpu_hours;
  d["cpu_cost_usd"] = c.cpu_cost_usd;
  nb::list gpus;
  for (const auto& g : c.gpus) {
    nb::dict e;
    e["name"] = g.gpu.name;
    e["fits"] = g.fits;
    e["hours"] = g.hours;
    e["usd_per_1k_tokens"] = g.usd_per_1k_tokens;
    gpus.append(e);
  }
  d["gpus"] = gpus;
  d["text"] = leantune::format_cost_estimate(c);
  return d;
}

// The plan's fields besides its memory (which comes as `leantune plan --json` text under "json").
nb::dict plan_dict(const leantune::TrainingPlan& p) {
  nb::dict d;
  d["base_model"] = p.base_model;
  d["method"] = p.method;
  d["checkpointing"] = p.checkpointing;
  d["lora_r"] = p.lora_r;
  d["micro_batch_size"] = p.micro_batch_size;
  d["sequence_len"] = p.sequence_len;
  d["gradient_accumulation_steps"] = p.gradient_accumulation_steps;
  d["max_steps"] = p.max_steps;
  d["zero_stage"] = p.zero_stage;
  d["table"] = p.memory.format_table(false);
  d["json"] = leantune::to_json(p, true);
  if (p.cost) d["cost"] = cost_dict(*p.cost);
  if (!p.rank_report.empty()) {
    nb::list rows;
    for (const auto& r : p.rank_report) {
      nb::dict e;
      e["targets"] = r.targets;
      e["r"] = r.r;
      e["max_rank"] = r.max_rank;
      e["trainable_params"] = r.trainable_params;
      e["bytes"] = r.bytes;
      e["flops_increase_percent"] = r.flops_increase_percent;
      rows.append(e);
    }
    d["rank_report"] = rows;
    d["rank_report_text"] = leantune::format_rank_report(p.rank_report);
  }
  if (p.zero) d["zero_text"] = leantune::format_zero_plan(p);
  if (p.adaptive_rank) d["adaptive_rank_text"] = leantune::format_adaptive_rank_plan(*p.adaptive_rank);
  return d;
}

}  // namespace

void bind_train(nb::module_& m) {
  bind_trainer(m);
  m.def("plan", [](const std::string& yaml_file, const std::string& yaml_text, const std::vector<std::string>& flags,
                   bool cost_estimate, double tokens, double price_per_hour, const std::vector<std::string>& gpus,
                   bool rank_report, int zero_ranks, bool measure_baseline, const std::string& html) {
          leantune::TrainerConfig c;
          c.yaml_file = yaml_file;
          c.yaml_text = yaml_text;
          c.flags = flags;
          leantune::TrainingPlanOptions o;
          o.cost_estimate = cost_estimate;
          o.tokens = tokens;
          o.price_per_hour = price_per_hour;
          for (const auto& g : gpus) o.gpus.push_back(leantune::find_gpu_profile(g));
          o.rank_report = rank_report;
          o.zero_ranks = zero_ranks;
          o.measure_baseline = measure_baseline;
          PendingError none;
          leantune::TrainingPlan p = without_gil(none, [&] {
            leantune::TrainingPlan plan = leantune::plan_training_config(c, o);
            if (!html.empty()) leantune::write_plan_html(plan, html);
            return plan;
          });
          return plan_dict(p);
        }, "yaml_file"_a, "yaml_text"_a, "flags"_a, nb::kw_only(), "cost_estimate"_a = false, "tokens"_a = 0.0,
        "price_per_hour"_a = 0.0, "gpus"_a = std::vector<std::string>{}, "rank_report"_a = false, "zero_ranks"_a = 0,
        "measure_baseline"_a = true, "html"_a = "");
  m.def("plan_inference", [](const std::string& model, int context, int prefill_block, const std::string& quantization,
                             bool measure_baseline) {
          leantune::InferencePlanOptions o;
          o.sequence = {.context = context, .prefill_block = prefill_block};
          o.quantization = leantune::parse_quantization(quantization);
          o.measure_baseline = measure_baseline;
          PendingError none;
          leantune::InferencePlan p = without_gil(none, [&] { return leantune::plan_inference(model, o); });
          nb::dict d;
          d["json"] = leantune::to_json(p);
          d["table"] = p.memory.format_table(false);
          return d;
        }, "model"_a, nb::kw_only(), "context"_a = 0, "prefill_block"_a = 0, "quantization"_a = "none",
        "measure_baseline"_a = true);
}

}  // namespace leantune_py
