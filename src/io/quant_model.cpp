// Quantized model folders (`leantune quantize`). Layout of DIR, a Hugging Face-style folder:
//
//   config.json        the source's config.json (for a llama2.c source, one made from its header)
//                      plus "quantization_config": {"quant_method": "leantune", "type": "nf4" | "fp4"
//                      | "int8", "blocksize": 64, "double_quant": true | false}
//   model.safetensors  for each linear weight W = model.layers.{l}.{self_attn.{q,k,v,o}_proj,
//                      mlp.{gate,up,down}_proj}.weight, (rows, cols) = (out, in), its parts instead of W:
//     nf4 / fp4        W.codes    U8  [ceil(rows*cols/2)]  4-bit codes of W flattened row-major, two
//                                                          per byte, first element in the high nibble
//                      W.absmax   F32 [nblocks]            one per `blocksize` elements (last may be short)
//       double_quant:  W.qabsmax  U8  [nblocks]            dynamic-map 8-bit codes of absmax - offset
//                      W.absmax2  F32 [ceil(nblocks/256)]  one scale per 256 absmax values
//                      W.offset   F32 [1]                  the mean of the absmax values
//     int4, int4_asym  W.codes    U8  [ceil(rows*cols/2)]  as nf4 (quant/int4.h: llama.cpp's q4_0 / q4_1 grids)
//                      W.scales   F32 [nblocks]            d per `blocksize` elements
//       int4_asym:     W.mins     F32 [nblocks]            the block minima
//     int8             W.qweight  I8  [rows, cols]         round(W * 127 / row_absmax)
//                      W.row_absmax F32 [rows]             max |W| of each row
//     q8_0             W.blocks   U8  [rows*cols/32*34]    llama.cpp's block_q8_0 (quant/q8_0.h)
//     q4_0             W.blocks   U8  [rows*cols/32*18]    llama.cpp's block_q4_0 (quant/q4_0.h)
//                      every other tensor (embeddings, norms, lm_head, biases) as in the source, same dtype
//   tokenizer files    copied from the source folder when present
//
// The codes are bitsandbytes' (quant/quant4.h, quant/int8.h): W.codes + W.absmax of an NF4 weight
// equal bitsandbytes.functional.quantize_4bit(W, blocksize, quant_type="nf4") byte for byte. A
// llama2.c source uses the interleaved RoPE layout; its q/k rows are permuted to HF's halves
// layout before quantizing (as transformers' conversion script does), so config.json means what
// it says.
#include "io/quant_model.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/hf_cache.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "core/mapped_file.h"
#include "core/atomic_file.h"
#include "io/checkpoint_tensors.h"
#include "io/model_files.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

bool is_linear_weight(const std::string& name) {
  if (name.rfind("model.layers.", 0) != 0) return false;
  for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
    const std::string suffix = std::string(".") + m + ".weight";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

// config.json of an HF-layout copy of a llama2.c model
nlohmann::json hf_config_of(const ModelConfig& c) {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", c.dim},
          {"intermediate_size", c.hidden_dim}, {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads}, {"num_key_value_heads", c.n_kv_heads}, {"head_dim", c.head_dim},
          {"vocab_size", c.vocab_size}, {"max_position_embeddings", c.max_seq_len},
          {"rms_norm_eps", std::stod(fmt::format("{}", c.norm_eps))}, {"rope_theta", c.rope_theta}, {"tie_word_embeddings", c.tie_embeddings},
          {"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_id}, {"torch_dtype", "float32"}};
}

// Interleaved -> halves RoPE layout: within each head of HS rows, row 2i+p moves to p*HS/2 + i.
void permute_rope_rows(float* w, int64_t rows, int64_t cols, int HS, std::vector<float>& tmp) {
  tmp.assign(w, w + rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r / HS, j = r % HS, dst = h * HS + (j % 2) * (HS / 2) + j / 2;
    std::copy(tmp.begin() + r * cols, tmp.begin() + (r + 1) * cols, w + dst * cols);
  }
}

TensorInfo part(const std::string& name, DType dt, std::vector<int64_t> shape, const void* data) {
  TensorInfo t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data = data;
  t.nbytes = size_t(t.numel()) * dtype_size(dt);
  return t;
}

}  // namespace

// The stored parts of quantized weight `name` (q's views), appended to out; offsets holds the
// double-quantization offsets they point at.
static void add_quant_parts(std::vector<TensorInfo>& out, const std::string& name, const QuantTensor& q,
                            const QuantSpec& spec, std::deque<float>& offsets) {
  if (spec.type == QuantType::Int8) {
    out.push_back(part(name + ".qweight", DType::I8, {q.rows, q.cols}, q.qweight));
    out.push_back(part(name + ".row_absmax", DType::F32, {q.rows}, q.row_absmax));
    return;
  }
  if (is_ggml_block(spec.type)) {
    out.push_back(part(name + ".blocks", DType::U8, {q.numel() / 32 * (spec.type == QuantType::Q8_0 ? 34 : 18)}, q.codes));
    return;
  }
  out.push_back(part(name + ".codes", DType::U8, {(q.numel() + 1) / 2}, q.codes));
  if (is_int4(spec.type)) {
    out.push_back(part(name + ".scales", DType::F32, {q.nblocks()}, q.absmax));
    if (spec.type == QuantType::Int4Asym) out.push_back(part(name + ".mins", DType::F32, {q.nblocks()}, q.mins));
    return;
  }
  if (!spec.double_quant) {
    out.push_back(part(name + ".absmax", DType::F32, {q.nblocks()}, q.absmax));
  } else {
    out.push_back(part(name + ".qabsmax", DType::U8, {q.nblocks()}, q.qabsmax));
    out.push_back(part(name + ".absmax2", DType::F32, {q.nblocks2()}, q.absmax2));
    out.push_back(part(name + ".offset", DType::F32, {1}, &offsets.emplace_back(q.offset)));
  }
}

// An HF folder's tokenizer and generation files, copied to out_dir (those it has).
static void copy_tokenizer_files(const fs::path& src_dir, const std::string& out_dir) {
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                        "chat_template.jinja", "generation_config.json"})
    if (fs::exists(src_dir / f))
      write_text_file_atomic((fs::path(out_dir) / f).string(), read_text_file((src_dir / f).string()));
}

QuantSpec model_quant_spec(const ModelConfig& c) {
  LT_ASSERT(c.quantization);
  return {*c.quantization, c.quant_blocksize, c.quant_double_quant};
}

void quantize_model(const std::string& model, const QuantSpec& spec, const std::string& out_dir) {
  check_quant_spec(spec);
  const ModelFiles files = load_model_files(model);
  quantize_model_tensors(files.config, files.tensors, model, spec, out_dir);
}

// About 70 lines: the config, then each tensor copied or quantized in one pass.
void quantize_model_tensors(const ModelConfig& mc, const TensorSet& tensors, const std::string& model,
                            const QuantSpec& spec, const std::string& out_dir) {
  check_quant_spec(spec);
  check_checkpoint_tensors(mc, tensors);  // before quantizing: a stray tensor is named now, not on load
  if (mc.quantization) {
    const QuantSpec s = model_quant_spec(mc);
    fail("{}: the model is already quantized ({}, block size {}, double quant {}); quantizing it again to {} would "
         "compound the rounding. Quantize the original f32/f16/bf16 model instead{}", model, quant_type_name(s.type),
         s.blocksize, s.double_quant ? "on" : "off", quant_type_name(spec.type),
         s.type == spec.type ? " (or train on this folder as it is)" : "");
  }
  const std::string resolved = resolve_model_path(model);
  const bool is_dir = fs::is_directory(resolved);
  const fs::path src_dir = is_dir ? fs::path(resolved) : fs::path(resolved).parent_path();
  const bool hf = is_dir || fs::exists(src_dir / "config.json");
  nlohmann::json cfg;
  if (hf) {
    const std::string path = (src_dir / "config.json").string();
    cfg = load_json_file(path);
  } else {
    cfg = hf_config_of(mc);
  }
  cfg["quantization_config"] = {{"quant_method", "leantune"}, {"type", quant_type_name(spec.type)},
                                {"blocksize", spec.blocksize}, {"double_quant", spec.double_quant}};
  const bool permute = mc.rope_layout == RopeLayout::Interleaved;

  std::vector<TensorInfo> out;
  std::deque<std::vector<uint8_t>> storage;  // stable addresses for the parts
  std::deque<float> offsets;
  std::vector<float> w, tmp;
  size_t n_quantized = 0, bytes_in = 0, bytes_out = 0;
  for (const auto& [name, t] : tensors.all()) {
    if (!is_linear_weight(name)) {
      out.push_back(t);
      continue;
    }
    LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
             "{}: tensor '{}' is {}; `leantune quantize` quantizes F32, F16 or BF16 weights", t.file, name,
             dtype_name(t.dtype));
    LT_CHECK(t.shape.size() == 2, "{}: tensor '{}' has {} dimensions, expected 2", t.file, name, t.shape.size());
    const int64_t rows = t.shape[0], cols = t.shape[1];
    w.resize(size_t(rows * cols));
    convert_to_f32(w.data(), t.data, t.dtype, w.size());
    release_mapped_pages(t.data, t.nbytes);
    const bool qk = name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos;
    if (permute && qk) permute_rope_rows(w.data(), rows, cols, mc.head_dim, tmp);
    const size_t bytes = quant_storage_bytes(spec, rows, cols);
    auto& buf = storage.emplace_back(bytes + 64);
    void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
    add_quant_parts(out, name, quantize_weight(aligned, bytes, w.data(), rows, cols, spec), spec, offsets);
    ++n_quantized;
    bytes_in += t.nbytes;
    bytes_out += bytes;
  }
  LT_CHECK(n_quantized == size_t(7) * mc.n_layers, "{}: found {} linear weights to quantize, expected {} (7 per "
           "layer)", model, n_quantized, 7 * mc.n_layers);
  fs::create_directories(out_dir);
  save_safetensors((fs::path(out_dir) / "model.safetensors").string(), out,
                   {{"format", "pt"}, {"leantune_quantization", quant_type_name(spec.type)}});
  write_text_file_atomic((fs::path(out_dir) / "config.json").string(), cfg.dump(2) + "\n");
  if (hf) copy_tokenizer_files(src_dir, out_dir);
  fmt::print("{}: {} linear weights quantized to {} (block size {}, double quant {}): {} -> {} bytes; wrote {}{}\n",
             model, n_quantized, quant_type_name(spec.type), spec.blocksize, spec.double_quant ? "on" : "off",
             bytes_in, bytes_out, out_dir, permute ? " (q/k rows permuted to the HF RoPE layout)" : "");
}

QuantTensor load_quant_tensor(const TensorSet& ts, const std::string& name, const QuantSpec& spec, int64_t rows,
                              int64_t cols) {
  auto find = [&](const char* suffix, DType dt) -> const TensorInfo* {
    const TensorInfo* t = ts.find(name + suffix);
    if (t)
      LT_CHECK(t->dtype == dt, "{}: quantized tensor part '{}{}' is {}, expected {}", t->file, name, suffix,
               dtype_name(t->dtype), dtype_name(dt));
    return t;
  };
  QuantParts p;
  auto take = [&]<class T>(const char* suffix, DType dt, const T*& ptr, int64_t& count) {
    if (const TensorInfo* t = find(suffix, dt)) {
      ptr = static_cast<const T*>(t->data);
      count = t->numel();
    }
  };
  take(is_ggml_block(spec.type) ? ".blocks" : ".codes", DType::U8, p.codes, p.codes_count);
  take(is_int4(spec.type) ? ".scales" : ".absmax", DType::F32, p.absmax, p.absmax_count);
  take(".mins", DType::F32, p.mins, p.mins_count);
  take(".qabsmax", DType::U8, p.qabsmax, p.qabsmax_count);
  take(".absmax2", DType::F32, p.absmax2, p.absmax2_count);
  take(".qweight", DType::I8, p.qweight, p.qweight_count);
  take(".row_absmax", DType::F32, p.row_absmax, p.row_absmax_count);
  if (spec.double_quant) {
    const TensorInfo* off = find(".offset", DType::F32);
    LT_CHECK(off && off->numel() == 1, "{}: quantized tensor '{}': missing its double-quant offset ('{}.offset', "
             "F32 [1])", ts.source, name, name);
    p.offset = *static_cast<const float*>(off->data);
  }
  return quant_tensor_view(spec, rows, cols, p, fmt::format("{}' in '{}", name, ts.source));
}

}  // namespace lt
