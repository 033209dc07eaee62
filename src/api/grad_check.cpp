// grad_check.h: one TrainModel forward + backward (and optionally one AdamW step) with the
// gradients and parameters saved under their PEFT / HF names.
#include "leantune/grad_check.h"

#include <fmt/format.h>

#include "api/guard.h"
#include "core/error.h"
#include "core/lora_config.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "kernels/backward.h"
#include "leantune/machine.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace leantune {

namespace {

lt::TrainModelOptions train_options(const GradCheckOptions& a) {
  lt::TrainModelOptions o;
  o.method = lt::parse_method(a.method);
  o.lora.r = a.lora_r;
  o.lora.alpha = a.lora_alpha;
  o.lora.use_rslora = a.use_rslora;
  o.lora.target_modules = a.target_modules;
  o.lora.bias = a.lora_bias;
  o.lora.use_dora = a.use_dora;
  o.lora.init = lt::parse_lora_init(a.init_lora_weights, "init_lora_weights");
  o.loraplus_lr_ratio = a.loraplus_lr_ratio;
  o.seed = a.seed;
  o.micro_batch = a.batch;
  o.seq_len = a.seq;
  o.loss_chunk = 37;  // deliberately not dividing B*T
  lt::parse_checkpointing(a.checkpointing, o);
  return o;
}

// AdamW step `step` over every tensor with the training run's groups: decay on all but biases and
// norms, lr times each tensor's lr_factor (LoRA+).
void adamw_once(lt::TrainModel& m, float lr, float weight_decay, int step) {
  std::vector<lt::ParamGroup> groups;
  for (auto& p : m.params()) {
    lt::ParamGroup g;
    g.param = p.p; g.grad = p.g; g.m = p.m; g.v = p.v; g.n = p.n;
    g.weight_decay = p.decay;
    g.lr_factor = p.lr_factor;
    groups.push_back(g);
  }
  lt::AdamWOptions ao;
  ao.weight_decay = weight_decay;
  lt::adamw_step(groups, ao, lr, step);
}

// The trainable tensors as they are now (data pointers into the model).
std::vector<lt::TensorInfo> param_tensors(lt::TrainModel& m, bool grads) {
  std::vector<lt::TensorInfo> out;
  for (const auto& p : m.params()) {
    lt::TensorInfo t;
    t.name = p.name;
    t.dtype = lt::DType::F32;
    t.shape = p.shape;
    t.data = grads ? p.g : p.p;
    t.nbytes = p.n * sizeof(float);
    out.push_back(t);
  }
  return out;
}

// init.safetensors: the trainable tensors, and after PiSSA / OLoRA the residual base weights.
void save_init(lt::TrainModel& m, const std::string& path) {
  std::vector<lt::TensorInfo> ts = param_tensors(m, false);
  if (m.options().method == lt::Method::Lora && m.options().lora.mutates_base())
    for (int l = 0; l < m.config().n_layers; ++l)
      for (lt::Proj p : lt::kProjs) {
        float *A, *B;
        m.lora_tensors(l, lt::proj_module(p), &A, &B);
        if (!A) continue;
        const auto [in, out] = m.config().linear_shape(p);
        lt::TensorInfo t;
        t.name = fmt::format("model.layers.{}.{}.{}.weight", l, lt::llama_module_parent(lt::proj_module(p)),
                             lt::proj_module(p));
        t.dtype = lt::DType::F32;
        t.shape = {out, in};
        t.data = m.weight(t.name);
        t.nbytes = size_t(in * out) * sizeof(float);
        ts.push_back(t);
      }
  lt::save_safetensors(path, ts);
}

}  // namespace

GradCheckResult run_grad_check(const GradCheckOptions& a, const std::string& out_dir) {
  return detail::guard([&] {
    detail::ThreadScope threads(resolve_threads(a.threads));
    LT_CHECK(a.batch > 0 && a.seq > 0, "grad check: batch {} and seq {} must be positive", a.batch, a.seq);
    const size_t N = size_t(a.batch) * a.seq;
    LT_CHECK(a.tokens.size() == N, "grad check: {} token ids given; batch × seq is {}", a.tokens.size(), N);
    LT_CHECK(a.labels.empty() || a.labels.size() == N, "grad check: {} labels given; batch × seq is {}",
             a.labels.size(), N);
    auto files = lt::load_model_files(a.model);
    lt::TrainModel m(files.config, files.tensors, train_options(a), lt::ops_cpu());
    if (!a.adapter.empty()) {
      lt::TensorSet ad;
      ad.source = a.adapter;
      lt::load_safetensors(a.adapter + "/adapter_model.safetensors", ad);
      m.load_lora(ad);
    }
    std::vector<int> labels = a.labels, pos(N), doc(N);
    if (labels.empty()) {
      labels.assign(N, lt::kIgnoreLabel);
      for (size_t i = 0; i < N; ++i)
        if ((i + 1) % a.seq != 0) labels[i] = a.tokens[i + 1];
    }
    for (size_t i = 0; i < N; ++i) {
      pos[i] = int(i % a.seq);
      doc[i] = int(i - i % a.seq);
    }
    LT_CHECK(a.adamw_steps >= 1, "grad check: adamw_steps {} must be >= 1", a.adamw_steps);
    save_init(m, out_dir + "/init.safetensors");
    float loss = 0;
    std::string losses;
    for (int step = 1; step <= (a.adamw_lr > 0 ? a.adamw_steps : 1); ++step) {
      m.zero_grads();
      const float l = m.forward_backward(a.tokens.data(), labels.data(), pos.data(), doc.data(), 1.0f, 0);
      losses += fmt::format("{:.9g}\n", l);
      if (step == 1) {
        loss = l;
        lt::save_safetensors(out_dir + "/grads.safetensors", param_tensors(m, true));
      }
      if (a.adamw_lr > 0) adamw_once(m, a.adamw_lr, a.weight_decay, step);
    }
    if (a.adamw_lr > 0) {
      lt::save_safetensors(out_dir + "/params.safetensors", param_tensors(m, false));
      lt::write_text_file_atomic(out_dir + "/losses.txt", losses);
    }
    lt::write_text_file_atomic(out_dir + "/loss.txt", fmt::format("{:.9g}\n", loss));
    return GradCheckResult{loss, m.params().size(), uint64_t(m.trainable_count())};
  });
}

}  // namespace leantune
