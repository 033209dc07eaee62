// leantune's one exception type. Every public function reports a user mistake (a file, key, flag,
// tensor or line that is wrong) by throwing leantune::Error whose what() says what was wrong,
// where, what was expected and what to do. Internal code throws the same type (lt::Error is an
// alias), so a message reaches the caller unchanged.
#pragma once
#include <stdexcept>

namespace leantune {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace leantune
