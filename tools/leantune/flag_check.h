// Range checks of numeric command-line flags, so every command words them the same way:
// leantune::Error "--FLAG: VALUE is out of range: it must be >= LO and <= HI (what it means)";
// and the comma-separated token id lists of the testing aids (logits, generate --prompt-ids).
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "leantune/error.h"

namespace lt::cli {

// leantune::Error with the formatted message (the CLI's LT_CHECK).
template <class... A>
[[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
  throw leantune::Error(fmt::format(f, std::forward<A>(a)...));
}

inline void check_flag_range(const char* flag, double value, double lo, double hi, const char* meaning) {
  const std::string range = std::isfinite(hi) ? fmt::format(">= {} and <= {}", lo, hi) : fmt::format(">= {}", lo);
  if (!(value >= lo && value <= hi))
    fail("{}: {} is out of range: it must be {} ({})", flag, value, range, meaning);
}

// "1,2,3" -> {1, 2, 3}; empty items are skipped; leantune::Error naming `what` for a non-number.
inline std::vector<int> parse_ids(const std::string& s, const char* what) {
  std::vector<int> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      ids.push_back(std::stoi(item));
    } catch (...) {
      fail("{}: '{}' is not a token id", what, leantune::excerpt(item));
    }
  }
  return ids;
}

}  // namespace lt::cli
