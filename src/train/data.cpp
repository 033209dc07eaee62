// Dataset loading for fine-tuning (see data.h): text documents and JSONL records rendered to
// pieces and tokenized piece by piece, so that every label lines up with its id.
// BOS comes from what the tokenizer's add_special puts BEFORE the text (found once per load by
// comparing encode("a", true) with encode("a", false)); whatever add_special puts after the text
// is not used: EOS is appended explicitly so it can be trained or not.
#include "train/data.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"
#include "tokenizer/hf_chat_template.h"

namespace lt {

namespace {

namespace fs = std::filesystem;

std::vector<int> special_prefix(const Tokenizer& tok) {
  std::vector<int> with = tok.encode("a", true), without = tok.encode("a", false);
  if (without.empty() || with.size() < without.size()) return {};
  auto it = std::search(with.begin(), with.end(), without.begin(), without.end());
  if (it == with.end()) return {};
  return std::vector<int>(with.begin(), it);
}

Example encode_rendered_with(const Tokenizer& tok, const std::vector<int>& prefix, const RenderedPrompt& r,
                             bool add_eos) {
  Example ex;
  ex.ids = prefix;
  ex.labels.assign(prefix.size(), kIgnoreLabel);
  auto push = [&](int id, bool train) {
    ex.ids.push_back(id);
    ex.labels.push_back(train ? id : kIgnoreLabel);
  };
  // Adjacent text pieces with the same train flag are encoded together (fewer artificial token
  // boundaries); a change of flag or a token-id piece is a boundary.
  std::string run;
  bool run_train = false;
  auto flush = [&]() {
    if (run.empty()) return;
    for (int id : tok.encode(run, false)) push(id, run_train);
    run.clear();
  };
  for (const PromptPiece& p : r.pieces) {
    if (p.token_id >= 0) {
      flush();
      push(p.token_id, p.train);
    } else if (!p.text.empty()) {
      if (!run.empty() && run_train != p.train) flush();
      run_train = p.train;
      run += p.text;
    }
  }
  flush();
  if (add_eos && r.append_eos && tok.eos_id() >= 0) push(tok.eos_id(), r.eos_train);
  return ex;
}

Example encode_text_with(const Tokenizer& tok, const std::vector<int>& prefix, std::string_view text, bool add_eos) {
  RenderedPrompt r;
  r.pieces.push_back(PromptPiece{std::string(text), -1, true});
  r.append_eos = true;
  r.eos_train = true;
  Example ex = encode_rendered_with(tok, prefix, r, add_eos);
  ex.labels = ex.ids;  // loss on every token (the prefix's label is never a shifted target)
  return ex;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  LT_CHECK(f.good(), "data: cannot open '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  LT_CHECK(!f.bad(), "data: error reading '{}'", path);
  return ss.str();
}

const nlohmann::json& get_string(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  LT_CHECK(it != j.end(), "missing key \"{}\"", key);
  LT_CHECK(it->is_string(), "\"{}\" must be a string, got {}", key, it->type_name());
  return *it;
}

std::string keys_of(const nlohmann::json& j) {
  std::string s;
  for (auto it = j.begin(); it != j.end(); ++it) s += (s.empty() ? "" : ", ") + it.key();
  return "[" + s + "]";
}

// A {"messages"} record through a Jinja template: its segments, assistant ones trained, no BOS prefix.
Example jinja_chat_example(std::string_view line, const Tokenizer& tok, const DataOptions& opt) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);  // key order kept (tojson shows it)
  const auto& m = j["messages"];
  LT_CHECK(m.is_array() && !m.empty(), "\"messages\" must be a non-empty array, got {}", m.type_name());
  bool any_assistant = false;
  for (size_t i = 0; i < m.size(); ++i) {
    LT_CHECK(m[i].is_object() && m[i].contains("role") && m[i]["role"].is_string(),
             "messages[{}] must be an object with a string \"role\"", i);
    any_assistant = any_assistant || m[i]["role"] == "assistant";
  }
  LT_CHECK(any_assistant, "chat: no assistant message, so nothing to train on");
  ChatRenderOptions ro;
  ro.name = opt.jinja_name;
  if (j.contains("tools") && !j["tools"].is_null()) ro.tools = j["tools"];
  RenderedPrompt r;
  r.append_eos = false;  // the template writes each turn's end marker
  for (ChatSegment& s : opt.jinja->segments(m, ro)) r.pieces.push_back(PromptPiece{std::move(s.text), -1, s.assistant});
  return encode_rendered_with(tok, {}, r, opt.add_eos);
}

Example example_from_json_with(std::string_view line, const Tokenizer& tok, const std::vector<int>& prefix,
                               const DataOptions& opt) {
  nlohmann::json j = parse_json(line, "");
  LT_CHECK(j.is_object(), "expected a JSON object, got {}", j.type_name());
  if (j.contains("messages") && opt.jinja) return jinja_chat_example(line, tok, opt);
  if (j.contains("messages")) {
    const auto& m = j["messages"];
    LT_CHECK(m.is_array(), "\"messages\" must be an array, got {}", m.type_name());
    std::vector<ChatMessage> msgs;
    for (size_t i = 0; i < m.size(); ++i) {
      LT_CHECK(m[i].is_object(), "messages[{}] must be an object with \"role\" and \"content\"", i);
      try {
        msgs.push_back(ChatMessage{get_string(m[i], "role").get<std::string>(),
                                   get_string(m[i], "content").get<std::string>()});
      } catch (const Error& e) {
        fail("messages[{}]: {}", i, e.what());
      }
    }
    return encode_rendered_with(tok, prefix, render_chat(opt.chat_template, msgs, tok.bos_id(), tok.eos_id()),
                                opt.add_eos);
  }
  if (j.contains("prompt") || j.contains("completion")) {
    RenderedPrompt r;
    r.pieces.push_back(PromptPiece{get_string(j, "prompt").get<std::string>(), -1, false});
    r.pieces.push_back(PromptPiece{get_string(j, "completion").get<std::string>(), -1, true});
    r.append_eos = true;
    r.eos_train = true;
    return encode_rendered_with(tok, prefix, r, opt.add_eos);
  }
  if (j.contains("instruction") || j.contains("output")) {
    std::string input;
    if (j.contains("input") && !j["input"].is_null()) input = get_string(j, "input").get<std::string>();
    return encode_rendered_with(
        tok, prefix,
        render_alpaca(get_string(j, "instruction").get<std::string>(), input, get_string(j, "output").get<std::string>()),
        opt.add_eos);
  }
  if (j.contains("text")) {
    const std::string& t = get_string(j, "text").get_ref<const std::string&>();
    LT_CHECK(!t.empty(), "\"text\" is empty");
    return encode_text_with(tok, prefix, t, opt.add_eos);
  }
  fail("unknown record shape with keys {}; expected {{\"text\"}}, {{\"prompt\", \"completion\"}}, "
       "{{\"instruction\", \"input\"?, \"output\"}} or {{\"messages\"}}",
       keys_of(j));
}

bool has_ext(const fs::path& p, std::initializer_list<const char*> exts) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* x : exts)
    if (e == x) return true;
  return false;
}

std::vector<Example> load_text_with(const std::string& path, const Tokenizer& tok, const std::vector<int>& prefix,
                                    const DataOptions& opt, bool whole_file) {
  std::string text = read_file(path);
  std::vector<Example> out;
  if (whole_file) {
    // Whole file as one document; only surrounding blank lines are trimmed.
    std::vector<std::string> d = split_documents(text, 1 << 30);
    if (!d.empty()) out.push_back(encode_text_with(tok, prefix, d[0], opt.add_eos));
    return out;
  }
  for (const std::string& d : split_documents(text, opt.min_blank_lines))
    out.push_back(encode_text_with(tok, prefix, d, opt.add_eos));
  return out;
}

std::vector<Example> load_jsonl_with(const std::string& path, const Tokenizer& tok, const std::vector<int>& prefix,
                                     const DataOptions& opt, size_t* n_skipped) {
  std::string text = read_file(path);
  std::vector<Example> out;
  size_t skipped = 0;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      out.push_back(example_from_json_with(line, tok, prefix, opt));
    } catch (const Error& e) {
      std::string msg = fmt::format("data: {}:{}: {}", path, line_no, e.what());
      if (!opt.skip_bad_lines) throw Error(msg);
      fmt::print(stderr, "leantune: warning: {} (line skipped)\n", msg);
      ++skipped;
    }
  }
  if (skipped > 0) fmt::print(stderr, "leantune: warning: {}: skipped {} malformed line(s)\n", path, skipped);
  if (n_skipped) *n_skipped += skipped;
  return out;
}

}  // namespace

DocSeparator parse_doc_separator(std::string_view name) {
  if (name == "blank_line") return DocSeparator::BlankLine;
  if (name == "file") return DocSeparator::File;
  fail("doc_separator '{}' is not known; expected blank_line or file", name);
}

std::vector<std::string> split_documents(std::string_view text, int min_blank_lines) {
  LT_CHECK(min_blank_lines >= 1, "min_blank_lines must be >= 1, got {}", min_blank_lines);
  std::vector<std::string> docs;
  std::string cur;          // current document, lines joined by '\n'
  int blank_run = 0;        // blank lines seen since the last non-blank line
  auto finish = [&]() {
    if (!cur.empty()) docs.push_back(std::move(cur));
    cur.clear();
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    bool blank = line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
    if (blank) {
      ++blank_run;
    } else {
      if (blank_run >= min_blank_lines) {
        finish();
      } else if (!cur.empty()) {
        cur.append(static_cast<size_t>(blank_run) + 1, '\n');  // keep the short blank run inside
      }
      blank_run = 0;
      cur.append(line);
    }
    if (end == text.size()) break;
    pos = end + 1;
  }
  finish();
  return docs;
}

Example encode_rendered(const Tokenizer& tok, const RenderedPrompt& r, bool add_eos) {
  return encode_rendered_with(tok, special_prefix(tok), r, add_eos);
}

Example encode_text(const Tokenizer& tok, std::string_view text, bool add_eos) {
  return encode_text_with(tok, special_prefix(tok), text, add_eos);
}

Example example_from_json(std::string_view line, const Tokenizer& tok, const DataOptions& opt) {
  return example_from_json_with(line, tok, special_prefix(tok), opt);
}

std::vector<Example> load_text_file(const std::string& path, const Tokenizer& tok, const DataOptions& opt) {
  return load_text_with(path, tok, special_prefix(tok), opt, opt.doc_separator == DocSeparator::File);
}

std::vector<Example> load_jsonl_file(const std::string& path, const Tokenizer& tok, const DataOptions& opt,
                                     size_t* n_skipped) {
  return load_jsonl_with(path, tok, special_prefix(tok), opt, n_skipped);
}

std::vector<Example> load_examples(const std::string& path, const Tokenizer& tok, const DataOptions& opt,
                                   DataStats* stats) {
  LT_CHECK(opt.min_blank_lines >= 1, "data: min_blank_lines must be >= 1, got {}", opt.min_blank_lines);
  std::error_code ec;
  fs::path p(path);
  LT_CHECK(fs::exists(p, ec), "data: '{}' does not exist", path);
  std::vector<int> prefix = special_prefix(tok);
  std::vector<Example> out;
  size_t skipped = 0;
  auto load_one = [&](const fs::path& f, bool dir_member) {
    std::vector<Example> ex;
    if (has_ext(f, {".jsonl"})) {
      ex = load_jsonl_with(f.string(), tok, prefix, opt, &skipped);
    } else if (has_ext(f, {".txt", ".md"})) {
      ex = load_text_with(f.string(), tok, prefix, opt, dir_member || opt.doc_separator == DocSeparator::File);
    } else {
      fail("data: '{}' has an unsupported extension; expected .txt, .md, .jsonl or a directory", f.string());
    }
    for (Example& e : ex) out.push_back(std::move(e));
  };
  if (fs::is_directory(p, ec)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(p))
      if (entry.is_regular_file() && has_ext(entry.path(), {".txt", ".md", ".jsonl"})) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    LT_CHECK(!files.empty(), "data: directory '{}' holds no .txt, .md or .jsonl files", path);
    for (const fs::path& f : files) load_one(f, true);
  } else {
    load_one(p, false);
  }
  // Drop examples with nothing to learn (fewer than 2 tokens can have no next-token target).
  std::erase_if(out, [](const Example& e) { return e.ids.size() < 2; });
  LT_CHECK(!out.empty(), "data: '{}' holds no examples (empty file{}); check the path and format", path,
           skipped ? fmt::format(", or all {} lines were malformed and skipped", skipped) : std::string());
  if (stats) {
    *stats = DataStats{};
    stats->n_examples = out.size();
    stats->n_skipped_lines = skipped;
    for (const Example& e : out) {
      LT_ASSERT(e.ids.size() == e.labels.size());
      stats->n_tokens += e.ids.size();
      for (int l : e.labels) stats->n_label_tokens += (l != kIgnoreLabel);
    }
  }
  return out;
}

}  // namespace lt
