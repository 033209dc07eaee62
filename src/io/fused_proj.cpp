// Splitting and fusing Phi-3's qkv_proj / gate_up_proj (io/fused_proj.h).
#include "io/fused_proj.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace lt {

namespace {

// The projections of each fused group, in row order.
constexpr Proj kQkv[] = {Proj::Q, Proj::K, Proj::V};
constexpr Proj kGateUp[] = {Proj::Gate, Proj::Up};

template <class F>
void for_each_group(F&& f) {
  f(std::vector<Proj>(std::begin(kQkv), std::end(kQkv)));
  f(std::vector<Proj>(std::begin(kGateUp), std::end(kGateUp)));
}

// Rows [first, first + rows) of a (R, ...) tensor as its own tensor named `name`.
TensorInfo row_view(const TensorInfo& t, const std::string& name, int64_t first, int64_t rows) {
  TensorInfo v = t;
  v.name = name;
  const size_t row_bytes = t.nbytes / size_t(t.shape[0]);
  v.shape[0] = rows;
  v.data = static_cast<const uint8_t*>(t.data) + size_t(first) * row_bytes;
  v.nbytes = size_t(rows) * row_bytes;
  return v;
}

}  // namespace

void split_fused_tensors(const ModelConfig& c, TensorSet& ts) {
  if (!c.fused_proj) return;
  for (int l = 0; l < c.n_layers; ++l)
    for_each_group([&](const std::vector<Proj>& g) {
      for (const char* what : {"weight", "bias"}) {
        const std::string fname = fused_hf_name(l, g[0], what);
        const TensorInfo* f = ts.find(fname);
        if (!f) continue;
        const TensorInfo fused = *f;
        const int64_t rows = c.fused_rows(g[0]).second, in = c.linear_shape(g[0]).first;
        const std::vector<int64_t> want = what[0] == 'w' ? std::vector<int64_t>{rows, in} : std::vector<int64_t>{rows};
        LT_CHECK(fused.shape == want, "{}: tensor '{}' has shape [{}], expected [{}] ({} = {} rows{})", fused.file,
                 fname, fmt::join(fused.shape, ", "), fmt::join(want, ", "), fused_proj_module(g[0]),
                 g.size() == 3 ? "q + k + v" : "gate + up", what[0] == 'w' ? " by hidden_size" : "");
        ts.erase(fname);
        for (Proj p : g)
          ts.add(row_view(fused, proj_hf_name(l, p, what), c.fused_rows(p).first, c.linear_shape(p).second));
      }
    });
}

void fuse_proj_tensors(const ModelConfig& c, std::vector<TensorInfo>& ts, std::vector<std::vector<uint8_t>>& storage) {
  if (!c.fused_proj) return;
  storage.reserve(storage.size() + size_t(c.n_layers) * 4);
  auto find = [&](const std::string& n) {
    return std::find_if(ts.begin(), ts.end(), [&](const TensorInfo& t) { return t.name == n; });
  };
  for (int l = 0; l < c.n_layers; ++l)
    for_each_group([&](const std::vector<Proj>& g) {
      for (const char* what : {"weight", "bias"}) {
        auto head = find(proj_hf_name(l, g[0], what));
        if (head == ts.end()) continue;
        TensorInfo fused = *head;
        fused.name = fused_hf_name(l, g[0], what);
        fused.shape[0] = 0;
        std::vector<uint8_t>& buf = storage.emplace_back();
        for (Proj p : g) {
          auto it = find(proj_hf_name(l, p, what));
          LT_CHECK(it != ts.end() && it->dtype == head->dtype, "{}: cannot write '{}': '{}' is missing or has another "
                   "dtype", head->file, fused.name, proj_hf_name(l, p, what));
          const auto* b = static_cast<const uint8_t*>(it->data);
          buf.insert(buf.end(), b, b + it->nbytes);
          fused.shape[0] += it->shape[0];
        }
        fused.data = buf.data();
        fused.nbytes = buf.size();
        *find(proj_hf_name(l, g[0], what)) = fused;
        for (size_t i = 1; i < g.size(); ++i) ts.erase(find(proj_hf_name(l, g[i], what)));
      }
    });
}

void split_fused_adapter(LoadedAdapter& ad, const ModelConfig& c, const std::string& dir) {
  TensorSet& ts = ad.tensors;
  // modules the base does not have
  for (const auto& [name, t] : ts.all())
    for (Proj p : kProjs) {
      const std::string own = std::string(".") + proj_module(p) + ".", fused = fused_proj_module(p)
                                                                                   ? std::string(".") + fused_proj_module(p) + "."
                                                                                   : std::string("\x01");
      LT_CHECK(!(c.fused_proj && c.is_fused(p) && name.find(own) != std::string::npos), "{}: tensor '{}' adapts {}, "
               "which this Phi-3 base does not have: it fuses q/k/v into qkv_proj and gate/up into gate_up_proj (PEFT "
               "adapts {})", dir, name, proj_module(p), fmt::join(phi3_linear_modules(), ", "));
      LT_CHECK(c.fused_proj || name.find(fused) == std::string::npos, "{}: tensor '{}' adapts {}, a Phi-3 fused "
               "module; this base (model_type {}) has the separate projections {}", dir, name, fused_proj_module(p),
               c.arch, fmt::join(llama_linear_modules(), ", "));
    }
  if (!c.fused_proj) return;
  const int64_t R = ad.config.r;
  for (int l = 0; l < c.n_layers; ++l)
    for_each_group([&](const std::vector<Proj>& g) {
      const std::string fm = fused_proj_module(g[0]);
      const int64_t rows = c.fused_rows(g[0]).second, in = c.linear_shape(g[0]).first;
      if (const TensorInfo* a = ts.find(peft_lora_key(l, fm, true))) {
        const TensorInfo A = *a;
        LT_CHECK(A.shape == std::vector<int64_t>({R, in}), "{}: tensor '{}' has shape [{}], expected [{}, {}]", dir,
                 A.name, fmt::join(A.shape, ", "), R, in);
        ts.erase(A.name);
        for (Proj p : g) ts.add([&] { TensorInfo v = A; v.name = peft_lora_key(l, proj_module(p), true); return v; }());
      }
      auto split_rows = [&](const std::string& key, std::vector<int64_t> want, auto key_of) {
        const TensorInfo* f = ts.find(key);
        if (!f) return;
        const TensorInfo t = *f;
        LT_CHECK(t.shape == want, "{}: tensor '{}' has shape [{}], expected [{}] ({} rows of this base's {})", dir,
                 key, fmt::join(t.shape, ", "), fmt::join(want, ", "), rows, fm);
        ts.erase(key);
        for (Proj p : g) ts.add(row_view(t, key_of(proj_module(p)), c.fused_rows(p).first, c.linear_shape(p).second));
      };
      split_rows(peft_lora_key(l, fm, false), {rows, R}, [&](const char* m) { return peft_lora_key(l, m, false); });
      split_rows(peft_magnitude_key(l, fm), {rows}, [&](const char* m) { return peft_magnitude_key(l, m); });
      split_rows(peft_bias_key(l, fm), {rows}, [&](const char* m) { return peft_bias_key(l, m); });
    });
  std::vector<std::string> targets;
  for (const auto& t : ad.config.target_modules) {  // a module name, or a path ending in one
    const size_t dot = t.rfind('.');
    const std::string prefix = dot == std::string::npos ? "" : t.substr(0, dot + 1);
    const auto head = parse_fused_proj(dot == std::string::npos ? t : t.substr(dot + 1));
    if (!head) {
      targets.push_back(t);
      continue;
    }
    for (Proj p : kProjs)
      if (fused_group_head(p) == *head) targets.push_back(prefix + proj_module(p));
  }
  ad.config.target_modules = targets;
}

}  // namespace lt
