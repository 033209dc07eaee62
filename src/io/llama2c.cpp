// llama2.c loader. File layout after the 28-byte header (all f32, row-major):
//   token_embedding (V, C), rms_att (L, C), wq (L, NH*HS, C), wk (L, NKV*HS, C), wv (L, NKV*HS, C),
//   wo (L, C, NH*HS), rms_ffn (L, C), w1 (L, F, C), w2 (L, C, F), w3 (L, F, C), rms_final (C),
//   freq_cis_real (T, HS/2), freq_cis_imag (T, HS/2), [wcls (V, C) when vocab_size < 0].
// HF names: w1 = gate_proj, w2 = down_proj, w3 = up_proj. freq_cis is skipped (recomputed).
#include "io/llama2c.h"

#include <cstring>
#include <memory>

#include "core/error.h"

namespace lt {

namespace {

constexpr int32_t kMagicVersioned = 0x616b3432;  // "ak42": llama2.c export version >= 1

struct Cursor {
  const std::string& path;
  const uint8_t* base;
  uint64_t offset;
  TensorSet& set;

  // Adds `count` consecutive tensors of `shape` (f32) named by name_of(i), advancing the cursor.
  template <class NameOf>
  void take(int count, std::vector<int64_t> shape, NameOf name_of) {
    uint64_t bytes = 4;
    for (auto d : shape) bytes *= uint64_t(d);
    for (int i = 0; i < count; ++i) {
      TensorInfo t;
      t.name = name_of(i);
      t.dtype = DType::F32;
      t.shape = shape;
      t.data = base + offset;
      t.nbytes = size_t(bytes);
      t.file = path;
      set.add(std::move(t));
      offset += bytes;
    }
  }
  void skip_f32(uint64_t n) { offset += 4 * n; }
};

std::string layer_name(int i, const char* suffix) { return "model.layers." + std::to_string(i) + "." + suffix; }

}  // namespace

Llama2cModel load_llama2c(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  const uint64_t actual = file->size();
  LT_CHECK(actual >= 28, "{}: not a llama2.c checkpoint: {} bytes, shorter than the 28-byte header", path, actual);
  int32_t h[7];
  std::memcpy(h, file->data(), sizeof h);
  LT_CHECK(h[0] != kMagicVersioned,
           "{}: llama2.c export version {} is not supported; export with the legacy format (version 0)", path, h[1]);
  const int C = h[0], F = h[1], L = h[2], NH = h[3], NKV = h[4], T = h[6];
  const bool shared = h[5] > 0;
  LT_CHECK(h[5] != 0 && h[5] != INT32_MIN, "{}: llama2.c header has vocab_size {} (not a llama2.c checkpoint?)", path,
           h[5]);
  const int V = shared ? h[5] : -h[5];
  LT_CHECK(C > 0 && F > 0 && L > 0 && NH > 0 && NKV > 0 && T > 0,
           "{}: llama2.c header has non-positive sizes (not a llama2.c checkpoint?): dim {}, hidden_dim {}, "
           "n_layers {}, n_heads {}, n_kv_heads {}, seq_len {}",
           path, C, F, L, NH, NKV, T);
  LT_CHECK(C % NH == 0, "{}: llama2.c header: dim {} is not a multiple of n_heads {}", path, C, NH);
  LT_CHECK(NKV <= NH && NH % NKV == 0, "{}: llama2.c header: n_heads {} is not a multiple of n_kv_heads {}", path, NH,
           NKV);
  const int HS = C / NH;

  Llama2cModel m;
  ModelConfig& c = m.config;
  c.arch = "llama";
  c.dim = C;
  c.n_layers = L;
  c.n_heads = NH;
  c.n_kv_heads = NKV;
  c.head_dim = HS;
  c.hidden_dim = F;
  c.vocab_size = V;
  c.max_seq_len = T;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_layout = RopeLayout::Interleaved;
  c.tie_embeddings = shared;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  validate_config(c, path);

  // Each size is < 2^31, so every product of three (and the sum) fits in 128 bits.
  using u128 = unsigned __int128;
  const u128 uC = C, uF = F, uL = L, uV = V, uT = T, qd = u128(NH) * HS, kvd = u128(NKV) * HS;
  u128 floats = uV * uC + uL * uC + uL * qd * uC + 2 * uL * kvd * uC + uL * uC * qd + uL * uC + 3 * uL * uF * uC + uC +
                2 * uT * (HS / 2) + (shared ? 0 : uV * uC);
  u128 expected = 28 + 4 * floats;
  LT_CHECK(expected == actual,
           "{}: llama2.c checkpoint should be {} bytes for dim {}, hidden_dim {}, n_layers {}, n_heads {}, "
           "n_kv_heads {}, vocab_size {}, seq_len {}, but the file has {} bytes (truncated or not a llama2.c file?)",
           path, expected > u128(UINT64_MAX) ? UINT64_MAX : uint64_t(expected), C, F, L, NH, NKV, h[5], T, actual);

  TensorSet& s = m.tensors;
  s.source = path;
  Cursor cur{path, file->data(), 28, s};
  const int64_t c64 = C, f64 = F, q64 = NH * HS, kv64 = NKV * HS, v64 = V;
  cur.take(1, {v64, c64}, [](int) { return std::string("model.embed_tokens.weight"); });
  cur.take(L, {c64}, [](int i) { return layer_name(i, "input_layernorm.weight"); });
  cur.take(L, {q64, c64}, [](int i) { return layer_name(i, "self_attn.q_proj.weight"); });
  cur.take(L, {kv64, c64}, [](int i) { return layer_name(i, "self_attn.k_proj.weight"); });
  cur.take(L, {kv64, c64}, [](int i) { return layer_name(i, "self_attn.v_proj.weight"); });
  cur.take(L, {c64, q64}, [](int i) { return layer_name(i, "self_attn.o_proj.weight"); });
  cur.take(L, {c64}, [](int i) { return layer_name(i, "post_attention_layernorm.weight"); });
  cur.take(L, {f64, c64}, [](int i) { return layer_name(i, "mlp.gate_proj.weight"); });
  cur.take(L, {c64, f64}, [](int i) { return layer_name(i, "mlp.down_proj.weight"); });
  cur.take(L, {f64, c64}, [](int i) { return layer_name(i, "mlp.up_proj.weight"); });
  cur.take(1, {c64}, [](int) { return std::string("model.norm.weight"); });
  cur.skip_f32(2 * uint64_t(T) * (HS / 2));
  if (!shared) cur.take(1, {v64, c64}, [](int) { return std::string("lm_head.weight"); });
  LT_ASSERT(cur.offset == actual);
  s.add_file(std::move(file));
  return m;
}

}  // namespace lt
