// leantune: fine-tune and run Llama-family models on the CPU. Subcommands register from cmd_*.cpp;
// user errors (lt::Error) are printed as one line and exit with status 1.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"leantune: fine-tune and run Llama-family language models"};
  app.require_subcommand(1);
  lt::cli::add_generate_command(app);
  lt::cli::add_info_command(app);
  lt::cli::add_tokenize_command(app);
  lt::cli::add_logits_command(app);
  lt::cli::add_bench_command(app);
  lt::cli::add_grad_command(app);
  lt::cli::add_train_command(app);
  lt::cli::add_demo_command(app);
  lt::cli::add_merge_command(app);
  lt::cli::add_plan_command(app);
  lt::cli::add_quant_command(app);
  lt::cli::add_quantize_command(app);
  lt::cli::add_consolidate_command(app);
  lt::cli::add_export_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const lt::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "leantune: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "leantune: error: %s\n", e.what());
    return 1;
  }
  // stdout redirected to a file: a failed write (a full disk) is an error, not a silent success
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "leantune: error: writing the output to stdout failed: %s\n", std::strerror(errno));
    return 1;
  }
  return 0;
}
