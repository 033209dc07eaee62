// The outputs of a sweep (include/leantune/sweep.h) once every run is measured: the Pareto front
// (held-out loss against time, i.e. price), the recommendation, and sweep.jsonl / sweep.csv /
// sweep.md / sweep.html in out_dir (the markdown with the per-axis effects: α/r, target modules,
// rank against cost).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "leantune/sweep.h"

namespace lt {

// "lora_r=8 lora_alpha=2r"
std::string grid_label(const std::vector<std::pair<std::string, std::string>>& grid);
// Fills rows' pareto, result.recommended and result.markdown, and writes the four files.
void finish_sweep(const leantune::SweepOptions& o, leantune::SweepResult& result);
// sweep.html's text (charts and tables).
std::string sweep_html(const leantune::SweepOptions& o, const leantune::SweepResult& result);

}  // namespace lt
