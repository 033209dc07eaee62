// TrainModel on the reference op tables (ops_ref(): every product, the linears' included, on the
// scalar reference kernels) against the fast ones (ops_cpu()), on stories260K: LoRA (with dropout)
// and full fine-tuning in fp32, bf16 and fp16, and QLoRA on NF4 (double quantization) and LLM.int8
// frozen weights (fp32, and bf16 products). Same loss and gradients within a bound derived from f32 rounding:
//
// Every op computes the same formula in both tables and differs only in summation order (and FMA),
// so each result is within 2·γ_K of the other relative to its Σ|terms| (γ_K = K·u/(1-K·u), u = 2^-24,
// K the op's longest reduction: here max(C, F, V, N) = 512). To first order these relative
// perturbations add up along the longest chain of dependent reductions, D: per layer RMSNorm, the
// q/k/v linear, attention (scores and the weighted sum), o, RMSNorm, gate/up, down — 8 — over 5
// layers, plus the final norm, lm_head and log-sum-exp; twice that for the gradients (forward then
// backward): tolerance D·2·γ_K on the loss and 2·D·2·γ_K on each gradient tensor (normwise:
// ‖g_ref - g_cpu‖ / ‖g_ref‖; single elements near zero have no useful relative error).
// 16-bit and int8 kinds round their inputs to a grid (x and dout to bf16 / f16, x to int8 levels)
// of step ulp_q (2^-8 bf16, 2^-11 f16, 1/127 of the row absmax int8). An f32 difference δ between
// the tables flips such a rounding to the neighbouring level for a fraction ~δ/ulp_q of the
// elements, a normwise difference ~sqrt(δ·ulp_q) after the stage, which is the next stage's δ:
// iterated, the difference settles at ~ulp_q per stage, and the stages' independent flips add in
// quadrature: sqrt(D)·ulp_q on the loss, sqrt(2·D)·ulp_q on the gradients, added for those runs.
// (Measured here: f32 runs agree to ~1e-7 in the loss and ~5e-6 in the gradients; bf16 ~2e-2, int8
// ~1e-2, fp16 ~2e-3 on the q_proj LoRA gradients, which go through the attention scores.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "core/profiler.h"
#include "core/quant_spec.h"
#include "core/train_types.h"
#include "io/model_files.h"
#include "kernels/backward.h"
#include "train/train_model.h"

using namespace lt;

namespace {

constexpr int kB = 2, kT = 32;

struct Run {
  float loss;
  std::vector<std::vector<float>> grads;
  std::vector<std::string> names;
};

// One forward/backward of a fixed batch (two documents in row 0); LoRA B set non-zero so that A
// gets a gradient, dropout step 3. gemm_events: the GEMMs (oneDNN) the step called, as the profiler
// counts them (only gemm_f32 / gemm_bf16 record events outside the profiled op tables).
Run run(const Ops& ops, const TrainModelOptions& o, size_t* gemm_events = nullptr) {
  static const ModelFiles files = load_model_files(std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  TrainModel m(files.config, files.tensors, o, ops);
  for (auto& p : m.params())
    if (p.name.find("lora_B") != std::string::npos)
      for (size_t i = 0; i < p.n; ++i) p.p[i] = 0.01f * float(int(i % 7) - 3);
  std::vector<int> tok, lab, pos, doc;
  std::mt19937 rng(11);
  for (int i = 0; i < kB * kT; ++i) {
    tok.push_back(int(rng() % 512));
    pos.push_back(i % kT < 12 ? i % kT : i % kT - 12 * (i < kT));
    doc.push_back(i < kT && i >= 12 ? 12 : i - i % kT);
  }
  for (int i = 0; i < kB * kT; ++i) lab.push_back((i + 1) % kT ? tok[size_t(i) + 1] : kIgnoreLabel);
  m.zero_grads();
  Run r;
  if (gemm_events) prof::start();
  r.loss = m.forward_backward(tok.data(), lab.data(), pos.data(), doc.data(), 1.0f, 3);
  if (gemm_events) {
    prof::stop();
    *gemm_events = prof::recorded_events() + prof::dropped_events();
  }
  for (const auto& p : m.params()) {
    r.grads.emplace_back(p.g, p.g + p.n);
    r.names.push_back(p.name);
  }
  return r;
}

double gamma_n(double n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1 - n * u);
}

// ulp_q: the rounding step of the run's 16-bit / int8 inputs (0: fp32 throughout)
void compare(const TrainModelOptions& o, double ulp_q, const char* what) {
  const Run ref = run(ops_ref(), o), cpu = run(ops_cpu(), o);
  const double L = 5, HS = 8, D = 8 * L + 3, f32 = D * 2 * gamma_n(512);  // stories260K: 5 layers, heads of 8
  // Rounding stages of the loss's chain and of the gradients' (see the top). bf16 attention adds,
  // per layer: q, k, v rounded to bf16 (both tables, a stage of flips in the forward; their
  // gradient passes straight through). On the fast tables only (the bf16 kernels; ref runs the f32
  // kernels on the rounded q, k, v) the kernels also round P in the forward (a stage of u = 2^-8
  // relative per element), and dO, the recomputed P and dS in the backward. Those three enter
  // dS = P ∘ (dP − D), whose dP_j − D = dO · (v_j − o) is a sum of HS terms of both signs: an
  // elementwise relative error u becomes up to u·κ of it, κ = Σ|terms| / |Σ terms|, about sqrt(HS)
  // for terms of random sign; and rounded P and dS no longer keep the exact Σ_j dS_j = 0, so dq,
  // dk pick up the keys' and queries' common component, which the exact dS cancels. Counted as
  // 3 stages of u·sqrt(HS) per layer (HS stages of u each, in quadrature). Measured here: worst
  // gradient 1.9e-2 with f32 attention, 5.1e-2 with the bf16 kernels (bound 6.3e-2).
  double stages_loss = D, stages_grad = 2 * D;
  // bf16 LoRA (bf16_head()) and full bf16 (bf16_head_copy()): the lm_head's input x is rounded to
  // bf16 in the forward and its dlogits in the backward, one more stage of flips in each chain (the
  // lm_head's f32 stage is in D)
  if (bf16_head(ModelConfig{}, o) || bf16_head_copy(ModelConfig{}, o)) stages_loss += 1, stages_grad += 2;
  if (bf16_attention(o)) {
    stages_loss += L, stages_grad += L;
    if (train_ops_cpu().attention_backward_bf16) stages_loss += L, stages_grad += L + 3 * L * HS;
  }
  const double loss_tol = f32 + std::sqrt(stages_loss) * ulp_q;
  const double grad_tol = 2 * f32 + std::sqrt(stages_grad) * ulp_q;
  EXPECT_NEAR(cpu.loss, ref.loss, loss_tol * std::fabs(ref.loss)) << what;
  ASSERT_EQ(ref.grads.size(), cpu.grads.size());
  ASSERT_GT(ref.grads.size(), 0u);
  double worst = 0;
  for (size_t k = 0; k < ref.grads.size(); ++k) {
    double d = 0, n = 0;
    for (size_t i = 0; i < ref.grads[k].size(); ++i) {
      d += std::pow(double(ref.grads[k][i]) - cpu.grads[k][i], 2);
      n += std::pow(double(ref.grads[k][i]), 2);
    }
    ASSERT_GT(n, 0.0) << what << " " << ref.names[k] << ": zero gradient";
    const double e = std::sqrt(d / n);
    worst = std::max(worst, e);
    EXPECT_LE(e, grad_tol) << what << " " << ref.names[k];
  }
  std::printf("%s: loss ref %.7f cpu %.7f (rel %.1e, bound %.1e); worst gradient %.1e (bound %.1e), %zu tensors\n",
              what, ref.loss, cpu.loss, std::fabs(cpu.loss - ref.loss) / ref.loss, loss_tol, worst, grad_tol,
              ref.grads.size());
}

TrainModelOptions options(const char* method, const char* precision, const char* quant = "none",
                          AttentionPrecision attention = AttentionPrecision::F32) {
  TrainModelOptions o;
  o.attention_precision = attention;
  o.method = parse_method(method);
  o.lora.r = 4;
  o.lora.alpha = 8;
  o.lora.dropout = 0.1f;
  o.lora.target_modules = {"all-linear"};
  o.micro_batch = kB;
  o.seq_len = kT;
  o.precision = parse_precision(precision);
  o.quantization = parse_quantization(quant);
  o.double_quant = std::string(quant) == "nf4";
  return o;
}

}  // namespace

TEST(TrainModelRefCpu, LoraFp32) { compare(options("lora", "fp32"), 0, "lora fp32"); }
TEST(TrainModelRefCpu, FullFp32) { compare(options("full", "fp32"), 0, "full fp32"); }
TEST(TrainModelRefCpu, LoraBf16) { compare(options("lora", "bf16"), std::ldexp(1.0, -8), "lora bf16"); }
TEST(TrainModelRefCpu, LoraBf16Attention) {
  compare(options("lora", "bf16", "none", AttentionPrecision::BF16), std::ldexp(1.0, -8), "lora bf16, bf16 attention");
}
TEST(TrainModelRefCpu, FullBf16) { compare(options("full", "bf16"), std::ldexp(1.0, -8), "full bf16"); }
TEST(TrainModelRefCpu, LoraFp16) { compare(options("lora", "fp16"), std::ldexp(1.0, -11), "lora fp16"); }
TEST(TrainModelRefCpu, QloraNf4DoubleQuant) { compare(options("lora", "fp32", "nf4"), 0, "qlora nf4"); }
TEST(TrainModelRefCpu, QloraInt8) { compare(options("lora", "fp32", "int8"), 1.0 / 127, "qlora int8"); }
// QLoRA in bf16: the base's products in bf16 (WeightView::bf16_products), without dropout the LoRA
// products too (LoraView::bf16); with int8 its coarser grid is the step
TEST(TrainModelRefCpu, QloraNf4Bf16) {
  TrainModelOptions o = options("lora", "bf16", "nf4");
  o.lora.dropout = 0;
  compare(o, std::ldexp(1.0, -8), "qlora nf4 bf16");
}
TEST(TrainModelRefCpu, QloraInt8Bf16) { compare(options("lora", "bf16", "int8"), 1.0 / 127, "qlora int8 bf16"); }

// The reference tables run every product on the scalar kernels: a whole training step calls no
// oneDNN GEMM (the fast tables call hundreds), whatever the weights' kind.
TEST(TrainModelRefCpu, ReferenceStepCallsNoGemm) {
  for (const auto& o : {options("lora", "fp32"), options("full", "bf16"), options("lora", "fp16"),
                        options("lora", "fp32", "nf4"), options("lora", "bf16", "int8")}) {
    size_t ref_events = 1, cpu_events = 0;
    run(ops_ref(), o, &ref_events);
    run(ops_cpu(), o, &cpu_events);
    EXPECT_EQ(ref_events, 0u) << method_name(o.method) << " " << precision_name(o.precision) << " " << quantization_name(o.quantization);
    EXPECT_GT(cpu_events, 100u) << method_name(o.method) << " " << precision_name(o.precision) << " " << quantization_name(o.quantization);
  }
}
