// How quantized storage and kernel workspaces are carved into parts (each 64-byte aligned), and
// the size below which element loops stay on the calling thread. Shared by the dequantization
// kernels and the quantized formats above them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lt::kernels {

// Workspace carving: every part starts on a 64-byte boundary.
inline size_t align64(size_t n) { return (n + 63) & ~size_t(63); }
template <class T>
T* carve(char*& p, size_t count) {
  T* r = reinterpret_cast<T*>(p);
  p += align64(count * sizeof(T));
  return r;
}

// Loops over fewer elements than this run on the calling thread (a parallel region costs more).
constexpr int64_t kParallelMin = 1 << 15;

}  // namespace lt::kernels
