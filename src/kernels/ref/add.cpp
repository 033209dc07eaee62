// Reference elementwise ops: x[i] += y[i].
#include "kernels/ref/ref.h"

namespace lt::ref {

void add_inplace(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] += y[i];
}

}  // namespace lt::ref
