// grad_check.h: one TrainModel forward + backward (and optionally one AdamW step) with the
// gradients and parameters saved under their PEFT / HF names.
#include "leantune/grad_check.h"

#include <fmt/format.h>

#include "api/guard.h"
#include "core/error.h"
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
  o.micro_batch = a.batch;
  o.seq_len = a.seq;
  o.loss_chunk = 37;  // deliberately not dividing B*T
  lt::parse_checkpointing(a.checkpointing, o);
  return o;
}

// One AdamW step over every tensor (every tensor decays, as torch.optim.AdamW(model.parameters()) does).
void adamw_once(lt::TrainModel& m, float lr, float weight_decay) {
  std::vector<lt::ParamGroup> groups;
  for (auto& p : m.params()) {
    lt::ParamGroup g;
    g.param = p.p; g.grad = p.g; g.m = p.m; g.v = p.v; g.n = p.n;
    groups.push_back(g);
  }
  lt::AdamWOptions ao;
  ao.weight_decay = weight_decay;
  lt::adamw_step(groups, ao, lr, 1);
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
    m.zero_grads();
    const float loss = m.forward_backward(a.tokens.data(), labels.data(), pos.data(), doc.data(), 1.0f, 0);
    std::vector<lt::TensorInfo> out;
    for (const auto& p : m.params()) {
      lt::TensorInfo t;
      t.name = p.name;
      t.dtype = lt::DType::F32;
      t.shape = p.shape;
      t.data = p.g;
      t.nbytes = p.n * sizeof(float);
      out.push_back(t);
    }
    lt::save_safetensors(out_dir + "/grads.safetensors", out);
    if (a.adamw_lr > 0) {
      adamw_once(m, a.adamw_lr, a.weight_decay);
      for (size_t i = 0; i < out.size(); ++i) out[i].data = m.params()[i].p;
      lt::save_safetensors(out_dir + "/params.safetensors", out);
    }
    lt::write_text_file_atomic(out_dir + "/loss.txt", fmt::format("{:.9g}\n", loss));
    return GradCheckResult{loss, m.params().size(), uint64_t(m.trainable_count())};
  });
}

}  // namespace leantune
