// HF <-> GGUF tensor names: the global tensors, then per layer "model.layers.N." <-> "blk.N."
// followed by one of the per-layer pairs.
#include "io/gguf_names.h"

#include <charconv>
#include <utility>
#include <vector>

namespace lt::gguf {

namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;  // {hf, gguf}

const Pairs& global_names() {
  static const Pairs p = {{"model.embed_tokens.weight", "token_embd.weight"},
                          {"model.norm.weight", "output_norm.weight"},
                          {"lm_head.weight", "output.weight"}};
  return p;
}

// Per layer, after "model.layers.N." / "blk.N.".
const Pairs& layer_names() {
  static const Pairs p = [] {
    Pairs v = {{"input_layernorm.weight", "attn_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"}};
    for (Proj q : kProjs)
      for (const char* what : {"weight", "bias"})
        v.push_back({std::string(proj_parent(q)) + "." + proj_module(q) + "." + what,
                     std::string(proj_gguf_name(q)) + "." + what});
    return v;
  }();
  return p;
}

// `name` = prefix + N + "." + rest: N and rest, or false.
bool split_layer(std::string_view name, std::string_view prefix, std::string_view* layer, std::string_view* rest) {
  if (name.substr(0, prefix.size()) != prefix) return false;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  int n = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + dot, n);
  if (ec != std::errc() || end != name.data() + dot || (dot > 1 && name[0] == '0')) return false;
  *layer = name.substr(0, dot);
  *rest = name.substr(dot + 1);
  return true;
}

std::string translate(std::string_view name, bool to_gguf) {
  for (const auto& [hf, gg] : global_names())
    if (name == (to_gguf ? hf : gg)) return to_gguf ? gg : hf;
  std::string_view layer, rest;
  if (!split_layer(name, to_gguf ? "model.layers." : "blk.", &layer, &rest)) return "";
  for (const auto& [hf, gg] : layer_names())
    if (rest == (to_gguf ? hf : gg))
      return (to_gguf ? "blk." : "model.layers.") + std::string(layer) + "." + (to_gguf ? gg : hf);
  return "";
}

}  // namespace

const char* proj_gguf_name(Proj p) {
  static const char* names[kNumProj] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  return names[int(p)];
}

std::string gguf_name(std::string_view hf) { return translate(hf, true); }
std::string hf_name(std::string_view gg) { return translate(gg, false); }

}  // namespace lt::gguf
