// ISA-independent CPU training kernels and the train_ops_cpu() tables.
// embedding_backward and the bias reduction of matmul_backward split the work by column chunks,
// so no two threads touch one element and every element sums its tokens in order t = 0..T-1:
// results are deterministic whatever the thread count. rope_backward uses ref's f32 expressions
// (this file is built without FMA), so it is bit-identical to ref/backward_rope.cpp.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/profiler.h"
#include "kernels/profiled_ops.h"
#include "kernels/cpu/attention_stored_ds.h"
#include "kernels/cpu/attention_workspace.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::cpu {

namespace {
constexpr int kColChunk = 64;                // columns per work item of the column-split reductions
constexpr size_t kTrainParallelMin = 1 << 15;     // below this many elements, stay on one thread
}  // namespace

void embedding_backward(float* dtable, const float* dout, const int* tokens, int T, int C) {
  for (int t = 0; t < T; t++) LT_ASSERT(tokens[t] >= 0);
  int nchunk = (C + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if ((size_t)T * C >= kTrainParallelMin && nchunk > 1)
  for (int b = 0; b < nchunk; b++) {
    int c0 = b * kColChunk, c1 = c0 + kColChunk < C ? c0 + kColChunk : C;
    for (int t = 0; t < T; t++) {
      float* row = dtable + (size_t)tokens[t] * C;  // (C)
      const float* dt = dout + (size_t)t * C;       // (C)
      for (int c = c0; c < c1; c++) row[c] += dt[c];
    }
  }
}

namespace {

// Token t's head gradients dt (NH, HS) rotated back by its pairs' angles (cs, sn: HS/2 each).
void unrotate_heads(float* dt, const float* cs, const float* sn, int NH, int HS, bool interleaved) {
  const int half = HS / 2;
  for (int h = 0; h < NH; h++) {
    float* dh = dt + (size_t)h * HS;  // (HS)
    if (interleaved) {
      for (int i = 0; i < half; i++) {
        float d0 = dh[2 * i], d1 = dh[2 * i + 1];
        dh[2 * i] = d0 * cs[i] + d1 * sn[i];
        dh[2 * i + 1] = d1 * cs[i] - d0 * sn[i];
      }
    } else {
      float* lo = dh;
      float* hi = dh + half;
      for (int i = 0; i < half; i++) {
        float d0 = lo[i], d1 = hi[i];
        lo[i] = d0 * cs[i] + d1 * sn[i];
        hi[i] = d1 * cs[i] - d0 * sn[i];
      }
    }
  }
}

}  // namespace

void rope_backward(float* dx, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved) {
  constexpr int kMaxHalf = 512;
  int half = HS / 2;
  if (half > kMaxHalf) return ref::rope_backward(dx, pos, inv_freq, T, NH, HS, interleaved);
#pragma omp parallel for schedule(static) if ((size_t)T * NH * HS >= (1 << 14))
  for (int t = 0; t < T; t++) {
    float cs[kMaxHalf], sn[kMaxHalf];  // (HS/2) cos and sin of this token's angles
    for (int i = 0; i < half; i++) {
      float angle = (float)pos[t] * inv_freq[i];
      cs[i] = std::cos(angle);
      sn[i] = std::sin(angle);
    }
    unrotate_heads(dx + (size_t)t * NH * HS, cs, sn, NH, HS, interleaved);
  }
}

void rope_apply_backward(float* dx, const float* cos_sin, int T, int NH, int HS, bool interleaved) {
  const int half = HS / 2;
#pragma omp parallel for schedule(static) if ((size_t)T * NH * HS >= (1 << 14))
  for (int t = 0; t < T; t++)
    unrotate_heads(dx + (size_t)t * NH * HS, cos_sin + (size_t)t * half, cos_sin + ((size_t)T + t) * half, NH, HS,
                   interleaved);
}

void matmul_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w, int T,
                     int IC, int OC) {
  if (T <= 0) return;
  // dx (T, IC) += dout (T, OC) · w (OC, IC)
  if (dx) gemm_f32(false, false, T, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dx, IC);
  // dw (OC, IC) += dout (T, OC)ᵀ · x (T, IC)
  if (dw) gemm_f32(true, false, OC, IC, T, 1.0f, dout, OC, x, IC, 1.0f, dw, IC);
  if (db) {
    int nchunk = (OC + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if ((size_t)T * OC >= kTrainParallelMin && nchunk > 1)
    for (int b = 0; b < nchunk; b++) {
      int o0 = b * kColChunk, o1 = o0 + kColChunk < OC ? o0 + kColChunk : OC;
      float acc[kColChunk] = {};  // column sums of this chunk, tokens in order
      for (int t = 0; t < T; t++) {
        const float* dt = dout + (size_t)t * OC;  // (OC)
        for (int o = o0; o < o1; o++) acc[o - o0] += dt[o];
      }
      for (int o = o0; o < o1; o++) db[o] += acc[o - o0];
    }
  }
}

// The linear op's input gradient with the decoding loops of ISA I (kernels/cpu/linear.cpp).
template <Isa I>
void linear_backward_input_isa(float* dx, const float* dout, int T, const LinearWeights& w, const LinearScratch& s) {
  linear_backward_input(I, dx, dout, T, w, s);
}
template <Isa I>
void linear_backward_weight_isa(const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                                const LinearWeights& w, const LinearScratch& s) {
  linear_backward_weight(I, g, dout, in, xa, w, s);
}

}  // namespace lt::cpu

namespace lt {

static TrainOps make_train_ops(Isa isa) {
  TrainOps ops{};
  ops.embedding_backward = cpu::embedding_backward;
  ops.rope_backward = cpu::rope_backward;
  ops.rope_apply_backward = cpu::rope_apply_backward;
  ops.matmul_backward = cpu::matmul_backward;
  ops.lm_head_loss = cpu::lm_head_loss;
  cpu::fill_gemma_train_ops(ops);
  switch (isa) {
    case Isa::Scalar:
      ops.name = "train-cpu-scalar";
      ops.linear_backward_input = cpu::linear_backward_input_isa<Isa::Scalar>;
      ops.linear_backward_weight = cpu::linear_backward_weight_isa<Isa::Scalar>;
      cpu::scalar::fill_train_ops(ops);
      break;
    case Isa::Avx2:
      ops.name = "train-cpu-avx2";
      ops.linear_backward_input = cpu::linear_backward_input_isa<Isa::Avx2>;
      ops.linear_backward_weight = cpu::linear_backward_weight_isa<Isa::Avx2>;
      cpu::avx2::fill_train_ops(ops);
      break;
    case Isa::Avx512:
      ops.name = "train-cpu-avx512";
      ops.linear_backward_input = cpu::linear_backward_input_isa<Isa::Avx512>;
      ops.linear_backward_weight = cpu::linear_backward_weight_isa<Isa::Avx512>;
      cpu::avx512::fill_train_ops(ops);
      if (cpu_features().avx512_bf16) {  // else null: TrainModel runs the f32 kernels on rounded values
        ops.attention_train_forward_bf16 = cpu::avx512::attention_train_forward_bf16;
        ops.attention_backward_bf16 = cpu::avx512::attention_backward_bf16;
        if (amx_bf16_kernels()) {  // the AMX tile kernels (head sizes a multiple of 32; the rest go on to AVX-512)
          ops.attention_train_forward_bf16 = cpu::amx::attention_train_forward_bf16;
          ops.attention_backward_bf16 = cpu::amx::attention_backward_bf16;
        }
      }
      break;
  }
  return ops;
}

const TrainOps& train_ops_cpu_for(Isa isa) {
  static const TrainOps tables[3] = {make_train_ops(Isa::Scalar), make_train_ops(Isa::Avx2),
                                     make_train_ops(Isa::Avx512)};
  LT_CHECK(cpu_supports(isa), "train_ops_cpu_for: this CPU ({}) cannot run the {} kernels", cpu_features_string(),
           isa_name(isa));
  return tables[(int)isa];
}

size_t attention_ds_rows_bytes(int T, int seq, int NH, size_t elem_bytes) {
  if (T <= 0 || seq <= 0 || NH <= 0) return 0;
  std::vector<int> start(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) start[size_t(t)] = t - t % seq;
  const size_t bytes = size_t(NH) * cpu::stored_ds_offsets(nullptr, start.data(), T, cpu::kStoredDsTile) * elem_bytes;
  return bytes <= cpu::kMaxStoredDsBytes ? bytes : 0;
}

size_t attention_workspace_bytes(int T, int NH, int NKV, int HS, bool bf16) {
  if (T <= 0 || NH <= 0 || NKV <= 0 || HS <= 0) return 0;
  return cpu::attention_workspace_bytes_for(T, NH, NKV, HS, bf16);
}

namespace {
thread_local cpu::AttentionWorkspace t_attention_workspace;  // bind_attention_workspace's, per thread
}

void bind_attention_workspace(void* buf, size_t bytes) {
  t_attention_workspace = buf ? cpu::AttentionWorkspace{static_cast<char*>(buf), bytes} : cpu::AttentionWorkspace{};
}

namespace cpu {
AttentionWorkspace bound_attention_workspace() { return t_attention_workspace; }
}  // namespace cpu

const TrainOps& train_ops_cpu() {
  return prof::routed() ? train_ops_profiled(train_ops_cpu_for(cpu_isa())) : train_ops_cpu_for(cpu_isa());
}

}  // namespace lt
