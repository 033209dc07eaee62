// leantune's one exception type. Every public function reports a user mistake (a file, key, flag,
// tensor or line that is wrong) by throwing leantune::Error whose what() says what was wrong,
// where, what was expected and what to do. Internal code throws the same type (lt::Error is an
// alias), so a message reaches the caller unchanged.
//
// Usage:
//   try {
//     leantune::Model model("missing.bin");
//   } catch (const leantune::Error& e) {
//     std::fprintf(stderr, "error: %s\n", e.what());  // "missing.bin: cannot open ..."
//   } catch (...) {
//     std::fprintf(stderr, "error: %s\n", leantune::describe_current_exception().c_str());
//   }
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace leantune {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The message for the exception being handled, in leantune's words; call it only inside a catch
// block. leantune::Error: its what(); running out of memory (std::bad_alloc): what it means and
// what to do; a JSON, YAML, file-system or stream error from a library underneath: what kind of
// input was wrong, with a short excerpt; anything else: "internal error: ..." asking for a report.
std::string describe_current_exception();

// A short, printable excerpt of user-provided text for a message: at most `max_chars` characters,
// control characters and invalid UTF-8 escaped (\n, \xNN), "…" appended when cut.
std::string excerpt(std::string_view text, size_t max_chars = 80);

}  // namespace leantune
