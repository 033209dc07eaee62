// `leantune grad`: a test and debugging aid for training parity. Loads a model (and optionally a
// PEFT adapter's A/B), runs one forward + backward over B rows of T token ids (each row its own
// document; labels = next token, last position ignored, or from --labels), and writes the loss
// and every trainable tensor's gradient (PEFT / HF names) to OUT/grads.safetensors + OUT/loss.txt.
#include <cstdio>
#include <fmt/format.h>

#include "commands.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/atomic_file.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "kernels/backward.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace lt::cli {

static std::vector<int> read_i32(const std::string& path, size_t n) {
  std::vector<int> v(n);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  LT_CHECK(f, "{}: cannot open", path);
  size_t got = std::fread(v.data(), sizeof(int), n, f);
  std::fclose(f);
  LT_CHECK(got == n, "{}: expected {} int32 values, read {}", path, n, got);
  return v;
}

void add_grad_command(CLI::App& app) {
  struct Args {
    std::string model, adapter, tokens, labels, out, method = "lora", ckpt = "none", lora_bias = "none";
    std::vector<std::string> targets = {"all-linear"};
    int B = 1, T = 0, r = 8, threads = 0;
    float alpha = 16, dropout = 0, adamw_lr = 0, weight_decay = 0.01f;
    bool rslora = false;
  };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("grad", "One forward+backward; write loss and gradients (testing aid)");
  c->add_option("--model,-m", a->model, "model path")->required();
  c->add_option("--adapter", a->adapter, "PEFT adapter folder whose A/B to start from");
  c->add_option("--tokens", a->tokens, "B*T int32 token ids (raw file)")->required();
  c->add_option("--labels", a->labels, "B*T int32 labels (raw file; default next token)");
  c->add_option("--batch", a->B, "rows B")->check(CLI::PositiveNumber);
  c->add_option("--seq", a->T, "tokens per row T")->required()->check(CLI::PositiveNumber);
  c->add_option("--method", a->method, "lora | full");
  c->add_option("--lora-r", a->r, "rank");
  c->add_option("--lora-alpha", a->alpha, "alpha");
  c->add_flag("--rslora", a->rslora, "alpha / sqrt(r) scaling");
  c->add_option("--lora-target-modules", a->targets, "modules");
  c->add_option("--lora-bias", a->lora_bias, "none | all | lora_only: which biases LoRA trains (PEFT's bias)");
  c->add_option("--checkpointing", a->ckpt, "none | every | every:K");
  c->add_option("--threads,-t", a->threads, "threads");
  c->add_option("--out,-o", a->out, "output folder")->required();
  c->add_option("--adamw-lr", a->adamw_lr, "then take one AdamW step at this lr and write params.safetensors");
  c->add_option("--weight-decay", a->weight_decay, "AdamW weight decay (torch default 0.01)");
  c->callback([a] {
    set_num_threads(a->threads);
    auto files = load_model_files(a->model);
    TrainModelOptions o;
    o.method = a->method;
    o.lora.r = a->r;
    o.lora.alpha = a->alpha;
    o.lora.use_rslora = a->rslora;
    o.lora.target_modules = a->targets;
    o.lora.bias = a->lora_bias;
    o.micro_batch = a->B;
    o.seq_len = a->T;
    o.loss_chunk = 37;  // deliberately not dividing B*T
    parse_checkpointing(a->ckpt, o);
    TrainModel m(files.config, files.tensors, o, ops_cpu());
    if (!a->adapter.empty()) {
      TensorSet ad;
      ad.source = a->adapter;
      load_safetensors(a->adapter + "/adapter_model.safetensors", ad);
      m.load_lora(ad);
    }
    const size_t N = size_t(a->B) * a->T;
    auto tokens = read_i32(a->tokens, N);
    std::vector<int> labels(N, kIgnoreLabel), pos(N), doc(N);
    if (!a->labels.empty()) {
      labels = read_i32(a->labels, N);
    } else {
      for (size_t i = 0; i < N; ++i)
        if ((i + 1) % a->T != 0) labels[i] = tokens[i + 1];
    }
    for (size_t i = 0; i < N; ++i) {
      pos[i] = int(i % a->T);
      doc[i] = int(i - i % a->T);
    }
    m.zero_grads();
    float loss = m.forward_backward(tokens.data(), labels.data(), pos.data(), doc.data(), 1.0f, 0);
    std::vector<TensorInfo> out;
    for (const auto& p : m.params()) {
      TensorInfo t;
      t.name = p.name;
      t.dtype = DType::F32;
      t.shape = p.shape;
      t.data = p.g;
      t.nbytes = p.n * sizeof(float);
      out.push_back(t);
    }
    save_safetensors(a->out + "/grads.safetensors", out);
    if (a->adamw_lr > 0) {
      std::vector<ParamGroup> groups;
      for (auto& p : m.params()) {
        ParamGroup g;
        g.param = p.p; g.grad = p.g; g.m = p.m; g.v = p.v; g.n = p.n;
        groups.push_back(g);  // every tensor decays, as torch.optim.AdamW(model.parameters()) does
      }
      AdamWOptions ao;
      ao.weight_decay = a->weight_decay;
      adamw_step(groups, ao, a->adamw_lr, 1);
      for (size_t i = 0; i < out.size(); ++i) out[i].data = m.params()[i].p;
      save_safetensors(a->out + "/params.safetensors", out);
    }
    write_text_file_atomic(a->out + "/loss.txt", fmt::format("{:.9g}\n", loss));
    fmt::print("loss {:.6f}, {} trainable tensors, {} parameters\n", loss, m.params().size(), m.trainable_count());
  });
}

}  // namespace lt::cli
