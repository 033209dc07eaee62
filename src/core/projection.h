// The seven linear projections of a Llama-family decoder layer as a type: their PEFT / HF module
// names, the block that holds them (self_attn or mlp) and their HF tensor names. Shapes and biases
// come from the model (ModelConfig::linear_shape / has_bias); which of them LoRA adapts from
// LoraConfig (core/lora_config.h: lora_targets). Every module asks these, so the table is written once.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lt {

enum class Proj : uint8_t { Q, K, V, O, Gate, Up, Down };
inline constexpr int kNumProj = 7;
inline constexpr std::array<Proj, kNumProj> kProjs = {Proj::Q, Proj::K, Proj::V, Proj::O,
                                                      Proj::Gate, Proj::Up, Proj::Down};

const char* proj_module(Proj p);  // "q_proj", "k_proj", ..., "down_proj"
const char* proj_parent(Proj p);  // "self_attn" for q, k, v, o; "mlp" for gate, up, down
inline bool proj_in_attention(Proj p) { return p <= Proj::O; }
// The projection a PEFT / HF module name names ("q_proj"), or nullopt.
std::optional<Proj> parse_proj(std::string_view module);
// "model.layers.<layer>.<parent>.<module>.<what>", e.g. model.layers.3.mlp.up_proj.weight.
std::string proj_hf_name(int layer, Proj p, std::string_view what);

// Phi-3 stores q, k, v as one module self_attn.qkv_proj (rows q, then k, then v) and gate, up as
// mlp.gate_up_proj (rows gate, then up); PEFT adapts those fused modules. The fused module that
// holds p ("qkv_proj" for Q, K, V; "gate_up_proj" for Gate, Up), or nullptr (O, Down).
const char* fused_proj_module(Proj p);
// The first projection of p's fused group (Q for Q, K, V; Gate for Gate, Up); p itself otherwise.
inline Proj fused_group_head(Proj p) { return p <= Proj::V ? Proj::Q : p <= Proj::Up && p >= Proj::Gate ? Proj::Gate : p; }
// "qkv_proj" -> Q, "gate_up_proj" -> Gate (the group's head), or nullopt.
std::optional<Proj> parse_fused_proj(std::string_view module);
// "model.layers.<layer>.<parent>.<fused module>.<what>" of p's fused module (p must be fused).
std::string fused_hf_name(int layer, Proj p, std::string_view what);

}  // namespace lt
