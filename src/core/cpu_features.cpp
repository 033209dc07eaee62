// cpuid-based detection; the OS must also enable the AVX / AVX-512 / AMX register state (xgetbv),
// and Linux must grant a process the AMX tile data state before its first tile instruction.
#include "core/cpu_features.h"

#include <cpuid.h>
#include <cstdlib>
#include <cstring>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace lt {

static CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = c & (1u << 27);
  bool fma = c & (1u << 12), f16c = c & (1u << 29);
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (unsigned long long)hi << 32 | lo;
  }
  bool ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6;
  bool tiles = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG, XTILEDATA
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.fma = fma && ymm;
  f.f16c = f16c && ymm;
  f.avx2 = (b & (1u << 5)) && ymm;
  f.avx512f = (b & (1u << 16)) && zmm;
  f.avx512dq = (b & (1u << 17)) && zmm;
  f.avx512bw = (b & (1u << 30)) && zmm;
  f.avx512vl = (b & (1u << 31)) && zmm;
  f.avx512_vnni = (c & (1u << 11)) && zmm;
  f.amx_bf16 = (d & (1u << 22)) && tiles;
  f.amx_tile = (d & (1u << 24)) && tiles;
  f.amx_int8 = (d & (1u << 25)) && tiles;
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = (a1 & (1u << 5)) && zmm;
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa cpu_isa() {
  const auto& f = cpu_features();
  Isa best = Isa::Scalar;
  if (f.avx2 && f.fma && f.f16c) best = Isa::Avx2;
  if (best == Isa::Avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) best = Isa::Avx512;
  if (const char* cap = std::getenv("LEANTUNE_ISA")) {
    Isa c = !std::strcmp(cap, "scalar") ? Isa::Scalar : !std::strcmp(cap, "avx2") ? Isa::Avx2 : Isa::Avx512;
    if (int(c) < int(best)) best = c;
  }
  return best;
}

// Linux hands out the 8 KiB tile data state on request only (arch/x86/include/uapi/asm/prctl.h);
// the grant is process-wide, so threads started before or after it may all use tiles.
static bool request_tile_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

static bool tile_permission() {
  static const bool granted = request_tile_permission();  // asked once per process
  return granted;
}

bool amx_bf16_usable() {
  const auto& f = cpu_features();
  if (!f.amx_tile || !f.amx_bf16 || cpu_isa() != Isa::Avx512) return false;
  return tile_permission();
}

static bool amx_kernels(bool unit) {
  if (!cpu_features().amx_tile || !unit) return false;
  const char* env = std::getenv("LEANTUNE_AMX");
  if (env && std::string(env) == "0") return false;
  return tile_permission();
}

bool amx_bf16_kernels() { return amx_kernels(cpu_features().amx_bf16); }
bool amx_int8_kernels() { return amx_kernels(cpu_features().amx_int8); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

std::string cpu_features_string() {
  const auto& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* n) { if (on) { if (!s.empty()) s += ' '; s += n; } };
  add(f.avx2, "avx2"); add(f.fma, "fma"); add(f.f16c, "f16c"); add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw"); add(f.avx512vl, "avx512vl"); add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni"); add(f.amx_tile, "amx_tile"); add(f.amx_bf16, "amx_bf16");
  add(f.amx_int8, "amx_int8");
  return s.empty() ? "none" : s;
}

}  // namespace lt
