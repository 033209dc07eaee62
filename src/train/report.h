// An HTML report of a training run, drawn from its metrics.jsonl: the loss and eval-loss curves,
// the learning rate, throughput and memory, as inline SVG charts (no scripts, no downloads).
#pragma once
#include <string>

namespace lt {

// Reads OUTPUT_DIR/metrics.jsonl and writes OUTPUT_DIR/report.html (atomically); returns its path.
std::string write_training_report(const std::string& output_dir);

}  // namespace lt
