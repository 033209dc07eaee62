// leantune: fine-tune and run Llama-family models on the CPU. Subcommands register from cmd_*.cpp.
// Every error ends the program with one "leantune: error: ..." message and a non-zero status, in
// leantune's words: user errors (leantune::Error) as they are, flag errors from CLI11 with short
// bounds, and everything else as leantune::describe_current_exception() words it (running out of
// memory with what to do, any other exception named as an internal error); a failed write to a
// redirected stdout (a full disk) is an error too.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>

#include <limits>
#include <string>

#include "commands.h"
#include "leantune/error.h"

namespace {

int report(const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "leantune: error: %s\n", msg.c_str());
  return 1;
}

// A bound of a CLI11 range as a person writes it.
std::string bound(double v) { return fmt::format("{:g}", v); }

// CLI11's messages in leantune's words, never echoing a long argument (string searches, not
// std::regex, whose libstdc++ matcher recurses per character):
//   "--flag: Value X not in range 0.000000 to 1797693...(309 digits).000000" -> the range in short;
//   "Could not convert: --flag = X" (a number too large for its type) -> the flag and an excerpt.
std::string cli_message(const CLI::ParseError& e) {
  const std::string what = e.what();
  const std::string conv = "Could not convert: ";
  if (what.rfind(conv, 0) == 0) {
    const size_t eq = what.find(" = ", conv.size());
    if (eq != std::string::npos)
      return fmt::format("{}: '{}' is not a value this flag takes (a number of the right kind that fits it: a "
                         "whole number up to 2147483647 for counts)",
                         what.substr(conv.size(), eq - conv.size()), leantune::excerpt(what.substr(eq + 3), 40));
  }
  const size_t value = what.find(": Value "), in = what.rfind(" not in range "), to = what.rfind(" to ");
  if (value == std::string::npos || in == std::string::npos || to == std::string::npos || !(value < in && in < to))
    return leantune::excerpt(what, 200);
  double lo = 0, hi = 0;
  try {
    lo = std::stod(what.substr(in + 14, to - in - 14));
    hi = std::stod(what.substr(to + 4));
  } catch (const std::exception&) {
    return leantune::excerpt(what, 200);
  }
  const bool unbounded = hi >= std::numeric_limits<double>::max() / 2;
  const std::string allowed = unbounded ? (lo > 0 ? "a number > 0" : "a number >= " + bound(lo))
                                        : "a number from " + bound(lo) + " to " + bound(hi);
  const std::string given = leantune::excerpt(what.substr(value + 8, in - value - 8), 40);
  return fmt::format("{}: {} is not allowed; give {}", what.substr(0, value), given, allowed);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"leantune: fine-tune and run Llama-family language models"};
  app.require_subcommand(1);
  lt::cli::add_generate_command(app);
  lt::cli::add_info_command(app);
  lt::cli::add_tokenize_command(app);
  lt::cli::add_chat_template_command(app);
  lt::cli::add_logits_command(app);
  lt::cli::add_bench_command(app);
  lt::cli::add_grad_command(app);
  lt::cli::add_train_command(app);
  lt::cli::add_sweep_command(app);
  lt::cli::add_demo_command(app);
  lt::cli::add_merge_command(app);
  lt::cli::add_plan_command(app);
  lt::cli::add_quant_command(app);
  lt::cli::add_quantize_command(app);
  lt::cli::add_consolidate_command(app);
  lt::cli::add_export_command(app);
  lt::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    report(cli_message(e) + "\nRun with --help for more information.");
    return e.get_exit_code() > 0 ? e.get_exit_code() : 1;
  } catch (...) {
    // leantune::Error as it is; out of memory, library and internal errors in leantune's words
    return report(leantune::describe_current_exception());
  }
  // stdout redirected to a file: a failed write (a full disk) is an error, not a silent success
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "leantune: error: writing the output to stdout failed: %s\n", std::strerror(errno));
    return 1;
  }
  return 0;
}
