// Names of the training methods, precisions and base quantizations (core/train_types.h).
#include "core/train_types.h"

#include "core/error.h"

namespace lt {

namespace {
constexpr const char* kMethods[] = {"lora", "full"};
constexpr const char* kPrecisions[] = {"fp32", "bf16", "fp16"};
constexpr const char* kAttentionPrecisions[] = {"auto", "f32", "bf16"};

template <class E, size_t N>
std::optional<E> find_name(const char* const (&names)[N], std::string_view name) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i]) return E(i);
  return std::nullopt;
}
}  // namespace

const char* method_name(Method m) { return kMethods[size_t(m)]; }
const char* precision_name(Precision p) { return kPrecisions[size_t(p)]; }
const char* attention_precision_name(AttentionPrecision p) { return kAttentionPrecisions[size_t(p)]; }

std::optional<Method> find_method(std::string_view name) { return find_name<Method>(kMethods, name); }
std::optional<Precision> find_precision(std::string_view name) { return find_name<Precision>(kPrecisions, name); }
std::optional<AttentionPrecision> find_attention_precision(std::string_view name) {
  return find_name<AttentionPrecision>(kAttentionPrecisions, name);
}

Method parse_method(std::string_view name) {
  if (auto m = find_method(name)) return *m;
  fail("method: '{}' is not one of lora, full", name);
}

Precision parse_precision(std::string_view name) {
  if (auto p = find_precision(name)) return *p;
  fail("precision: '{}' is not one of fp32, bf16, fp16", name);
}

AttentionPrecision parse_attention_precision(std::string_view name) {
  if (auto p = find_attention_precision(name)) return *p;
  fail("attention_precision: '{}' is not one of auto, f32, bf16", name);
}

}  // namespace lt
