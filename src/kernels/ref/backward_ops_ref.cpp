// The reference training op table: every entry is a plain scalar loop from this directory
// (backward_*.cpp, cross_entropy*.cpp). Fast backends fill the same TrainOps and test against it.
#include "kernels/backward.h"
#include "kernels/ref/ref.h"

namespace lt {

const TrainOps& train_ops_ref() {
  static const TrainOps ops = {
      "ref",
      ref::embedding_backward,
      ref::rmsnorm_backward,
      ref::rope_backward,
      ref::attention_train_forward,
      ref::attention_backward,
      ref::swiglu_backward,
      ref::matmul_backward,
      ref::linear_backward_input,
      ref::linear_backward_weight,
      ref::lm_head_loss,
      ref::geglu_backward,
      ref::softcap_backward,
      ref::attention_softcap_train_forward,
      ref::attention_softcap_backward,
      ref::lm_head_loss_softcap,
      nullptr,  // attention_train_forward_bf16: the model runs the f32 ops on bf16-rounded values
      nullptr,  // attention_backward_bf16
      ref::lm_head_loss_bf16,
      ref::rope_apply_backward,
      ref::swiglu_backward_bf16,
  };
  return ops;
}

}  // namespace lt
