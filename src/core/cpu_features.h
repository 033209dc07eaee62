// Runtime CPU feature detection (cpuid + xgetbv). Kernels pick their ISA from this once.
// LEANTUNE_ISA=scalar|avx2|avx512 in the environment caps the level (for tests and comparisons).
#pragma once
#include <string>

namespace lt {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false;
};

enum class Isa { Scalar, Avx2, Avx512 };

const CpuFeatures& cpu_features();
Isa cpu_isa();  // best level usable here, capped by LEANTUNE_ISA
std::string cpu_features_string();
const char* isa_name(Isa isa);

}  // namespace lt
