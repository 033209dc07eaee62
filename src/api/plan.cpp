// plan.h: the engine's memory plans (core/memory_plan.h), inference and training plans, the
// actuary and rank report (plan/flops.h) and the ZeRO rank plan (dist/zero.h) as public data; the
// formats convert back to the engine's types so that each table has one formatter.
#include "leantune/plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "api/access.h"
#include "api/guard.h"
#include "api/serve_options.h"
#include "api/trainer_config.h"
#include "core/error.h"
#include "core/memory_plan.h"
#include "dist/zero.h"
#include "plan/budget.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "leantune/machine.h"
#include "model/llama_model.h"
#include "plan/baseline.h"
#include "plan/flops.h"
#include "train/adaptive_rank.h"
#include "train/report.h"
#include "train/train_config.h"
#include "train/train_model.h"
#include "train/training_data.h"

namespace leantune {

static_assert(kNumBufferCategories == int(lt::kNumCategories));

namespace {

MemoryPlan public_plan(const lt::MemoryPlan& p) {
  MemoryPlan out;
  out.buffers.reserve(p.buffers.size());
  for (const auto& b : p.buffers)
    out.buffers.push_back({b.name, BufferCategory(int(b.cat)), b.bytes, BufferLifetime(int(b.life))});
  return out;
}

lt::MemoryPlan engine_plan(const MemoryPlan& p) {
  lt::MemoryPlan out;
  for (const auto& b : p.buffers) out.add(b.name, lt::Category(int(b.category)), b.bytes, lt::Lifetime(int(b.lifetime)));
  return out;
}

// {category name: arena bytes} of the non-empty categories.
nlohmann::json category_json(const lt::MemoryPlan& p) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t k = 0; k < lt::kNumCategories; ++k)
    if (size_t n = p.arena_bytes(lt::Category(k))) j[std::string(lt::category_name(lt::Category(k)))] = n;
  return j;
}

lt::GpuProfile engine_gpu(const GpuProfile& g) {
  return {g.name, g.memory_gib, g.bf16_tflops, g.bandwidth_gbs, g.price_per_hour};
}
GpuProfile public_gpu(const lt::GpuProfile& g) {
  return {g.name, g.memory_gib, g.bf16_tflops, g.bandwidth_gbs, g.price_per_hour};
}

CostEstimate public_cost(const lt::ActuaryEstimate& e) {
  CostEstimate c;
  c.forward_flops = e.flops.forward;
  c.backward_flops = e.flops.backward;
  c.recompute_flops = e.flops.recompute;
  c.gemm_gflops = e.gemm_gflops;
  c.threads = e.threads;
  c.step_tokens = e.step_tokens;
  c.step_seconds = e.step_seconds;
  c.tokens = e.tokens;
  c.cpu_hours = e.cpu_hours;
  c.cpu_price_per_hour = e.cpu_price_per_hour;
  c.cpu_cost_usd = e.cpu_cost_usd;
  for (const auto& g : e.gpus) c.gpus.push_back({public_gpu(g.gpu), g.fits, g.hours, g.usd_per_1k_tokens});
  return c;
}

lt::ActuaryEstimate engine_cost(const CostEstimate& c) {
  lt::ActuaryEstimate e;
  e.flops = {c.forward_flops, c.backward_flops, c.recompute_flops};
  e.gemm_gflops = c.gemm_gflops;
  e.threads = c.threads;
  e.step_tokens = c.step_tokens;
  e.step_seconds = c.step_seconds;
  e.tokens = c.tokens;
  e.cpu_hours = c.cpu_hours;
  e.cpu_price_per_hour = c.cpu_price_per_hour;
  e.cpu_cost_usd = c.cpu_cost_usd;
  for (const auto& g : c.gpus) e.gpus.push_back({engine_gpu(g.gpu), g.fits, g.hours, g.usd_per_1k_tokens});
  return e;
}

lt::ZeroOptions engine_zero(const ZeroPlan& z) {
  lt::ZeroOptions o;
  o.stage = z.stage;
  o.overlap = z.overlap;
  o.offload = z.offload_to_disk ? lt::OptimizerOffload::Disk : lt::OptimizerOffload::None;
  return o;
}

ZeroPlan zero_plan(const lt::MemoryPlan& single, int n_layers, int ranks, const lt::ZeroOptions& o) {
  ZeroPlan z;
  z.stage = o.stage;
  z.ranks = ranks;
  z.overlap = o.overlap;
  z.offload_to_disk = o.offload == lt::OptimizerOffload::Disk;
  z.n_layers = n_layers;
  const lt::ZeroTensors t = lt::zero_tensors(single, n_layers);
  z.trainable_floats = t.total;
  z.shard_floats = (t.total + size_t(ranks) - 1) / size_t(ranks);
  z.largest_unit_floats = t.unit_max;
  z.overlap_slot_floats = o.overlap ? t.layer_max : 0;
  z.per_rank = public_plan(lt::plan_zero_rank(single, n_layers, ranks, o));
  z.engine_buffers = public_plan(lt::plan_zero_state(t, ranks, o)).buffers;
  z.offloaded_bytes = lt::zero_offloaded_bytes(t.total, ranks, o);
  return z;
}

}  // namespace

std::string_view category_name(BufferCategory c) { return lt::category_name(lt::Category(int(c))); }
std::string_view lifetime_name(BufferLifetime l) { return lt::lifetime_name(lt::Lifetime(int(l))); }

size_t MemoryPlan::category_bytes(BufferCategory c) const {
  return detail::guard([&] { return engine_plan(*this).arena_bytes(lt::Category(int(c))); });
}
size_t MemoryPlan::arena_bytes() const {
  return detail::guard([&] { return engine_plan(*this).total_bytes(); });
}
std::string MemoryPlan::format_table(bool per_buffer) const {
  return detail::guard([&] { return engine_plan(*this).format_table(per_buffer); });
}

size_t process_baseline_bytes(int threads) {
  return detail::guard([&] {
    detail::ThreadScope scope(resolve_threads(threads));
    return lt::process_baseline_bytes();
  });
}

size_t probe_process_baseline(int threads) {
  return detail::guard([&] {
    detail::ThreadScope scope(resolve_threads(threads));
    return lt::measure_baseline_in_this_process();
  });
}

InferencePlan plan_inference(const std::string& model_path, const InferencePlanOptions& options) {
  return detail::guard([&] {
    InferencePlan out;
    if (options.measure_baseline) out.baseline_bytes = process_baseline_bytes(options.threads);
    const lt::ModelConfig mc = lt::load_model_config(model_path);
    lt::validate_config(mc, model_path);
    lt::InferenceOptions io;
    io.context = options.sequence.context;
    io.prefill_block = options.sequence.prefill_block;
    io.quantization = detail::engine_quantization(options.quantization);
    io.double_quant = options.double_quant;
    detail::apply_weights(options.weights, options.quantization, io);
    lt::resolve_inference_options(mc, io);
    const lt::MemoryPlan p = lt::plan_inference(mc, io);
    out.context = io.context;
    out.prefill_block = io.prefill_block;
    out.memory = public_plan(p);
    out.predicted_peak_bytes = options.measure_baseline ? p.total_bytes() + out.baseline_bytes : 0;
    return out;
  });
}

std::string to_json(const InferencePlan& plan) {
  return detail::guard([&] {
    const lt::MemoryPlan p = engine_plan(plan.memory);
    nlohmann::json j;
    j["categories"] = category_json(p);
    j["context"] = plan.context;
    j["prefill_block"] = plan.prefill_block;
    j["arena_bytes"] = p.total_bytes();
    j["baseline_bytes"] = plan.baseline_bytes;
    j["predicted_peak_bytes"] = plan.predicted_peak_bytes;
    return j.dump(1);
  });
}

ServePlan plan_serve(const std::string& model_path, const EngineOptions& options, const std::string& draft_path) {
  return detail::guard([&] {
    const lt::ModelConfig mc = lt::load_model_config(model_path);
    lt::validate_config(mc, model_path);
    std::optional<lt::ModelConfig> dc;
    if (!draft_path.empty()) {
      dc = lt::load_model_config(draft_path);
      lt::validate_config(*dc, draft_path);
    }
    const lt::ModelConfig* draft = dc ? &*dc : nullptr;
    const lt::SchedulerOptions so =
        lt::resolve_scheduler_options(mc, detail::scheduler_options(mc, options, draft), draft);
    lt::MemoryPlan p;
    auto weights = [&p](const lt::ModelConfig& c, const std::string& prefix) {
      lt::InferenceOptions io;
      lt::resolve_inference_options(c, io);
      for (const auto& b : lt::plan_inference(c, io).buffers)
        if (b.cat == lt::Category::FrozenWeights || b.cat == lt::Category::MappedWeights)
          p.add(prefix + b.name, b.cat, b.bytes, b.life);
    };
    weights(mc, "");
    if (draft) weights(*draft, "draft.");
    const lt::MemoryPlan eng = lt::plan_scheduler(mc, so, draft);
    for (const auto& b : eng.buffers) p.add(b.name, b.cat, b.bytes, b.life);
    if (options.adapter_memory_bytes > 0)
      p.add("adapters.resident", lt::Category::FrozenWeights, options.adapter_memory_bytes);
    ServePlan out;
    out.context = so.max_context;
    out.block_size = so.block_size;
    out.kv_blocks = so.num_blocks;
    out.max_seqs = so.max_seqs;
    out.engine_bytes = eng.total_bytes();
    out.memory = public_plan(p);
    return out;
  });
}

std::string to_json(const ServePlan& plan) {
  return detail::guard([&] {
    const lt::MemoryPlan p = engine_plan(plan.memory);
    nlohmann::json j;
    j["categories"] = category_json(p);
    j["context"] = plan.context;
    j["block_size"] = plan.block_size;
    j["kv_blocks"] = plan.kv_blocks;
    j["max_seqs"] = plan.max_seqs;
    j["engine_bytes"] = plan.engine_bytes;
    j["arena_bytes"] = p.total_bytes();
    return j.dump(1);
  });
}

std::vector<GpuProfile> gpu_profiles() {
  std::vector<GpuProfile> out;
  for (const auto& g : lt::gpu_profiles()) out.push_back(public_gpu(g));
  return out;
}

GpuProfile find_gpu_profile(const std::string& name) {
  return detail::guard([&] { return public_gpu(lt::find_gpu_profile(name)); });
}

std::string format_cost_estimate(const CostEstimate& c) {
  return detail::guard([&] { return lt::format_actuary(engine_cost(c)); });
}

std::string format_rank_report(const std::vector<RankReportRow>& rows) {
  return detail::guard([&] {
    std::vector<lt::RankRow> e;
    for (const auto& r : rows)
      e.push_back({r.targets, r.r, r.max_rank, size_t(r.trainable_params), r.bytes, r.flops_increase_percent});
    return lt::format_rank_rows(e);
  });
}

// Adaptive rank: the plan at lora_r (p) against the same run at lora_target_r.
static AdaptiveRankPlan adaptive_rank_plan(const lt::ModelConfig& mc, lt::TrainModelOptions o, const lt::MemoryPlan& p,
                                           int target_r) {
  AdaptiveRankPlan a;
  a.init_r = o.lora.r;
  a.target_r = target_r;
  o.lora.r = target_r;
  o.adaptive_rank = false;  // a fixed-rank run at target_r
  const lt::MemoryPlan p1 = lt::plan_training(mc, o);
  using C = lt::Category;
  a.trainable_params_init = p.arena_bytes(C::TrainableParams) / sizeof(float);
  a.trainable_params_final = p1.arena_bytes(C::TrainableParams) / sizeof(float);
  a.gradient_bytes_init = p.arena_bytes(C::Grads);
  a.gradient_bytes_final = p1.arena_bytes(C::Grads);
  a.optimizer_bytes_init = p.arena_bytes(C::OptimizerState);
  a.optimizer_bytes_final = p1.arena_bytes(C::OptimizerState);
  for (const auto& b : p.buffers)  // the plan's rows of adaptive rank's state (optimizer state above)
    if (b.name.starts_with("rank_ema") || b.name.starts_with("rank_mask.")) a.importance_bytes += b.bytes;
  a.optimizer_bytes_after_release_bound = lt::released_optimizer_bound(p, a.init_r, target_r);
  return a;
}

std::string format_adaptive_rank_plan(const AdaptiveRankPlan& a) {
  return detail::guard([&] {
    std::string t = fmt::format("adaptive rank: r {} -> average {} per module (A, B and their gradients keep r {} "
                                "for the run, pruned components zeroed; at the final budget the AdamW moments of "
                                "pruned components and the importance state are released; the saved adapter is "
                                "truncated)\n", a.init_r, a.target_r, a.init_r);
    const char* row = "{:<22} {:>14} {:>14}\n";
    t += fmt::format(fmt::runtime(row), "", fmt::format("r={}", a.init_r), fmt::format("final r={}", a.target_r));
    t += fmt::format(fmt::runtime(row), "trainable parameters", a.trainable_params_init, a.trainable_params_final);
    t += fmt::format("{:<22} {:>14} {:>14}\n", "gradients", lt::format_bytes(a.gradient_bytes_init),
                     lt::format_bytes(a.gradient_bytes_final));
    t += fmt::format("{:<22} {:>14} {:>14}\n", "optimizer state", lt::format_bytes(a.optimizer_bytes_init),
                     lt::format_bytes(a.optimizer_bytes_final));
    t += fmt::format("{:<22} {:>14}  (two EMAs per LoRA entry and masks, planned rows)\n", "importance state",
                     lt::format_bytes(a.importance_bytes));
    t += fmt::format("{:<22} {:>14} {:>14}  (this run's optimizer arena before / after the release; after: at most, "
                     "the budget in the widest modules; ledger.json measures it)\n", "optimizer released",
                     lt::format_bytes(a.optimizer_bytes_init), "<= " + lt::format_bytes(a.optimizer_bytes_after_release_bound));
    return t;
  });
}

TrainingPlan plan_training(const std::vector<std::string>& train_args, const TrainingPlanOptions& options) {
  return detail::guard([&] { return plan_training_config(TrainerConfig::from_args(train_args), options); });
}

// Long because it follows `leantune train`'s order step by step (config, threads, baseline, model
// config, data, budget fit, plan) and then fills each optional part the options ask for.
TrainingPlan plan_training_config(const TrainerConfig& config, const TrainingPlanOptions& options) {
  return detail::guard([&] {
    lt::TrainConfig cfg = lt::read_trainer_config(config);
    LT_CHECK(!cfg.base_model.empty(), "plan: 'base_model' is required");
    detail::ThreadScope scope(resolve_threads(cfg.threads));
    TrainingPlan out;
    out.baseline_bytes = options.measure_baseline ? lt::process_baseline_bytes() : 0;
    const lt::ModelConfig mc = lt::load_model_config(cfg.base_model);  // a folder needs only config.json
    lt::validate_config(mc, cfg.base_model);
    // the data category: the same tokenizer and dataset loading as train (nothing of the model)
    if (!cfg.datasets.empty()) out.data_bytes = lt::training_data_bytes(lt::load_training_data(cfg), cfg);
    cfg = lt::fit_memory_budget(cfg, mc, out.baseline_bytes + out.data_bytes);  // throws the fits when over
    const lt::TrainModelOptions o = lt::train_model_options(cfg);
    const lt::MemoryPlan p = lt::plan_training(mc, o);
    out.base_model = cfg.base_model;
    out.method = lt::method_name(cfg.method);
    out.checkpointing = cfg.gradient_checkpointing;
    out.lora_r = cfg.lora.r;
    out.micro_batch_size = cfg.micro_batch_size;
    out.sequence_len = cfg.sequence_len;
    out.gradient_accumulation_steps = cfg.gradient_accumulation_steps;
    out.max_steps = cfg.max_steps;
    out.zero_stage = cfg.zero_stage;
    out.memory = public_plan(p);
    out.predicted_peak_bytes = p.total_bytes() + out.data_bytes + out.baseline_bytes;
    if (options.cost_estimate) {
      double tokens = options.tokens;
      if (tokens <= 0)
        tokens = double(cfg.micro_batch_size) * cfg.sequence_len * cfg.gradient_accumulation_steps *
                 std::max(cfg.max_steps, 1);
      std::vector<lt::GpuProfile> gpus;
      for (const auto& g : options.gpus) gpus.push_back(engine_gpu(g));
      out.cost = public_cost(lt::actuary_estimate(mc, o, out.predicted_peak_bytes, tokens, options.price_per_hour,
                                                  gpus));
    }
    if (options.rank_report)
      for (const auto& r : lt::rank_rows(mc, o))
        out.rank_report.push_back({r.targets, r.r, r.max_rank, r.params, r.bytes, r.flops_increase_percent});
    if (cfg.lora_rank_policy == "adaptive" && cfg.lora_target_r >= 1 && cfg.lora_target_r < cfg.lora.r)
      out.adaptive_rank = adaptive_rank_plan(mc, o, p, cfg.lora_target_r);
    if (options.zero_ranks > 0 || cfg.zero_stage >= 0)
      out.zero = zero_plan(p, mc.n_layers, std::max(1, options.zero_ranks), lt::zero_options(cfg));
    return out;
  });
}

// {category: bytes} with the data and the baseline, as the report and the HTML chart read it.
static nlohmann::json planned_json(const TrainingPlan& plan) {
  nlohmann::json planned = category_json(engine_plan(plan.memory));
  if (plan.data_bytes) planned["data"] = plan.data_bytes;
  planned["baseline"] = plan.baseline_bytes;
  return planned;
}

std::string to_json(const TrainingPlan& plan, bool buffers) {
  return detail::guard([&] {
    nlohmann::json j;
    j["categories"] = planned_json(plan);
    j["arena_bytes"] = plan.memory.arena_bytes();
    j["data_bytes"] = plan.data_bytes;
    j["baseline_bytes"] = plan.baseline_bytes;
    j["predicted_peak_bytes"] = plan.predicted_peak_bytes;
    j["peak_phase"] = "end of the first step (every arena resident)";
    if (const auto& a = plan.adaptive_rank)
      j["adaptive_rank"] = {{"init_r", a->init_r}, {"target_r", a->target_r},
                            {"trainable_params_init", a->trainable_params_init},
                            {"trainable_params_final", a->trainable_params_final},
                            {"gradient_bytes_init", a->gradient_bytes_init},
                            {"gradient_bytes_final", a->gradient_bytes_final},
                            {"optimizer_bytes_init", a->optimizer_bytes_init},
                            {"optimizer_bytes_final", a->optimizer_bytes_final},
                            {"importance_bytes", a->importance_bytes},
                            {"optimizer_bytes_after_release_bound", a->optimizer_bytes_after_release_bound}};
    if (buffers)
      for (const auto& b : plan.memory.buffers)
        j["buffers"].push_back({{"name", b.name}, {"category", category_name(b.category)}, {"bytes", b.bytes},
                                {"lifetime", lifetime_name(b.lifetime)}});
    return j.dump(1);
  });
}

std::string format_zero_plan(const TrainingPlan& plan) {
  return detail::guard([&] {
    LT_CHECK(plan.zero.has_value(), "format_zero_plan: the plan has no ZeRO part (set zero_ranks or zero_stage)");
    const ZeroPlan& z = *plan.zero;
    return lt::format_zero_plan(engine_plan(plan.memory), z.n_layers, z.ranks, engine_zero(z));
  });
}

void write_plan_html(const TrainingPlan& plan, const std::string& path) {
  detail::guard([&] {
    std::string doc = "<!doctype html><html><head><meta charset='utf-8'><title>leantune memory plan</title>"
                      "<style>body{font-family:sans-serif;margin:24px} svg{margin:8px;background:#fafafa} "
                      "td,th{padding:2px 10px;text-align:right} td:first-child{text-align:left}</style></head><body>";
    doc += fmt::format("<h1>leantune memory plan</h1><p>{}: {} {}, micro-batch {} x {} tokens, checkpointing {}; "
                       "predicted peak {}</p>", plan.base_model, plan.method,
                       plan.method == "lora" ? fmt::format("r={}", plan.lora_r) : "", plan.micro_batch_size,
                       plan.sequence_len, plan.checkpointing, lt::format_bytes(plan.predicted_peak_bytes));
    doc += lt::memory_plan_html(planned_json(plan), nullptr) + "</body></html>\n";
    lt::write_text_file_atomic(path, doc);
  });
}

}  // namespace leantune
