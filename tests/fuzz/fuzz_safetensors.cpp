// libFuzzer harness: a .safetensors file through load_safetensors (the loader maps a path, so the
// bytes go through a memfd), then every tensor's bytes are read, as a model load would.
#include "core/error.h"
#include "fuzz_common.h"
#include "io/safetensors.h"

namespace lt::fuzz {

void safetensors(std::string_view bytes) {
  TensorSet set;
  SafetensorsMetadata meta = load_safetensors(bytes_path(bytes), set);
  uint64_t sum = meta.size();
  for (const auto& [name, t] : set.all()) {
    LT_ASSERT(t.nbytes == uint64_t(t.numel()) * dtype_size(t.dtype));
    const auto* p = static_cast<const uint8_t*>(t.data);
    for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];
  }
  volatile uint64_t sink = sum;
  (void)sink;
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::safetensors)
