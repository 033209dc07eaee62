// memory.h: the process's resident bytes and the byte format, as the engine measures and prints them.
#include "leantune/memory.h"

#include "core/memory_plan.h"

namespace leantune {

size_t rss_bytes() { return lt::process_rss_bytes(); }
size_t peak_rss_bytes() { return lt::process_peak_rss_bytes(); }
std::string format_bytes(size_t bytes) { return lt::format_bytes(bytes); }

}  // namespace leantune
