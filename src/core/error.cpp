// Always-on internal assertion failure: prints the expression with file:line and aborts.
#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace lt {

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "leantune: internal error: %s:%d: assertion '%s' failed %s\n", file, line, expr,
               msg.c_str());
  std::abort();
}

}  // namespace lt
