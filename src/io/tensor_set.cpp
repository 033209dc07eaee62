// TensorSet: named tensors over mapped files; get() checks the shape, check_weight_dtypes() that
// model weights are of a dtype the loaders convert to f32.
#include "io/tensor_set.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace lt {

void TensorSet::add(TensorInfo t) {
  LT_CHECK(!tensors_.count(t.name), "{}: tensor '{}' appears twice", t.file, t.name);
  std::string name = t.name;
  tensors_.emplace(std::move(name), std::move(t));
}

uint8_t* TensorSet::allocate(size_t bytes) {
  constexpr std::align_val_t kAlign{64};
  auto* p = static_cast<uint8_t*>(::operator new(std::max<size_t>(bytes, 1), kAlign));
  owned_.emplace_back(p, [](uint8_t* q) { ::operator delete(q, std::align_val_t{64}); });
  return p;
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
  return *t;
}

void TensorSet::check_weight_dtypes() const {
  auto ends_with = [](const std::string& s, const char* tail) {
    const size_t n = std::strlen(tail);
    return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
  };
  for (const auto& [name, t] : tensors_) {
    if (!ends_with(name, ".weight") && !ends_with(name, ".bias")) continue;
    LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
             "{}: tensor '{}' has dtype {}; leantune reads model weights stored as F32, F16 or BF16. Save the "
             "checkpoint with floating-point weights (torch_dtype float32, float16 or bfloat16)",
             t.file, name, dtype_name(t.dtype));
  }
}

}  // namespace lt
