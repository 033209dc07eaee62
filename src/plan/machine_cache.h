// Facts measured once per machine (GEMM rate, process baseline) and cached as JSON in
// $XDG_CACHE_HOME/leantune/calibration.json (or ~/.cache/leantune). A damaged or unwritable cache
// only means measuring again.
#pragma once
#include <functional>
#include <string>

namespace lt {

// The cached value of `key`, or measure() stored under it.
double cached_measurement(const std::string& key, const std::function<double()>& measure);

}  // namespace lt
