// Profiled op tables: the same functions as an inner Ops / TrainOps table, each call wrapped in a
// prof::Scope with its FLOPs and the bytes it must move at least (inputs read, outputs written).
// ops_cpu() / train_ops_cpu() hand these out while prof::routed() is set, so a model built after
// `--profile` was asked for is measured op by op; recording itself is prof::start()/stop().
#include "kernels/profiled_ops.h"

#include <algorithm>

#include "core/profiler.h"

namespace lt {

namespace {

const Ops* g_in = nullptr;
const TrainOps* g_tin = nullptr;
constexpr double F = 4;  // bytes per f32

// Query-key pairs the document-masked causal attention computes: query t sees doc_start[t]..t.
double attended_pairs(const int* doc_start, int T) {
  double n = 0;
  for (int t = 0; t < T; ++t) n += double(t - doc_start[t] + 1);
  return n;
}

void embedding_forward(float* out, const int* tokens, const float* table, int T, int C) {
  prof::Scope s("embedding_forward", 0, 2.0 * F * T * C);
  g_in->embedding_forward(out, tokens, table, T, C);
}
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int T, int C, float eps) {
  prof::Scope s("rmsnorm_forward", 4.0 * T * C, F * (2.0 * T * C + C));
  g_in->rmsnorm_forward(out, rstd, x, w, T, C, eps);
}
void rope_forward(float* x, const int* pos, const float* inv_freq, int T, int NH, int HS, bool il) {
  prof::Scope s("rope_forward", 3.0 * T * NH * HS, 2.0 * F * T * NH * HS);
  g_in->rope_forward(x, pos, inv_freq, T, NH, HS, il);
}
void rope_table(float* cos_sin, const int* pos, const float* inv_freq, int T, int HS) {
  prof::Scope s("rope_table", 1.0 * T * HS, F * T * HS);
  g_in->rope_table(cos_sin, pos, inv_freq, T, HS);
}
void rope_apply(float* x, const float* cos_sin, int T, int NH, int HS, bool il) {
  prof::Scope s("rope_apply", 3.0 * T * NH * HS, F * (2.0 * T * NH * HS + T * HS));
  g_in->rope_apply(x, cos_sin, T, NH, HS, il);
}
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int T, int pos0,
                       int NH, int NKV, int HS, int window, int ring) {
  double keys = 0;  // keys attended, summed over the queries (a window caps each at `window`)
  for (int t = 0; t < T && prof::enabled(); t++) keys += window > 0 ? std::min(pos0 + t + 1, window) : pos0 + t + 1;
  const double rows = window > 0 ? std::min(pos0 + T, window + T - 1) : pos0 + T;  // cache rows read
  prof::Scope s("attention_forward", 4.0 * keys * NH * HS, F * (2.0 * T * NH * HS + 2.0 * rows * NKV * HS));
  g_in->attention_forward(out, lse, q, k, v, T, pos0, NH, NKV, HS, window, ring);
}
void swiglu_forward(float* out, const float* gate, const float* up, int T, int Fd) {
  prof::Scope s("swiglu_forward", 6.0 * T * Fd, 3.0 * F * T * Fd);
  g_in->swiglu_forward(out, gate, up, T, Fd);
}
void swiglu_forward_half(DType t, HalfInputs in, float* h, uint16_t* h16, float* gate, uint16_t* gate16, float* up,
                         uint16_t* up16, int T, int Fd) {
  // reads f32 gate, up or their 16-bit copies, writes the other form (in place: both), h and h16
  const double n = double(T) * Fd;
  const double io = (gate ? F : 0) + (up ? F : 0) + 2 * 2 + (in == HalfInputs::RoundInPlace ? 2 * F : 0);
  prof::Scope s("swiglu_forward_half", 6.0 * n, (io + (h ? F : 0) + 2) * n);
  g_in->swiglu_forward_half(t, in, h, h16, gate, gate16, up, up16, T, Fd);
}
void matmul_rows(float* out, const float* x, const float* w, const float* bias, int T, int IC, int OC) {
  prof::Scope s("matmul_rows", 2.0 * T * IC * OC, F * ((double)IC * OC + (double)T * (IC + OC)));
  g_in->matmul_rows(out, x, w, bias, T, IC, OC);
}
void matmul_forward(float* out, const float* x, const float* w, const float* bias, int T, int IC, int OC) {
  // the GEMM inside records itself; this scope adds the bias and the call's own share
  prof::Scope s("matmul_forward", 0, 0);
  g_in->matmul_forward(out, x, w, bias, T, IC, OC);
}
bool gate_up_swiglu(const GluOutputs& o, float* xa_g, float* xa_u, const LinearInput& in, const LinearWeights& g,
                    const LinearWeights& u, const LinearScratch& sc) {
  prof::Scope s("gate_up_swiglu", 0, 0);  // its GEMM (the SwiGLU its epilogue) records itself
  return g_in->gate_up_swiglu(o, xa_g, xa_u, in, g, u, sc);
}

void linear_forward(float* out, float* xa, const LinearInput& in, const LinearWeights& w, const LinearScratch& sc) {
  prof::Scope s("linear_forward", 0, 0);  // the GEMMs inside record themselves
  g_in->linear_forward(out, xa, in, w, sc);
}
void add_inplace(float* x, const float* y, size_t n) {
  prof::Scope s("add_inplace", double(n), 3.0 * F * double(n));
  g_in->add_inplace(x, y, n);
}

void embedding_backward(float* dtable, const float* dout, const int* tokens, int T, int C) {
  prof::Scope s("embedding_backward", double(T) * C, 3.0 * F * T * C);
  g_tin->embedding_backward(dtable, dout, tokens, T, C);
}
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int T, int C) {
  prof::Scope s("rmsnorm_backward", 8.0 * T * C, F * 4.0 * T * C);
  g_tin->rmsnorm_backward(dx, dw, dout, x, w, rstd, T, C);
}
void rope_backward(float* dx, const int* pos, const float* inv_freq, int T, int NH, int HS, bool il) {
  prof::Scope s("rope_backward", 3.0 * T * NH * HS, 2.0 * F * T * NH * HS);
  g_tin->rope_backward(dx, pos, inv_freq, T, NH, HS, il);
}
void rope_apply_backward(float* dx, const float* cos_sin, int T, int NH, int HS, bool il) {
  prof::Scope s("rope_apply_backward", 3.0 * T * NH * HS, F * (2.0 * T * NH * HS + T * HS));
  g_tin->rope_apply_backward(dx, cos_sin, T, NH, HS, il);
}
void attention_train_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int* doc_start, int T, int NH, int NKV, int HS) {
  prof::Scope s("attention_train_forward", prof::enabled() ? 4.0 * attended_pairs(doc_start, T) * NH * HS : 0,
                F * (2.0 * T * NH * HS + 2.0 * T * NKV * HS));
  g_tin->attention_train_forward(out, lse, q, k, v, doc_start, T, NH, NKV, HS);
}
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* doc_start, int T, int NH,
                        int NKV, int HS, void* ds_rows, size_t ds_bytes) {
  prof::Scope s("attention_backward", prof::enabled() ? 10.0 * attended_pairs(doc_start, T) * NH * HS : 0,
                F * (4.0 * T * NH * HS + 4.0 * T * NKV * HS));
  g_tin->attention_backward(dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV, HS, ds_rows, ds_bytes);
}
bool attention_train_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                  const int* doc_start, int T, int NH, int NKV, int HS) {
  prof::Scope s("attention_train_forward_bf16", prof::enabled() ? 4.0 * attended_pairs(doc_start, T) * NH * HS : 0,
                2.0 * T * NH * HS + 4.0 * T * NKV * HS + F * T * NH * HS);
  return g_tin->attention_train_forward_bf16(out, lse, q, k, v, doc_start, T, NH, NKV, HS);
}
bool attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q, const uint16_t* k,
                             const uint16_t* v, const uint16_t* out, const float* lse, const int* doc_start, int T,
                             int NH, int NKV, int HS, void* ds_rows, size_t ds_bytes) {
  prof::Scope s("attention_backward_bf16", prof::enabled() ? 10.0 * attended_pairs(doc_start, T) * NH * HS : 0,
                F * (3.0 * T * NH * HS + 2.0 * T * NKV * HS) + 2.0 * (2.0 * T * NH * HS + 2.0 * T * NKV * HS));
  return g_tin->attention_backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV, HS, ds_rows,
                                        ds_bytes);
}
void swiglu_backward_bf16(float* dgate, float* dup, const float* dout, const uint16_t* gate16, const uint16_t* up16,
                          int T, int Fd) {
  prof::Scope s("swiglu_backward", 12.0 * T * Fd, (3.0 * F + 4.0) * T * Fd);
  g_tin->swiglu_backward_bf16(dgate, dup, dout, gate16, up16, T, Fd);
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int T, int Fd) {
  prof::Scope s("swiglu_backward", 12.0 * T * Fd, 5.0 * F * T * Fd);
  g_tin->swiglu_backward(dgate, dup, dout, gate, up, T, Fd);
}
void matmul_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w, int T,
                     int IC, int OC) {
  prof::Scope s("matmul_backward", 0, 0);
  g_tin->matmul_backward(dx, dw, db, dout, x, w, T, IC, OC);
}
void linear_backward_input(float* dx, const float* dout, int T, const LinearWeights& w, const LinearScratch& sc) {
  prof::Scope s("linear_backward_input", 0, 0);
  g_tin->linear_backward_input(dx, dout, T, w, sc);
}
void linear_backward_weight(const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                            const LinearWeights& w, const LinearScratch& sc) {
  prof::Scope s("linear_backward_weight", 0, 0);
  g_tin->linear_backward_weight(g, dout, in, xa, w, sc);
}
float lm_head_loss(float* dx, float* dw, float* logits_chunk, const float* x, const float* w, const int* labels,
                   int T, int C, int V, int chunk, float loss_scale) {
  prof::Scope s("lm_head_loss (softmax)", 5.0 * T * V, 2.0 * F * T * V);  // its GEMMs record themselves
  return g_tin->lm_head_loss(dx, dw, logits_chunk, x, w, labels, T, C, V, chunk, loss_scale);
}
float lm_head_loss_bf16(float* dx, float* dw, float* logits_chunk, uint16_t* x16, const float* x, const uint16_t* w,
                        const int* labels, int T, int C, int V, int chunk, float loss_scale) {
  prof::Scope s("lm_head_loss_bf16 (softmax)", 5.0 * T * V, 2.0 * F * T * V);  // its GEMMs record themselves
  return g_tin->lm_head_loss_bf16(dx, dw, logits_chunk, x16, x, w, labels, T, C, V, chunk, loss_scale);
}

}  // namespace

const Ops& ops_profiled(const Ops& inner) {
  static Ops t{};
  g_in = &inner;
  t = inner;
  t.name = "profiled";
  t.embedding_forward = embedding_forward;
  t.rmsnorm_forward = rmsnorm_forward;
  t.rope_forward = rope_forward;
  t.rope_table = rope_table;
  t.rope_apply = rope_apply;
  t.attention_forward = attention_forward;
  t.swiglu_forward = swiglu_forward;
  t.swiglu_forward_half = swiglu_forward_half;
  t.matmul_forward = matmul_forward;
  t.matmul_rows = matmul_rows;
  t.linear_forward = linear_forward;
  if (inner.gate_up_swiglu) t.gate_up_swiglu = gate_up_swiglu;
  t.add_inplace = add_inplace;
  return t;
}

const TrainOps& train_ops_profiled(const TrainOps& inner) {
  static TrainOps t{};
  g_tin = &inner;
  t = inner;
  t.name = "profiled";
  t.embedding_backward = embedding_backward;
  t.rmsnorm_backward = rmsnorm_backward;
  t.rope_backward = rope_backward;
  t.rope_apply_backward = rope_apply_backward;
  t.attention_train_forward = attention_train_forward;
  t.attention_backward = attention_backward;
  if (inner.attention_train_forward_bf16) t.attention_train_forward_bf16 = attention_train_forward_bf16;
  if (inner.attention_backward_bf16) t.attention_backward_bf16 = attention_backward_bf16;
  t.swiglu_backward = swiglu_backward;
  t.swiglu_backward_bf16 = swiglu_backward_bf16;
  t.matmul_backward = matmul_backward;
  t.linear_backward_input = linear_backward_input;
  t.linear_backward_weight = linear_backward_weight;
  t.lm_head_loss = lm_head_loss;
  t.lm_head_loss_bf16 = lm_head_loss_bf16;
  return t;
}

}  // namespace lt
