// The module leantune._native (python/src/bindings.h): leantune::Error as the Python exception
// leantune.Error carrying the engine's message, and the bindings of each part of the API.
#include <cstdio>

#include "bindings.h"
#include "leantune/error.h"

NB_MODULE(_native, m) {
  namespace nb = nanobind;
  m.doc() = "leantune's engine (the public C++ API); use the package leantune, which wraps it";
  nb::exception<leantune::Error>(m, "Error", PyExc_RuntimeError);
  // the engine prints to C's stdout (plans, progress): flushed so that it and Python's output keep their order
  m.def("flush_stdout", [] { std::fflush(stdout); }, "Flushes C's stdout buffer (the engine's printing).");
  leantune_py::bind_model(m);
  leantune_py::bind_train(m);
  leantune_py::bind_files(m);
}
