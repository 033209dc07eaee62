// The reference op table: every entry is a plain scalar loop from this directory.
#include "kernels/ops.h"
#include "kernels/ref/ref.h"

namespace lt {

const Ops& ops_ref() {
  static const Ops ops = {
      "ref",
      ref::embedding_forward,
      ref::rmsnorm_forward,
      ref::rope_forward,
      ref::attention_forward,
      ref::swiglu_forward,
      ref::matmul_forward,
      ref::linear_forward,
      ref::add_inplace,
      ref::round_half,
      ref::widen_half,
      ref::attention_forward_kv16,
      ref::geglu_forward,
      ref::softcap_forward,
      ref::attention_softcap_forward,
      ref::matmul_forward,  // row-invariant: every row is its own loop
      ref::rope_table,
      ref::rope_apply,
      ref::swiglu_forward_half,
  };
  return ops;
}

}  // namespace lt
