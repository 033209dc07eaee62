// Quantized frozen weights: the QuantTensor view (codes + scales of one (rows, cols) matrix), its
// storage size for the memory plan, quantizing an f32 matrix into caller-provided storage, and
// validating parts read from a file.
//
// Formats (bitsandbytes-compatible, see quant4.h / int8.h):
//   NF4 / FP4: the matrix flattened row-major, blocks of `blocksize` elements (the last may be
//              short), one absmax per block, two 4-bit codes per byte, first element in the high
//              nibble. With double quantization the absmax values are stored as 8-bit dynamic-map
//              codes of (absmax - offset) in blocks of 256, plus one f32 scale per 256-block.
//   Int8:      one int8 per element, one f32 absmax per row (LLM.int8 weights).
//   Int4, Int4Asym: codes as NF4, one f32 scale d per block (in `absmax`), and for Int4Asym one f32
//              minimum per block (quant/int4.h).
//   Q8_0:      llama.cpp's block_q8_0 in `codes`: per 32 elements an f16 scale and 32 int8 (34 bytes,
//              quant/q8_0.h); cols must be a multiple of 32 (each row whole blocks).
//   Q4_0:      llama.cpp's block_q4_0 in `codes`: per 32 elements an f16 scale and 16 bytes of nibbles
//              (18 bytes, quant/q4_0.h); cols a multiple of 32.
// Storage bytes per parameter (large matrices): NF4/FP4 0.5625; with double quant
// 0.5 + 1/64 + 4/(64*256) = 0.51587 (4.127 bits); Int8 1 + 4/cols; Q8_0 1.0625; Q4_0 0.5625.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "core/quant_spec.h"
#include "kernels/linear.h"

namespace lt {

// A quantized (rows, cols) matrix; non-owning. Kernels only read through it.
struct QuantTensor {
  QuantType type = QuantType::NF4;
  int64_t rows = 0, cols = 0;          // (OC, IC) for a linear layer's weight
  int blocksize = 64;                  // NF4/FP4
  bool double_quant = false;           // NF4/FP4
  const uint8_t* codes = nullptr;      // NF4/FP4: (ceil(rows*cols/2)) packed codes; Q8_0/Q4_0: the blocks
  const float* absmax = nullptr;       // NF4/FP4 without double quant: (nblocks); Int4*: the scales d
  const float* mins = nullptr;         // Int4Asym: (nblocks) block minima
  const uint8_t* qabsmax = nullptr;    // double quant: (nblocks) dynamic-map codes of absmax - offset
  const float* absmax2 = nullptr;      // double quant: (nblocks2) second-level scales
  float offset = 0.0f;                 // double quant: mean of the absmax values
  const int8_t* qweight = nullptr;     // Int8: (rows, cols)
  const float* row_absmax = nullptr;   // Int8: (rows)

  int64_t numel() const { return rows * cols; }
  int64_t nblocks() const { return (numel() + blocksize - 1) / blocksize; }
  int64_t nblocks2() const { return (nblocks() + 255) / 256; }
  QuantSpec spec() const { return {type, blocksize, double_quant}; }
};

// Bytes of one quantized (rows, cols) matrix as quantize_weight lays it out in its storage
// (each part 64-byte aligned). The memory plan calls this.
size_t quant_storage_bytes(const QuantSpec& spec, int64_t rows, int64_t cols);

// Quantizes w (rows, cols) into `storage` (>= quant_storage_bytes, 64-byte aligned) and returns
// the view. `mean_threads` only affects double quantization: bitsandbytes takes the mean of the
// absmax values with torch, whose summation order depends on torch's thread count when there are
// more than 32768 blocks; pass torch.get_num_threads() to reproduce its offset bit for bit.
QuantTensor quantize_weight(void* storage, size_t storage_bytes, const float* w, int64_t rows, int64_t cols,
                            const QuantSpec& spec, int mean_threads = 1);

// Quantizing a matrix that is read chunk by chunk (converted from an f16/bf16/f32 file) without
// holding it whole in f32: read(dst, first, count) writes elements [first, first + count) of the
// row-major matrix as f32. The result is byte-identical to quantize_weight (mean_threads = 1).
// Chunks: 4-bit, min(numel, 65536) elements (a multiple of any block size); int8, whole rows.
using QuantChunkReader = std::function<void(float* dst, int64_t first, int64_t count)>;
// Floats of scratch quantize_weight_chunked needs: one chunk, plus the f32 absmax values with
// double quantization.
size_t quantize_chunked_scratch_floats(const QuantSpec& spec, int64_t rows, int64_t cols);
QuantTensor quantize_weight_chunked(void* storage, size_t storage_bytes, int64_t rows, int64_t cols,
                                    const QuantSpec& spec, float* scratch, size_t scratch_floats,
                                    const QuantChunkReader& read);

// Copies the parts of src (e.g. read from a file) into `storage` (>= quant_storage_bytes, 64-byte
// aligned) in quantize_weight's layout and returns the view of the copy.
QuantTensor copy_quant_tensor(void* storage, size_t storage_bytes, const QuantTensor& src);

// The linear op's weight kind of a format (Int8, NF4, FP4, Int4 for both integer 4-bit formats).
WeightKind weight_kind(QuantType t);

// The linear op's view of q (kernels/linear.h): its parts and the code tables they index (4-bit
// code values, the dynamic map of double quantization). int8_threshold: the LLM.int8 outlier
// threshold an Int8 weight's forward uses (0: no outlier columns; ignored for 4-bit).
WeightView weight_view(const QuantTensor& q, float int8_threshold);

// The whole f32 matrix out (rows, cols) from q: scalar reference (tests, export).
void dequantize_weight(float* out, const QuantTensor& q);

// Parts of a quantized matrix read from a file, each with its element count.
struct QuantParts {
  const uint8_t* codes = nullptr;       int64_t codes_count = 0;
  const float* absmax = nullptr;        int64_t absmax_count = 0;   // Int4*: the scales
  const float* mins = nullptr;          int64_t mins_count = 0;     // Int4Asym
  const uint8_t* qabsmax = nullptr;     int64_t qabsmax_count = 0;
  const float* absmax2 = nullptr;       int64_t absmax2_count = 0;
  float offset = 0.0f;
  const int8_t* qweight = nullptr;      int64_t qweight_count = 0;
  const float* row_absmax = nullptr;    int64_t row_absmax_count = 0;
};

// Checks every part the spec needs is present with exactly the expected count and returns the
// view; lt::Error naming `name`, the part and expected vs actual count otherwise (e.g. truncated
// scales).
QuantTensor quant_tensor_view(const QuantSpec& spec, int64_t rows, int64_t cols, const QuantParts& parts,
                              std::string_view name);

}  // namespace lt
