// The API boundary: every public function runs its body through guard(), so that what leaves the
// library is leantune::Error (with the message describe_current_exception() gives: a JSON, YAML,
// file-system or stream error from a library underneath, in leantune's words) or std::bad_alloc.
// ThreadScope applies an object's thread count to the calling thread while it computes, so no
// process-wide setting changes.
#pragma once
#include <new>
#include <utility>

#include "leantune/error.h"

namespace leantune::detail {

template <class F>
decltype(auto) guard(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (...) {
    throw Error(describe_current_exception());
  }
}

// Sets the OpenMP thread count of the calling thread for the scope's life, then restores it.
class ThreadScope {
 public:
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int previous_;
};

}  // namespace leantune::detail
