// Model, Tokenizer (with its chat templates), generation and logits (include/leantune/model.h,
// tokenizer.h, chat_template.h, generator.h, sequence.h). Logits come back as numpy arrays over the engine's own buffer (a capsule owns it):
// nothing is copied on the way to Python.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <variant>
#include <vector>

#include "bindings.h"
#include "leantune/chat_template.h"
#include "leantune/error.h"
#include "leantune/generator.h"
#include "leantune/model.h"
#include "leantune/sequence.h"
#include "leantune/tokenizer.h"

namespace leantune_py {

using namespace nb::literals;
using FloatArray = nb::ndarray<nb::numpy, float>;

namespace {

// A numpy array over `values` (moved to the heap, freed with the array): rows × cols, or 1-D when rows < 0.
FloatArray owned_array(std::vector<float>&& values, long rows, size_t cols) {
  auto* heap = new std::vector<float>(std::move(values));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  if (rows < 0) return FloatArray(heap->data(), {heap->size()}, owner);
  return FloatArray(heap->data(), {size_t(rows), cols}, owner);
}

nb::dict config_dict(const leantune::ModelConfig& c) {
  nb::dict d;
  d["arch"] = c.arch;
  d["dim"] = c.dim;
  d["n_layers"] = c.n_layers;
  d["n_heads"] = c.n_heads;
  d["n_kv_heads"] = c.n_kv_heads;
  d["head_dim"] = c.head_dim;
  d["hidden_dim"] = c.hidden_dim;
  d["vocab_size"] = c.vocab_size;
  d["max_seq_len"] = c.max_seq_len;
  d["norm_eps"] = c.norm_eps;
  d["rope_theta"] = c.rope_theta;
  d["rope_scaling"] = c.rope_scaling;
  d["tie_embeddings"] = c.tie_embeddings;
  d["sliding_window"] = c.sliding_window;
  d["bos_token_id"] = c.bos_token_id;
  d["eos_token_id"] = c.eos_token_id;
  d["quantization"] = leantune::quantization_name(c.quantization);
  return d;
}

// The rows `leantune logits` writes: the logits after prefilling `prompt`, then after each id of
// `decode` fed one at a time through the KV cache.
FloatArray sequence_logits(const leantune::Model& model, const std::vector<int>& prompt, const std::vector<int>& decode,
                           int context, int prefill_block) {
  PendingError none;
  std::vector<float> rows = without_gil(none, [&] {
    leantune::Sequence seq(model, {.context = context, .prefill_block = prefill_block});
    const size_t v = size_t(model.config().vocab_size);
    std::vector<float> out;
    out.reserve((1 + decode.size()) * v);
    std::span<const float> l = seq.append(prompt);
    out.insert(out.end(), l.begin(), l.end());
    for (int id : decode) {
      l = seq.append(std::span<const int>(&id, 1));
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  });
  return owned_array(std::move(rows), long(1 + decode.size()), size_t(model.config().vocab_size));
}

struct GenerateArgs {
  leantune::GenerateOptions options;
  int context = 0;
};

// on_token(id, text) -> bool | None (False stops); without one, Ctrl-C is looked for every 50 ms.
// on_token is captured by reference (it outlives the call): a copy of the std::function made by
// the engine without the GIL must not touch Python reference counts.
leantune::TokenCallback token_callback(const nb::object& on_token, PendingError& pending) {
  if (!on_token.is_none()) {
    return [&on_token, &pending](int id, std::string_view text) {
      nb::gil_scoped_acquire gil;
      bool go_on = true;
      pending.run([&] {
        nb::object r = on_token(id, to_str(text));
        go_on = r.is_none() || nb::cast<bool>(r);
      });
      return go_on && !pending.pending();
    };
  }
  auto last = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  return [last, &pending](int, std::string_view) {
    auto now = std::chrono::steady_clock::now();
    if (now - *last < std::chrono::milliseconds(50)) return true;
    *last = now;
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) pending.fetch();
    return !pending.pending();
  };
}

nb::dict generate(const leantune::Model& model, const leantune::Tokenizer& tok,
                  const std::variant<std::string, std::vector<int>>& prompt, const GenerateArgs& a, const nb::object& on_token) {
  PendingError pending;
  leantune::TokenCallback cb = token_callback(on_token, pending);
  leantune::GenerateResult r = without_gil(pending, [&] {
    leantune::Generator gen(model, {.context = a.context});
    if (const auto* text = std::get_if<std::string>(&prompt)) return gen.generate(tok, *text, a.options, cb);
    return gen.generate(tok, std::span<const int>(std::get<std::vector<int>>(prompt)), a.options, cb);
  });
  nb::dict d;
  d["text"] = to_str(r.text);
  d["prompt_ids"] = r.prompt_ids;
  d["output_ids"] = r.output_ids;
  d["stop_reason"] = leantune::stop_reason_name(r.stop_reason);
  d["prefill_seconds"] = r.prefill_seconds;
  d["decode_seconds"] = r.decode_seconds;
  d["decode_tokens"] = r.decode_tokens;
  return d;
}

void bind_tokenizer(nb::module_& m) {
  nb::class_<leantune::Tokenizer>(m, "Tokenizer", "A tokenizer.json or llama2.c tokenizer (leantune::Tokenizer).")
      .def("__init__", [](leantune::Tokenizer* self, const std::string& path) {
             nb::gil_scoped_release release;
             new (self) leantune::Tokenizer(path);
           }, "path"_a)
      .def("encode", [](const leantune::Tokenizer& t, const std::string& text, bool add_special) {
             nb::gil_scoped_release release;
             return t.encode(text, add_special);
           }, "text"_a, "add_special"_a = true)
      .def("decode", [](const leantune::Tokenizer& t, const std::vector<int>& ids, bool skip_special) {
             std::string s;
             {
               nb::gil_scoped_release release;
               s = t.decode(ids, skip_special);
             }
             return to_str(s);
           }, "ids"_a, "skip_special"_a = false)
      .def_prop_ro("vocab_size", &leantune::Tokenizer::vocab_size)
      .def_prop_ro("bos_id", &leantune::Tokenizer::bos_id)
      .def_prop_ro("eos_id", &leantune::Tokenizer::eos_id)
      .def_prop_ro("path", &leantune::Tokenizer::path)
      .def("is_special", &leantune::Tokenizer::is_special, "id"_a)
      .def("token_text", [](const leantune::Tokenizer& t, int id) { return to_str(t.token_text(id)); }, "id"_a)
      .def("check_fits", &leantune::Tokenizer::check_fits, "model"_a)
      .def_prop_ro("has_chat_template", &leantune::Tokenizer::has_chat_template)
      .def("apply_chat_template_json", [](const leantune::Tokenizer& t, const std::string& messages_json,
                                          const leantune::ChatOptions& o) {
             std::string s;
             {
               nb::gil_scoped_release release;
               s = t.apply_chat_template_json(messages_json, o);
             }
             return to_str(s);
           }, "messages_json"_a, "options"_a)
      .def("encode_chat_json", [](const leantune::Tokenizer& t, const std::string& messages_json,
                                  const leantune::ChatOptions& o) {
             nb::gil_scoped_release release;
             return t.encode_chat_json(messages_json, o);
           }, "messages_json"_a, "options"_a);
}

// ChatOptions from keywords (the package passes tools and template variables as JSON text).
void bind_chat_options(nb::module_& m) {
  nb::class_<leantune::ChatOptions>(m, "ChatOptions", "How a conversation is rendered (leantune::ChatOptions).")
      .def("__init__", [](leantune::ChatOptions* self, bool add_generation_prompt, const std::string& tools_json,
                          const std::string& vars_json, const std::string& chat_template) {
             new (self) leantune::ChatOptions{add_generation_prompt, tools_json, vars_json, chat_template};
           }, nb::kw_only(), "add_generation_prompt"_a = true, "tools_json"_a = "", "vars_json"_a = "",
           "chat_template"_a = "")
      .def_rw("add_generation_prompt", &leantune::ChatOptions::add_generation_prompt)
      .def_rw("tools_json", &leantune::ChatOptions::tools_json)
      .def_rw("vars_json", &leantune::ChatOptions::vars_json)
      .def_rw("chat_template", &leantune::ChatOptions::chat_template);
}

}  // namespace

void bind_model(nb::module_& m) {
  bind_chat_options(m);
  bind_tokenizer(m);
  nb::class_<leantune::Model>(m, "Model", "A model's weights loaded for inference (leantune::Model).")
      .def("__init__", [](leantune::Model* self, const std::string& path, const std::string& adapter,
                          const std::string& quantization, bool double_quant, int threads, bool reference,
                          const std::string& weights, const std::string& kv_cache, bool llama_cpp_numerics) {
             leantune::ModelOptions o;
             o.adapter = adapter;
             o.quantization = leantune::parse_quantization(quantization);
             o.weights = leantune::parse_weights(weights);
             if (kv_cache != "f32" && kv_cache != "bf16") throw leantune::Error("kv_cache '" + kv_cache + "': expected f32 or bf16");
             o.kv_cache = kv_cache == "bf16" ? leantune::KvCache::BF16 : leantune::KvCache::F32;
             o.double_quant = double_quant;
             o.threads = threads;
             if (reference && llama_cpp_numerics)
               throw leantune::Error("reference_kernels and llama_cpp_numerics choose different kernels; give one");
             o.kernels = reference            ? leantune::Kernels::Reference
                         : llama_cpp_numerics ? leantune::Kernels::LlamaCpp
                                              : leantune::Kernels::Fast;
             nb::gil_scoped_release release;
             new (self) leantune::Model(path, o);
           }, "path"_a, nb::kw_only(), "adapter"_a = "", "quantization"_a = "none", "double_quant"_a = false,
           "threads"_a = 0, "reference"_a = false, "weights"_a = "f32", "kv_cache"_a = "f32",
           "llama_cpp_numerics"_a = false)
      .def_prop_ro("path", &leantune::Model::path)
      .def_prop_ro("config", [](const leantune::Model& mo) { return config_dict(mo.config()); })
      .def_prop_ro("parameter_count", &leantune::Model::parameter_count)
      .def_prop_ro("memory_bytes", &leantune::Model::memory_bytes)
      .def_prop_ro("threads", &leantune::Model::threads)
      .def_prop_ro("kernels", &leantune::Model::kernels_name)
      .def("logits", [](const leantune::Model& mo, const std::vector<int>& ids) {
             PendingError none;
             std::vector<float> v = without_gil(none, [&] { return mo.logits(ids); });
             return owned_array(std::move(v), -1, 0);
           }, "ids"_a)
      .def("sequence_logits", &sequence_logits, "prompt"_a, "decode"_a, "context"_a = 0, "prefill_block"_a = 0)
      .def("generate", [](const leantune::Model& mo, const leantune::Tokenizer& tok,
                          const std::variant<std::string, std::vector<int>>& prompt, int max_new_tokens,
                          float temperature, int top_k, float top_p, float min_p, float repetition_penalty,
                          int no_repeat_ngram_size, uint64_t seed, const std::vector<std::string>& stop,
                          bool stop_at_eos, bool add_bos, int context, nb::object on_token) {
             GenerateArgs a;
             a.options.max_new_tokens = max_new_tokens;
             a.options.stop = stop;
             a.options.stop_at_eos = stop_at_eos;
             a.options.add_bos = add_bos;
             a.options.sampling = {temperature, top_k, top_p, min_p, repetition_penalty, no_repeat_ngram_size, seed};
             a.context = context;
             return generate(mo, tok, prompt, a, on_token);
           }, "tokenizer"_a, "prompt"_a, nb::kw_only(), "max_new_tokens"_a = 256, "temperature"_a = 1.0f,
           "top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f, "repetition_penalty"_a = 1.0f,
           "no_repeat_ngram_size"_a = 0, "seed"_a = 0, "stop"_a = std::vector<std::string>{}, "stop_at_eos"_a = true,
           "add_bos"_a = true, "context"_a = 0, "on_token"_a = nb::none());
}

}  // namespace leantune_py
