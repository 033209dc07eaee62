// Each subcommand of the leantune program lives in its own cmd_*.cpp and registers itself here.
#pragma once
#include <CLI/CLI.hpp>

namespace lt::cli {

void add_generate_command(CLI::App& app);  // cmd_generate.cpp
void add_info_command(CLI::App& app);      // cmd_info.cpp
void add_tokenize_command(CLI::App& app);  // cmd_tokenize.cpp
void add_chat_template_command(CLI::App& app);  // cmd_chat_template.cpp
void add_logits_command(CLI::App& app);    // cmd_logits.cpp
void add_bench_command(CLI::App& app);     // cmd_bench.cpp
void add_grad_command(CLI::App& app);      // cmd_grad.cpp
void add_train_command(CLI::App& app);     // cmd_train.cpp
void add_sweep_command(CLI::App& app);     // cmd_sweep.cpp
void add_demo_command(CLI::App& app);      // cmd_demo.cpp
void add_merge_command(CLI::App& app);     // cmd_merge.cpp
void add_plan_command(CLI::App& app);      // cmd_plan.cpp
void add_quant_command(CLI::App& app);     // cmd_quant.cpp
void add_quantize_command(CLI::App& app);  // cmd_quantize.cpp
void add_consolidate_command(CLI::App& app);  // cmd_consolidate.cpp
void add_export_command(CLI::App& app);    // cmd_export.cpp
void add_serve_command(CLI::App& app);     // cmd_serve.cpp

}  // namespace lt::cli
