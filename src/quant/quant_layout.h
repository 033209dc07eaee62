// Internal to src/quant: the carving of quantized storage into 64-byte aligned parts and the
// single-thread threshold, as the kernels define them (kernels/carve.h).
#pragma once
#include "kernels/carve.h"

namespace lt::quant {
using kernels::align64;
using kernels::carve;
using kernels::kParallelMin;
}  // namespace lt::quant
