// Errors. User mistakes (files, configs, flags, data) throw lt::Error with a message saying what
// was wrong, where (file, tensor, key, line) and what was expected; the CLI prints it and exits 1.
// Internal invariants use LT_ASSERT, which stays on in release builds and aborts with file:line.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>
#include <string_view>

#include "leantune/error.h"

namespace lt {

using Error = leantune::Error;  // the public exception type (include/leantune/error.h)

template <class... A>
[[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
  throw Error(fmt::format(f, std::forward<A>(a)...));
}

// A short, printable excerpt of user-provided text (a value, token or line from a file) for an
// error message: at most `max_chars` characters, control characters and invalid UTF-8 bytes
// escaped (\n, \t, \xNN), and "…" appended when cut. Messages never echo
// unbounded input: a 10 MB token or a deeply nested value would make them unreadable or huge.
std::string excerpt(std::string_view text, size_t max_chars = 80);

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace lt

// LT_CHECK(cond, "fmt", args...): throws lt::Error with the formatted message when cond is false.
#define LT_CHECK(cond, ...)                      \
  do {                                           \
    if (!(cond)) ::lt::fail(__VA_ARGS__);        \
  } while (0)

// LT_ASSERT(cond): internal invariant, always on; aborts naming file and line.
#define LT_ASSERT(cond)                                                  \
  do {                                                                   \
    if (!(cond)) ::lt::assert_fail(#cond, __FILE__, __LINE__, "");       \
  } while (0)
