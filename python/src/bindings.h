// leantune._native: the public C++ API (include/leantune/, linked as lt_api and nothing else) as a
// Python extension module, which the pure-Python package python/leantune/ wraps. Engine calls run
// with the GIL released (other Python threads go on); a callback into Python takes it back. A
// Python exception raised in a callback must not cross the engine: PendingError keeps it, the
// callback tells the engine to stop where it can, and the exception is raised again once the
// engine call has returned.
#pragma once
#include <nanobind/nanobind.h>

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace leantune_py {

namespace nb = nanobind;

// A Python exception raised inside a callback that the engine called, kept until the engine returns.
class PendingError {
 public:
  // Runs fn (a call into Python, with the GIL held); false when it raised (the exception is kept)
  // or an earlier call did.
  template <class F>
  bool run(F&& fn) {
    if (err_) return false;
    try {
      fn();
      return true;
    } catch (nb::python_error& e) {
      err_.emplace(std::move(e));
      return false;
    }
  }
  // The Python error now set (PyErr_CheckSignals' KeyboardInterrupt), kept.
  void fetch() {
    if (!err_) err_.emplace();
  }
  bool pending() const { return err_.has_value(); }
  // Raises the kept exception, if any (GIL held).
  void rethrow() {
    if (!err_) return;
    nb::python_error e = std::move(*err_);
    err_.reset();
    throw e;
  }

 private:
  std::optional<nb::python_error> err_;
};

// fn() with the GIL released; then a Python exception kept by `pending` is raised in preference to
// whatever the engine threw (it is why the engine stopped).
template <class F>
auto without_gil(PendingError& pending, F&& fn) -> decltype(fn()) {
  using R = decltype(fn());
  if constexpr (std::is_void_v<R>) {
    try {
      nb::gil_scoped_release release;
      fn();
    } catch (...) {
      pending.rethrow();
      throw;
    }
    pending.rethrow();
  } else {
    std::optional<R> r;
    try {
      nb::gil_scoped_release release;
      r.emplace(fn());
    } catch (...) {
      pending.rethrow();
      throw;
    }
    pending.rethrow();
    return std::move(*r);
  }
}

// Engine text as a Python str; bytes that are not UTF-8 (a token cut inside a character) become U+FFFD.
inline nb::str to_str(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");
  if (!o) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

void bind_model(nb::module_& m);  // Model, Tokenizer, generation, logits
void bind_train(nb::module_& m);  // Trainer, plans
void bind_files(nb::module_& m);  // merge, quantize, GGUF export, machine info

}  // namespace leantune_py
