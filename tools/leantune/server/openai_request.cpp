// Parsing and checking OpenAI completion / chat requests (openai_request.h).
#include "openai_request.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "chat_format.h"
#include "leantune/error.h"
#include "leantune/tokenizer.h"

namespace lt::serve {

using json = nlohmann::json;

std::string error_body(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError(400, param + ": " + msg, param); }

// The field `key` when present and not null.
const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& j, const char* key, double def, double lo, double hi, const char* meaning) {
  const json* f = field(j, key);
  if (!f) return def;
  if (!f->is_number()) bad(key, "expected a number");
  const double v = f->get<double>();
  if (!(v >= lo && v <= hi)) bad(key, std::to_string(v) + " is out of range (" + meaning + ")");
  return v;
}

long long integer(const json& j, const char* key, long long def, long long lo, long long hi, const char* meaning) {
  const json* f = field(j, key);
  if (!f) return def;
  if (!f->is_number_integer()) bad(key, "expected an integer");
  const long long v = f->get<long long>();
  if (v < lo || v > hi) bad(key, std::to_string(v) + " is out of range (" + meaning + ")");
  return v;
}

bool boolean(const json& j, const char* key, bool def) {
  const json* f = field(j, key);
  if (!f) return def;
  if (!f->is_boolean()) bad(key, "expected true or false");
  return f->get<bool>();
}

std::vector<int> token_ids(const json& a, const leantune::Tokenizer& tok) {
  std::vector<int> ids;
  for (const json& t : a) {
    if (!t.is_number_integer()) bad("prompt", "a list of token ids holds a non-integer");
    const long long v = t.get<long long>();
    if (v < 0 || v >= tok.vocab_size()) bad("prompt", "token id " + std::to_string(v) + " is outside the vocabulary");
    ids.push_back(int(v));
  }
  return ids;
}

std::vector<std::vector<int>> completion_prompts(const json& j, const leantune::Tokenizer& tok) {
  const json* p = field(j, "prompt");
  if (!p) bad("prompt", "missing: give a string, a list of strings or a list of token ids");
  if (p->is_string()) return {tok.encode(p->get<std::string>(), true)};
  if (!p->is_array() || p->empty()) bad("prompt", "expected a string, a list of strings or token ids");
  if ((*p)[0].is_number()) return {token_ids(*p, tok)};
  std::vector<std::vector<int>> out;
  for (const json& e : *p) {
    if (e.is_string()) out.push_back(tok.encode(e.get<std::string>(), true));
    else if (e.is_array()) out.push_back(token_ids(e, tok));
    else bad("prompt", "a list element is neither a string nor a list of token ids");
  }
  return out;
}

// content: a string, or a list of {"type": "text", "text": ...} parts.
std::string message_content(const json& m, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  const json* c = field(m, "content");
  if (!c) return "";
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) bad(where, "expected a string or a list of text parts");
  std::string s;
  for (const json& part : *c) {
    // each member's type checked before it is read (json::value would throw on a non-string "type")
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    if (!type || !type->is_string() || *type != "text" || !part.contains("text") || !part["text"].is_string())
      bad(where, "only text parts ({\"type\": \"text\", \"text\": ...}) are supported");
    s += part["text"].get<std::string>();
  }
  return s;
}

void chat_prompt(const json& j, const leantune::Tokenizer& tok, const std::string& tmpl, ParsedRequest& r) {
  const json* ms = field(j, "messages");
  if (!ms || !ms->is_array() || ms->empty()) bad("messages", "expected a non-empty list of messages");
  ChatPrompt p;
  if (is_jinja_template(tmpl)) {  // the model's template sees the messages and tools as they are
    const json* tools = field(j, "tools");
    try {
      p = format_chat_json(tmpl, ms->dump(), tools && !tools->is_null() ? tools->dump() : "", tok);
    } catch (const leantune::Error& e) {
      bad("messages", e.what());
    }
    r.prompts = {tok.encode(p.text, p.add_special)};
    for (const std::string& s : p.stops) r.stop_token_ids.push_back(tok.encode(s, false)[0]);
    return;
  }
  std::vector<ChatMessage> msgs;
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad("messages[" + std::to_string(i) + "]", "expected an object with a string role");
    msgs.push_back({m["role"].get<std::string>(), message_content(m, i)});
  }
  try {
    p = format_chat(tmpl, msgs, tok);
  } catch (const leantune::Error& e) {
    bad("messages", e.what());
  }
  r.prompts = {tok.encode(p.text, true)};
  for (const std::string& s : p.stops) {
    const std::vector<int> ids = tok.encode(s, false);
    if (ids.size() == 1 && tok.is_special(ids[0])) r.stop_token_ids.push_back(ids[0]);
    else r.options.stop.push_back(s);
  }
}

void stop_strings(const json& j, ParsedRequest& r) {
  const json* s = field(j, "stop");
  if (!s) return;
  if (s->is_string()) {
    r.options.stop.push_back(s->get<std::string>());
    return;
  }
  if (!s->is_array() || s->size() > 16) bad("stop", "expected a string or a list of at most 16 strings");
  for (const json& e : *s) {
    if (!e.is_string()) bad("stop", "expected a string or a list of at most 16 strings");
    r.options.stop.push_back(e.get<std::string>());
  }
}

// Parameters the server does not implement: refused when set to something that would matter.
void refuse_unsupported(const json& j) {
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (number(j, k, 0, -2, 2, "-2 to 2") != 0)
      bad(k, "is not supported by this server; use repetition_penalty (HF's) instead");
  if (boolean(j, "echo", false)) bad("echo", "is not supported by this server");
  if (const json* s = field(j, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
    bad("suffix", "is not supported by this server");
  if (const json* lb = field(j, "logit_bias"); lb && !lb->empty()) bad("logit_bias", "is not supported by this server");
  if (const json* t = field(j, "tools"); t && !t->empty()) bad("tools", "tool calls are not supported by this server");
}

// Beam search: use_beam_search with best_of (default n) beams, or num_beams > 1; n hypotheses back.
void beam_options(const json& j, ParsedRequest& r) {
  const bool use = boolean(j, "use_beam_search", false);
  const int best_of = int(integer(j, "best_of", r.n, 1, 128, "1 to 128"));
  const int num_beams = int(integer(j, "num_beams", 1, 1, 128, "1 to 128"));
  if (!use && num_beams == 1) {
    if (best_of != r.n && best_of != 1) bad("best_of", "without beam search only best_of = n is supported; add "
                                        "\"use_beam_search\": true");
    return;
  }
  leantune::BeamSearchOptions& b = r.beam;
  b.num_beams = num_beams > 1 ? num_beams : std::max(best_of, 2);
  if (use && num_beams > 1 && field(j, "best_of") && best_of != num_beams)
    bad("best_of", "differs from num_beams; give one of them");
  if (r.n > b.num_beams) bad("n", std::to_string(r.n) + " hypotheses asked of " + std::to_string(b.num_beams) +
                             " beams; n must be at most best_of / num_beams");
  b.num_return = r.n;
  b.length_penalty = float(number(j, "length_penalty", 1.0, -1e6, 1e6, "a finite number"));
  if (const json* e = field(j, "early_stopping")) {
    if (e->is_boolean()) b.early_stopping = e->get<bool>() ? "true" : "false";
    else if (e->is_string() && e->get<std::string>() == "never") b.early_stopping = "never";
    else bad("early_stopping", "expected true, false or \"never\"");
  }
  if (r.logprobs) bad("logprobs", "is not available with beam search");
}

void stop_token_ids(const json& j, const leantune::Tokenizer& tok, ParsedRequest& r) {
  const json* s = field(j, "stop_token_ids");
  if (!s) return;
  if (!s->is_array()) bad("stop_token_ids", "expected a list of token ids");
  for (const json& t : *s) {
    if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() >= tok.vocab_size())
      bad("stop_token_ids", "expected token ids of the vocabulary (0 to " + std::to_string(tok.vocab_size() - 1) + ")");
    r.stop_token_ids.push_back(t.get<int>());
  }
}

}  // namespace

json parse_body(const std::string& body) {
  const json::parser_callback_t depth_check = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxRequestDepth)
      throw ApiError(400, "the request body nests deeper than " + std::to_string(kMaxRequestDepth) + " levels");
    return true;
  };
  try {
    return json::parse(body, depth_check);
  } catch (const json::exception& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + leantune::excerpt(e.what(), 160));
  }
}

ParsedRequest parse_request(const std::string& body, bool chat, const leantune::Tokenizer& tok,
                            const std::string& chat_template) {
  const json j = parse_body(body);
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  ParsedRequest r;
  r.chat = chat;
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) bad("model", "expected a string");
    r.model = m->get<std::string>();
  }
  refuse_unsupported(j);
  const long long big = 1LL << 30;
  if (chat) {
    chat_prompt(j, tok, chat_template, r);
    r.max_tokens = int(integer(j, "max_completion_tokens", integer(j, "max_tokens", -1, -big, big, ""), -big, big, ""));
    r.logprobs = boolean(j, "logprobs", false);
  } else {
    r.prompts = completion_prompts(j, tok);
    r.max_tokens = int(integer(j, "max_tokens", 16, -big, big, ""));
    r.logprobs = integer(j, "logprobs", -1, 0, 20, "0 to 20") >= 0;
  }
  if (r.max_tokens < 0 && (field(j, "max_tokens") || field(j, "max_completion_tokens")))
    bad(field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
        std::to_string(r.max_tokens) + " is negative; give 0 or more (or leave it out)");
  r.n = int(integer(j, "n", 1, 1, 128, "1 to 128"));
  r.stream = boolean(j, "stream", false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "expected an object");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  if (const json* s = field(j, "seed")) {
    if (!s->is_number_integer()) bad("seed", "expected an integer");
    r.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<long long>());
  }
  stop_strings(j, r);
  leantune::SamplingOptions& s = r.options.sampling;
  s.temperature = float(number(j, "temperature", 1.0, 0, 1e6, "0 or more; 0 is greedy"));
  s.top_p = float(number(j, "top_p", 1.0, 0, 1, "0 to 1"));
  if (s.top_p <= 0) bad("top_p", "must be more than 0");
  s.top_k = int(integer(j, "top_k", 0, 0, big, "0 or more; 0 is off"));
  s.min_p = float(number(j, "min_p", 0.0, 0, 1, "0 to 1"));
  s.repetition_penalty = float(number(j, "repetition_penalty", 1.0, 1e-6, 1e6, "more than 0; 1 is off"));
  s.no_repeat_ngram_size = int(integer(j, "no_repeat_ngram_size", 0, 0, 1 << 20, "0 or more; 0 is off"));
  r.options.stop_at_eos = !boolean(j, "ignore_eos", false);
  stop_token_ids(j, tok, r);
  beam_options(j, r);
  return r;
}

}  // namespace lt::serve
