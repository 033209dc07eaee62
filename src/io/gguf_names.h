// The one table between Hugging Face tensor names and llama.cpp's GGUF names for a Llama-family
// model (convert_hf_to_gguf.py's MODEL_TENSOR names), used by the GGUF export and import:
//   model.embed_tokens.weight                 token_embd.weight
//   model.norm.weight                         output_norm.weight
//   lm_head.weight                            output.weight
//   model.layers.N.input_layernorm.weight     blk.N.attn_norm.weight
//   model.layers.N.post_attention_layernorm.weight  blk.N.ffn_norm.weight
//   model.layers.N.self_attn.q_proj.{weight,bias}   blk.N.attn_q.{weight,bias}  (k, v, o: attn_k,
//                                             attn_v, attn_output; mlp gate/up/down: ffn_gate, ffn_up, ffn_down)
#pragma once
#include <string>
#include <string_view>

#include "core/projection.h"

namespace lt::gguf {

// "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"
const char* proj_gguf_name(Proj p);

// The GGUF name of a Hugging Face tensor name, "" when the table has none.
std::string gguf_name(std::string_view hf_name);
// The Hugging Face name of a GGUF tensor name, "" when the table has none.
std::string hf_name(std::string_view gguf_name);

}  // namespace lt::gguf
