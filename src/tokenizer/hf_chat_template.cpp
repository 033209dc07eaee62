// HfChatTemplate: loading a model's chat template(s), the variables transformers passes, and the
// assistant segments for training (see hf_chat_template.h).
#include "tokenizer/hf_chat_template.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/json_parse.h"
#include "core/mapped_file.h"
#include "tokenizer/jinja/json.h"

namespace lt {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// transformers' _normalize_chat_messages (keys whose value is null dropped) and
// _alias_reasoning_fields ({"thinking": r, **message, "reasoning_content": r}).
jinja::Value message_value(const ojson& m, size_t i, const std::string& origin) {
  LT_CHECK(m.is_object(), "{}: messages[{}] must be an object with a \"role\", got {}", origin, i, excerpt(m.dump()));
  auto d = std::make_shared<jinja::DictObj>();
  const ojson* reasoning = nullptr;
  for (const char* k : {"reasoning_content", "thinking", "reasoning"})
    if (!reasoning && m.contains(k) && !m[k].is_null()) reasoning = &m[k];
  if (reasoning) d->set("thinking", jinja::from_json(*reasoning));
  for (auto it = m.begin(); it != m.end(); ++it)
    if (!it.value().is_null()) d->set(it.key(), jinja::from_json(it.value()));
  if (reasoning) d->set("reasoning_content", jinja::from_json(*reasoning));
  return jinja::Value(std::move(d));
}

// memcmp over 4 KiB chunks first: a rendering may be megabytes, and the byte loop is the slow part
size_t common_prefix(const std::string& a, const std::string& b) {
  const size_t m = std::min(a.size(), b.size());
  size_t n = 0;
  while (n + 4096 <= m && std::memcmp(a.data() + n, b.data() + n, 4096) == 0) n += 4096;
  while (n < m && a[n] == b[n]) ++n;
  return n;
}

size_t rstrip_whitespace(const std::string& s, size_t begin, size_t end) {
  while (end > begin && (s[end - 1] == ' ' || s[end - 1] == '\n' || s[end - 1] == '\t' || s[end - 1] == '\r')) --end;
  return end;
}

bool has_generation_tag(const std::string& src) {
  for (size_t p = src.find("{%"); p != std::string::npos; p = src.find("{%", p + 2)) {
    size_t q = p + 2;
    if (q < src.size() && src[q] == '-') ++q;
    while (q < src.size() && (src[q] == ' ' || src[q] == '\t' || src[q] == '\n')) ++q;
    if (src.compare(q, 10, "generation") == 0) return true;
  }
  return false;
}

std::vector<ChatSegment> cut(const std::string& text, std::vector<std::pair<size_t, size_t>> spans) {
  std::vector<ChatSegment> out;
  size_t cursor = 0;
  for (auto [b, e] : spans) {
    b = std::max(b, cursor);
    if (e <= b) continue;
    if (b > cursor) out.push_back({text.substr(cursor, b - cursor), false});
    out.push_back({text.substr(b, e - b), true});
    cursor = e;
  }
  if (cursor < text.size()) out.push_back({text.substr(cursor), false});
  return out;
}

}  // namespace

nlohmann::ordered_json read_special_tokens(const std::string& dir) {
  ojson out = ojson::object();
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path p = fs::path(dir) / file;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) continue;
    nlohmann::json cfg;
    try {
      cfg = load_json_file(p.string());
    } catch (const Error&) {
      continue;  // the tokenizer's own loading reports a malformed tokenizer_config.json
    }
    if (!cfg.is_object()) continue;
    for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
      if (out.contains(k) || !cfg.contains(k)) continue;
      const nlohmann::json& v = cfg[k];
      if (v.is_string()) out[k] = v.get<std::string>();
      else if (v.is_object() && v.contains("content") && v["content"].is_string()) out[k] = v["content"].get<std::string>();
    }
  }
  return out;
}

std::shared_ptr<const HfChatTemplate> HfChatTemplate::from_folder(const std::string& dir) {
  std::error_code ec;
  const fs::path jinja_file = fs::path(dir) / "chat_template.jinja";
  if (fs::is_regular_file(jinja_file, ec)) return from_file(jinja_file.string(), read_special_tokens(dir));
  const fs::path cfg_path = fs::path(dir) / "tokenizer_config.json";
  if (!fs::is_regular_file(cfg_path, ec)) return nullptr;
  const nlohmann::json cfg = load_json_file(cfg_path.string());
  if (!cfg.is_object() || !cfg.contains("chat_template") || cfg["chat_template"].is_null()) return nullptr;
  const nlohmann::json& ct = cfg["chat_template"];
  const std::string origin = cfg_path.string() + " chat_template";
  std::vector<std::pair<std::string, std::string>> sources;
  if (ct.is_string()) {
    sources.emplace_back("default", ct.get<std::string>());
  } else {
    LT_CHECK(ct.is_array(), "{}: expected a string or a list of {{\"name\", \"template\"}} objects, got {}", origin, ct.type_name());
    for (size_t i = 0; i < ct.size(); ++i) {
      const nlohmann::json& e = ct[i];
      LT_CHECK(e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("template") && e["template"].is_string(),
               "{}[{}]: expected {{\"name\": string, \"template\": string}}", origin, i);
      sources.emplace_back(e["name"].get<std::string>(), e["template"].get<std::string>());
    }
  }
  return std::make_shared<HfChatTemplate>(sources, origin, read_special_tokens(dir));
}

std::shared_ptr<const HfChatTemplate> HfChatTemplate::from_file(const std::string& path, const ojson& special) {
  return std::make_shared<HfChatTemplate>(std::vector<std::pair<std::string, std::string>>{{"default", read_text_file(path)}},
                                          path, special.is_object() ? special : ojson::object());
}

HfChatTemplate::HfChatTemplate(const std::vector<std::pair<std::string, std::string>>& sources, std::string origin,
                               ojson special_tokens)
    : origin_(std::move(origin)), special_(std::move(special_tokens)) {
  LT_CHECK(!sources.empty(), "{}: no chat template", origin_);
  for (const auto& [name, src] : sources) {
    std::string where = sources.size() == 1 ? origin_ : origin_ + " '" + name + "'";
    templates_.emplace_back(name, JinjaTemplate(src, where));
  }
}

std::vector<std::string> HfChatTemplate::names() const {
  std::vector<std::string> n;
  for (const auto& t : templates_) n.push_back(t.first);
  return n;
}

const JinjaTemplate& HfChatTemplate::select(const ChatRenderOptions& o) const {
  auto find = [&](const std::string& n) -> const JinjaTemplate* {
    for (const auto& t : templates_)
      if (t.first == n) return &t.second;
    return nullptr;
  };
  if (templates_.size() == 1 && (o.name.empty() || o.name == templates_[0].first)) return templates_[0].second;
  std::string list;
  for (const auto& t : templates_) list += (list.empty() ? "" : ", ") + t.first;
  if (!o.name.empty()) {
    const JinjaTemplate* t = find(o.name);
    LT_CHECK(t, "{}: no chat template named '{}'; it has: {}", origin_, o.name, list);
    return *t;
  }
  if (!o.tools.is_null())
    if (const JinjaTemplate* t = find("tool_use")) return *t;
  const JinjaTemplate* t = find("default");
  LT_CHECK(t, "{}: this model has several chat templates and none named 'default'; name one of: {}", origin_, list);
  return *t;
}

jinja::Rendered HfChatTemplate::render(const JinjaTemplate& t, const ojson& messages, const ChatRenderOptions& o,
                                       size_t n_messages) const {
  jinja::DictObj ctx;
  std::vector<jinja::Value> msgs;
  for (size_t i = 0; i < n_messages; ++i) msgs.push_back(message_value(messages[i], i, origin_));
  ctx.set("messages", jinja::make_list(std::move(msgs)));
  ctx.set("tools", o.tools.is_null() ? jinja::Value(jinja::None{}) : jinja::from_json(o.tools));
  ctx.set("documents", jinja::Value(jinja::None{}));
  ctx.set("add_generation_prompt", jinja::Value(o.add_generation_prompt));
  for (auto it = special_.begin(); it != special_.end(); ++it) ctx.set(it.key(), jinja::from_json(it.value()));
  if (o.vars.is_object())
    for (auto it = o.vars.begin(); it != o.vars.end(); ++it)
      if (it.key() != "messages") ctx.set(it.key(), jinja::from_json(it.value()));
  return t.render(ctx);
}

std::string HfChatTemplate::apply(const ojson& messages, const ChatRenderOptions& o) const {
  LT_CHECK(messages.is_array() && !messages.empty(), "{}: the conversation must be a non-empty list of messages", origin_);
  return render(select(o), messages, o, messages.size()).text;
}

std::vector<ChatSegment> HfChatTemplate::segments(const ojson& messages, const ChatRenderOptions& o) const {
  LT_CHECK(messages.is_array() && !messages.empty(), "{}: the conversation must be a non-empty list of messages", origin_);
  const JinjaTemplate& t = select(o);
  jinja::Rendered full = render(t, messages, o, messages.size());
  if (has_generation_tag(t.source())) return cut(full.text, full.generation);
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    if (!m.is_object() || !m.contains("role") || m["role"] != "assistant") continue;
    ChatRenderOptions before = o, through = o;
    before.add_generation_prompt = true;
    through.add_generation_prompt = false;
    const std::string p = i == 0 ? std::string() : render(t, messages, before, i).text;
    const std::string q = render(t, messages, through, i + 1).text;
    // the turn starts where the generation prompt and the turn part, and ends where the rendering
    // that stops after it parts from the whole (an end-of-text marker written only at the very end)
    const size_t begin = common_prefix(p, q), agree = common_prefix(full.text, q);
    const size_t end = rstrip_whitespace(q, begin, std::max(begin, agree));
    const bool has_text = m.contains("content") && m["content"].is_string() && !m["content"].get_ref<const std::string&>().empty();
    LT_CHECK(agree >= begin && (end > begin || !has_text),
             "{}: cannot find the assistant turn of messages[{}] by rendering: the conversation rendered up to it is "
             "not the start of the whole conversation's rendering (the template rewrites earlier turns, e.g. drops "
             "their reasoning). Mark the assistant turns with {{% generation %}} ... {{% endgeneration %}} in the "
             "template, or name a built-in template (chat_template: chatml)", origin_, i);
    if (end > begin) spans.emplace_back(begin, end);
  }
  return cut(full.text, spans);
}

}  // namespace lt
