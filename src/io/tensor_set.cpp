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
  return *t;
}

}  // namespace lt
