// The CPU op tables, one per ISA, and the run-time choice between them.
#include "core/error.h"
#include "core/profiler.h"
#include "kernels/profiled_ops.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/kernels.h"

namespace lt {

bool cpu_supports(Isa isa) {
  const CpuFeatures& f = cpu_features();
  bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return avx2;
    case Isa::Avx512: return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  }
  return false;
}

static Ops make_ops(Isa isa) {
  Ops ops{};
  ops.embedding_forward = cpu::embedding_forward;
  ops.rope_forward = cpu::rope_forward;
  ops.rope_table = cpu::rope_table;
  ops.rope_apply = cpu::rope_apply;
  ops.round_half = static_cast<void (*)(DType, uint16_t*, float*, const float*, size_t)>(cpu::f32_to_half);
  ops.widen_half = static_cast<void (*)(DType, float*, const uint16_t*, size_t)>(cpu::half_to_f32);
  cpu::fill_gemma_ops(ops);
  ops.gate_up_swiglu = cpu::gate_up_swiglu;  // (AMX only: declines elsewhere)
  switch (isa) {
    case Isa::Scalar: ops.name = "cpu-scalar"; cpu::scalar::fill_ops(ops); break;
    case Isa::Avx2: ops.name = "cpu-avx2"; cpu::avx2::fill_ops(ops); break;
    case Isa::Avx512: ops.name = "cpu-avx512"; cpu::avx512::fill_ops(ops); break;
  }
  return ops;
}

const Ops& ops_cpu_for(Isa isa) {
  static const Ops tables[3] = {make_ops(Isa::Scalar), make_ops(Isa::Avx2), make_ops(Isa::Avx512)};
  LT_CHECK(cpu_supports(isa), "ops_cpu_for: this CPU ({}) cannot run the {} kernels", cpu_features_string(),
           isa_name(isa));
  return tables[(int)isa];
}

const Ops& ops_cpu() { return prof::routed() ? ops_profiled(ops_cpu_for(cpu_isa())) : ops_cpu_for(cpu_isa()); }

}  // namespace lt
