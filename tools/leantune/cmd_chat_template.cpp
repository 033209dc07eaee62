// `leantune chat-template`: render a conversation with a chat template and print it — the model's
// own (--tokenizer), a named one of the model's (--name tool_use), a built-in (chatml, llama3,
// llama2, alpaca) or a .jinja file (--template).
//   --messages FILE.json   a JSON array of messages; prints the rendering as it is (no newline added)
//   --input FILE.json      requests {"messages", "tools"?, "add_generation_prompt"?, "vars"?} (one or
//                          an array); prints a JSON array of {"text"} / {"segments"} / {"error"}
//   --segments             with --input: the rendering cut into segments, assistant turns marked
//                          (what training learns from)
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "commands.h"
#include "flag_check.h"
#include "leantune/chat_template.h"
#include "leantune/tokenizer.h"

namespace lt::cli {

namespace {

struct ChatTemplateArgs {
  std::string tokenizer, name, templ, special_tokens, messages, input, tools, vars;
  bool add_generation_prompt = false, segments = false;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("chat-template: cannot open {}: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_stdout(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    fail("chat-template: writing the output to stdout failed: {}", std::strerror(errno));
}

leantune::ChatTemplate open_template(const ChatTemplateArgs& a) {
  if (!a.templ.empty()) {
    if (a.tokenizer.empty()) return leantune::ChatTemplate::from_file(a.templ, a.special_tokens);
    return leantune::ChatTemplate(leantune::Tokenizer(a.tokenizer), a.templ);
  }
  return leantune::ChatTemplate(leantune::Tokenizer(a.tokenizer), a.name);
}

void run_chat_template(const ChatTemplateArgs& a) {
  if (a.tokenizer.empty() && a.templ.empty()) fail("chat-template: give --tokenizer (its own template) or --template");
  if (a.messages.empty() == a.input.empty()) fail("chat-template: give exactly one of --messages or --input");
  leantune::ChatTemplate t = open_template(a);
  if (!a.input.empty()) {
    write_stdout(t.render_requests_json(read_file(a.input), a.segments) + "\n");
    return;
  }
  leantune::ChatOptions o;
  o.add_generation_prompt = a.add_generation_prompt;
  if (!a.tools.empty()) o.tools_json = read_file(a.tools);
  if (!a.vars.empty()) o.vars_json = read_file(a.vars);
  write_stdout(t.apply_json(read_file(a.messages), o));
}

}  // namespace

void add_chat_template_command(CLI::App& app) {
  auto a = std::make_shared<ChatTemplateArgs>();
  CLI::App* c = app.add_subcommand("chat-template", "Render a conversation with a chat template");
  c->add_option("--tokenizer", a->tokenizer, "tokenizer folder (or HF repo id) whose chat template to use");
  c->add_option("--name", a->name, "one of the model's named templates (e.g. tool_use)");
  c->add_option("--template", a->templ, "a .jinja file, or chatml | llama3 | llama2 | alpaca");
  c->add_option("--special-tokens", a->special_tokens, "with --template and no --tokenizer: JSON such as {\"bos_token\": \"<s>\"}");
  c->add_option("--messages", a->messages, "JSON file: an array of messages; prints the rendering");
  c->add_option("--input", a->input, "JSON file: request(s); prints a JSON array of results");
  c->add_option("--tools", a->tools, "with --messages: JSON file, an array of tool schemas");
  c->add_option("--vars", a->vars, "with --messages: JSON file, an object of more template variables");
  c->add_flag("--add-generation-prompt", a->add_generation_prompt, "with --messages: end with the assistant header");
  c->add_flag("--segments", a->segments, "with --input: mark the assistant segments");
  c->callback([a] { run_chat_template(*a); });
}

}  // namespace lt::cli
