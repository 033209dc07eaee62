// Process memory as leantune measures and prints it: resident and peak resident bytes of this
// process, and byte counts in the units the CLI and reports use.
//
// Usage:
//   std::printf("peak RSS %s\n", leantune::format_bytes(leantune::peak_rss_bytes()).c_str());
#pragma once
#include <cstddef>
#include <string>

namespace leantune {

size_t rss_bytes();       // resident bytes of this process now (VmRSS); 0 when unavailable
size_t peak_rss_bytes();  // the most it has been resident (VmHWM); 0 when unavailable
// "1.50 GiB", "12.00 MiB", "3.0 KiB", "512 B" (binary units).
std::string format_bytes(size_t bytes);

}  // namespace leantune
