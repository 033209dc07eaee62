// TrainableStore: where TrainModel's trainable tensors live when the model does not hold them
// itself (ZeRO stage 2: gradients; stage 3: parameters too; dist/zero.h implements it).
// The trainable tensors, in TrainModel::params() order, form units in execution order: unit 0 the
// embedding, unit l+1 decoder layer l, unit L+1 the final norm and lm_head. Each unit's tensors
// are contiguous in params() order, so a unit is one flat range [unit_begin, unit_end); a store
// hands the model one contiguous buffer per unit and the model points its tensors into it.
// Forward acquires a unit's parameters just before the unit runs and releases them right after;
// backward acquires parameters and a zeroed gradient buffer, and releases the gradients once the
// unit's backward for this micro-batch is complete (the store reduces them to their owners).
// The model records the order in which a pass acquires units and passes the next one as a hint.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace lt {

class TrainableStore {
 public:
  virtual ~TrainableStore() = default;
  virtual bool holds_params() const = 0;  // the model plans no buffers for its trainable tensors
  virtual bool holds_grads() const = 0;   // the model plans no gradient buffers
  // Construction, when holds_params(): a buffer for trainable tensor i (params() order, n floats);
  // the model fills it, then calls loaded(i) before asking for the next one.
  virtual float* load_buffer(size_t i, size_t n) = 0;
  virtual void loaded(size_t i) = 0;
  // A step: unit u's parameters (all of its tensors, contiguous) / its zeroed gradient buffer.
  // next: the unit the model will acquire after u in this pass (-1: none or unknown), which the
  // store may start gathering now (prefetch).
  virtual float* acquire_params(int u, int next) = 0;
  virtual void release_params(int u) = 0;
  virtual float* acquire_grads(int u) = 0;
  virtual void release_grads(int u) = 0;
  // The model holds the gradients (!holds_grads()): unit u's gradients of this micro-batch are
  // complete (its last contribution in this pass), so a reduction may start while the backward
  // goes on.
  virtual void grads_ready(int u) {}
};

// The unit of a trainable tensor from its name (HF or PEFT): 0 the embedding, l+1 anything in
// decoder layer l ("layers.<l>."), n_layers+1 the rest (final norm, lm_head).
int trainable_unit(const std::string& name, int n_layers);

}  // namespace lt
