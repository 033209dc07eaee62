// leantune::write_text_file: the public face of core/atomic_file.
#include "leantune/files.h"

#include "api/guard.h"
#include "core/atomic_file.h"

namespace leantune {

void write_text_file(const std::string& path, const std::string& content) {
  detail::guard([&] { lt::write_text_file_atomic(path, content); });
}

}  // namespace leantune
