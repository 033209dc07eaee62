// `leantune tokenize`: encode text with a tokenizer (tokenizer.json, a folder holding one, or a
// llama2.c tokenizer .bin) and print the ids.
//   --text STR          prints the ids on one line, separated by spaces
//   --input FILE.json   a JSON array of strings; prints a JSON array of {"ids": [...], "decoded": "..."}
//   --no-special        do not add BOS/EOS (special tokens written in the text are still recognized)
//   --skip-special      drop special tokens when decoding (--input only)
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "core/mapped_file.h"
#include "model/model_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lt::cli {

namespace {

struct TokenizeArgs {
  std::string tokenizer, text, input;
  bool no_special = false, skip_special = false;
};

// The output goes to stdout (redirected to a file, a full disk must not pass as success).
void write_stdout(const std::string& s) {
  LT_CHECK(std::fwrite(s.data(), 1, s.size(), stdout) == s.size() && std::fflush(stdout) == 0,
           "tokenize: writing the output to stdout failed: {}", std::strerror(errno));
}

void run_tokenize(const TokenizeArgs& a) {
  auto tok = load_tokenizer_for_model("", a.tokenizer);
  const bool add_special = !a.no_special;
  if (!a.input.empty()) {
    nlohmann::json in = load_json_file(a.input);
    LT_CHECK(in.is_array(), "{}: expected a JSON array of strings", a.input);
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < in.size(); ++i) {
      LT_CHECK(in[i].is_string(), "{}: element {} is not a string", a.input, i);
      std::vector<int> ids = tok->encode(in[i].get<std::string>(), add_special);
      out.push_back({{"ids", ids}, {"decoded", tok->decode(ids, a.skip_special)}});
    }
    write_stdout(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    return;
  }
  std::vector<int> ids = tok->encode(a.text, add_special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  write_stdout(line + "\n");
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode text with a tokenizer and print the token ids");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json, a folder holding it, a llama2.c tokenizer .bin, or a .gguf")
      ->required();
  auto* text = cmd->add_option("--text", args->text, "text to encode; prints the ids on one line");
  auto* input = cmd->add_option("--input", args->input, "JSON array of strings; prints [{\"ids\", \"decoded\"}, ...]");
  text->excludes(input);
  input->excludes(text);
  cmd->add_flag("--no-special", args->no_special, "do not add BOS/EOS");
  cmd->add_flag("--skip-special", args->skip_special, "drop special tokens when decoding (--input)");
  cmd->callback([args, cmd] {
    LT_CHECK(cmd->count("--text") + cmd->count("--input") == 1, "tokenize: give exactly one of --text or --input");
    run_tokenize(*args);
  });
}

}  // namespace lt::cli
