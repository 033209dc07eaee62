// Runtime CPU feature detection (cpuid + xgetbv). Kernels pick their ISA from this once.
// LEANTUNE_ISA=scalar|avx2|avx512 in the environment caps the level (for tests and comparisons).
// AMX (Intel's tile units) rides on the avx512 level: below it, no AMX.
#pragma once
#include <string>

namespace lt {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false;
  // AMX: cpuid and the OS's XCR0 tile state (bits 17 TILECFG, 18 TILEDATA); usable only after
  // amx_tiles_enabled()
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
};

enum class Isa { Scalar, Avx2, Avx512 };

const CpuFeatures& cpu_features();
Isa cpu_isa();  // best level usable here, capped by LEANTUNE_ISA
std::string cpu_features_string();
const char* isa_name(Isa isa);
// True when AMX bf16 tiles may be used by this process now: the CPU has amx_tile and amx_bf16, the
// ISA level (capped by LEANTUNE_ISA) is avx512, and Linux granted the tile data state
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once per process; a refusal means no AMX).
bool amx_bf16_usable();
// The AMX kernels in the avx512 kernel tables (the bf16 attention): the CPU has amx_tile and
// amx_bf16 and the OS granted the tile state, unless LEANTUNE_AMX=0 (for comparisons and tests).
// The tables are used only at the avx512 level, so the LEANTUNE_ISA cap is not consulted here.
bool amx_bf16_kernels();
// The AMX int8 kernels (the q8_0 / q4_0 prefill product): the CPU has amx_tile and amx_int8 and the
// OS granted the tile state, unless LEANTUNE_AMX=0. Used only at the avx512 level, like the above.
bool amx_int8_kernels();

}  // namespace lt
