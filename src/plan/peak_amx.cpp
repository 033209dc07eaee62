// The AMX tile loop behind peak_amx_bf16_gflops() (plan/peak.h): tdpbf16ps on tiles loaded once,
// so the loop is the tile multiply unit alone, no memory traffic. Compiled with -mamx-tile
// -mamx-bf16 (CMakeLists.txt, *_amx.cpp) and called only where amx_bf16_usable() holds.
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstring>

#include "plan/peak.h"

namespace lt::detail {

namespace {

// The 64-byte tile configuration (palette 1): every tile 16 rows of 64 bytes, the largest shape.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

double amx_bf16_gflops(double seconds) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  // A: 16 x 32 bf16 of 1.0, B: 16 x 32 bf16 of ~6e-8 (pairs), C: 16 x 16 f32 of 0
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  alignas(64) float c[16 * 16];
  for (int i = 0; i < 16 * 32; ++i) a[i] = 0x3f80, b[i] = 0x3380;
  std::memset(c, 0, sizeof c);
  _tile_loadd(0, c, 64); _tile_loadd(1, c, 64); _tile_loadd(2, c, 64); _tile_loadd(3, c, 64);
  _tile_loadd(4, a, 64); _tile_loadd(5, a, 64); _tile_loadd(6, b, 64); _tile_loadd(7, b, 64);
  // a 2 x 2 block of accumulators, the usual GEMM micro-kernel: four independent chains
  long iters = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double s = 0;
  do {
    for (int r = 0; r < 256; ++r) {
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    iters += 256;
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (s < seconds);
  float sum = 0;
  for (int t = 0; t < 4; ++t) {
    switch (t) {  // tile numbers must be constants
      case 0: _tile_stored(0, c, 64); break;
      case 1: _tile_stored(1, c, 64); break;
      case 2: _tile_stored(2, c, 64); break;
      default: _tile_stored(3, c, 64); break;
    }
    sum += c[0];
  }
  _tile_release();
  volatile float sink = sum;
  (void)sink;
  // one tdpbf16ps on full tiles: 16 x 16 outputs, each a 32-long bf16 dot product = 16384 FLOPs
  return 2.0 * 16 * 16 * 32 * 4 * double(iters) / s / 1e9;
}

}  // namespace lt::detail
