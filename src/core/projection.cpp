// Names of the seven projections (core/projection.h).
#include "core/projection.h"

#include <fmt/format.h>

namespace lt {

namespace {
constexpr const char* kModules[kNumProj] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}  // namespace

const char* proj_module(Proj p) { return kModules[int(p)]; }

const char* proj_parent(Proj p) { return proj_in_attention(p) ? "self_attn" : "mlp"; }

std::optional<Proj> parse_proj(std::string_view module) {
  for (Proj p : kProjs)
    if (module == kModules[int(p)]) return p;
  return std::nullopt;
}

std::string proj_hf_name(int layer, Proj p, std::string_view what) {
  return fmt::format("model.layers.{}.{}.{}.{}", layer, proj_parent(p), proj_module(p), what);
}

const char* fused_proj_module(Proj p) {
  if (p <= Proj::V) return "qkv_proj";
  if (p == Proj::Gate || p == Proj::Up) return "gate_up_proj";
  return nullptr;
}

std::optional<Proj> parse_fused_proj(std::string_view module) {
  if (module == "qkv_proj") return Proj::Q;
  if (module == "gate_up_proj") return Proj::Gate;
  return std::nullopt;
}

std::string fused_hf_name(int layer, Proj p, std::string_view what) {
  return fmt::format("model.layers.{}.{}.{}.{}", layer, proj_parent(p), fused_proj_module(p), what);
}

}  // namespace lt
