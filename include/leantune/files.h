// Writing a small output file the way every leantune command does: to a temporary file in the
// same folder, flushed and fsync'd, then renamed over the final name, every write checked. A failed
// write throws leantune::Error naming the path and leaves no partial file under the final name.
#pragma once
#include <string>

namespace leantune {

void write_text_file(const std::string& path, const std::string& content);

}  // namespace leantune
