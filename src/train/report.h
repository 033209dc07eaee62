// An HTML report of a training run, drawn from its metrics.jsonl: the loss and eval-loss curves,
// the learning rate, throughput and memory, and from ledger.json the memory by category, planned
// vs measured, over one step: inline SVG charts (no scripts, no downloads).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace lt {

// The memory section: bars and a table of bytes per category as planned ({"category": bytes}) and,
// given a ledger.json, as measured, with the predicted and measured peak and the first step's
// timeline. Used by the training report and `leantune plan --html`.
std::string memory_plan_html(const nlohmann::json& planned, const nlohmann::json* ledger);

// Reads OUTPUT_DIR/metrics.jsonl (and OUTPUT_DIR/ledger.json when present) and writes OUTPUT_DIR/report.html (atomically); returns its path.
std::string write_training_report(const std::string& output_dir);

}  // namespace lt
