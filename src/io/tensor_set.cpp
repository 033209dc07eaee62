// TensorSet: a name -> tensor map over mapped files; get() checks the shape and that the dtype is
// one the loaders convert to f32.
#include "io/tensor_set.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace lt {

void TensorSet::add(TensorInfo t) {
  LT_CHECK(!tensors_.count(t.name), "{}: tensor '{}' appears twice", t.file, t.name);
  std::string name = t.name;
  tensors_.emplace(std::move(name), std::move(t));
}

const TensorInfo* TensorSet::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorInfo& TensorSet::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo* t = find(name);
  LT_CHECK(t, "{}: missing tensor '{}' (expected shape [{}])", source, name, fmt::join(shape, ", "));
  LT_CHECK(t->shape == shape, "{}: tensor '{}' has shape [{}], expected [{}] from the model config", t->file, name,
           fmt::join(t->shape, ", "), fmt::join(shape, ", "));
  // every caller converts the tensor to f32 (model, trainer and adapter weights, checkpoints)
  LT_CHECK(t->dtype == DType::F32 || t->dtype == DType::F16 || t->dtype == DType::BF16,
           "{}: tensor '{}' has dtype {}; leantune reads weights stored as F32, F16 or BF16. Save the checkpoint "
           "with floating-point weights (e.g. torch_dtype float32 or bfloat16)",
           t->file, name, dtype_name(t->dtype));
  return *t;
}

}  // namespace lt
