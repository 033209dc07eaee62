// Range checks of numeric command-line flags, so every command words them the same way:
// lt::Error "--FLAG: VALUE is out of range: it must be >= LO and <= HI (what it means)".
#pragma once
#include <cmath>
#include <string>

#include "core/error.h"

namespace lt::cli {

inline void check_flag_range(const char* flag, double value, double lo, double hi, const char* meaning) {
  const std::string range = std::isfinite(hi) ? fmt::format(">= {} and <= {}", lo, hi) : fmt::format(">= {}", lo);
  LT_CHECK(value >= lo && value <= hi, "{}: {} is out of range: it must be {} ({})", flag, value, range, meaning);
}

}  // namespace lt::cli
