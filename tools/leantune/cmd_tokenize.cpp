// `leantune tokenize`: encode text with a tokenizer (tokenizer.json, a folder holding one, a
// llama2.c tokenizer .bin, or a GGUF's metadata) and print the ids.
//   --text STR          prints the ids on one line, separated by spaces
//   --input FILE.json   a JSON array of strings; prints a JSON array of {"ids": [...], "decoded": "..."}
//   --no-special        do not add BOS/EOS (special tokens written in the text are still recognized)
//   --skip-special      drop special tokens when decoding (--input only)
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "flag_check.h"
#include "leantune/tokenizer.h"

namespace lt::cli {

namespace {

struct TokenizeArgs {
  std::string tokenizer, text, input;
  bool no_special = false, skip_special = false;
};

// The output goes to stdout (redirected to a file, a full disk must not pass as success).
void write_stdout(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    fail("tokenize: writing the output to stdout failed: {}", std::strerror(errno));
}

void run_tokenize(const TokenizeArgs& a) {
  leantune::Tokenizer tok(a.tokenizer);
  const bool add_special = !a.no_special;
  if (!a.input.empty()) {
    write_stdout(tok.encode_json_file(a.input, add_special, a.skip_special) + "\n");
    return;
  }
  std::vector<int> ids = tok.encode(a.text, add_special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  write_stdout(line + "\n");
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode text with a tokenizer and print the token ids");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json, a folder holding it, a llama2.c tokenizer .bin, or a GGUF (its metadata's)")
      ->required();
  auto* text = cmd->add_option("--text", args->text, "text to encode; prints the ids on one line");
  auto* input = cmd->add_option("--input", args->input, "JSON array of strings; prints [{\"ids\", \"decoded\"}, ...]");
  text->excludes(input);
  input->excludes(text);
  cmd->add_flag("--no-special", args->no_special, "do not add BOS/EOS");
  cmd->add_flag("--skip-special", args->skip_special, "drop special tokens when decoding (--input)");
  cmd->callback([args, cmd] {
    if (cmd->count("--text") + cmd->count("--input") != 1) fail("tokenize: give exactly one of --text or --input");
    run_tokenize(*args);
  });
}

}  // namespace lt::cli
