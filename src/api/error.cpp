// describe_current_exception(): the one place that words every kind of exception the library or
// the libraries under it may throw (leantune::Error is already worded), for the CLI, the API
// boundary (guard.h) and bindings.
#include <fmt/format.h>
#include <yaml-cpp/exceptions.h>

#include <exception>
#include <filesystem>
#include <ios>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.h"
#include "leantune/error.h"

namespace leantune {

std::string excerpt(std::string_view text, size_t max_chars) { return lt::excerpt(text, max_chars); }

std::string describe_current_exception() {
  if (!std::current_exception()) return "internal error: no exception is being handled";
  try {
    throw;
  } catch (const Error& e) {
    return e.what();
  } catch (const std::bad_alloc&) {
    return "out of memory: a memory allocation failed. The model, context, batch or data needs more memory than "
           "this process may use (the machine's RAM, or a limit such as ulimit -v or a container's). Check what a "
           "run needs with `leantune plan`, then use a smaller model, context, micro_batch_size or sequence_len, or "
           "quantization: nf4";
  } catch (const std::length_error& e) {
    return fmt::format("a size computed from the inputs is too large to allocate ({}); check the model and data files "
                       "and the size settings", excerpt(e.what(), 120));
  } catch (const std::filesystem::filesystem_error& e) {
    return fmt::format("{}: {}", e.path1().string(), e.code().message());
  } catch (const std::ios_base::failure& e) {
    return fmt::format("a file could not be read or written ({}); check that every path given is a readable file "
                       "(not a directory) and that the disk is not full", excerpt(e.what(), 120));
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("a JSON file has a value of an unexpected type or shape ({}); check the JSON files given "
                       "(config.json, tokenizer.json, adapter_config.json, data)", excerpt(e.what(), 160));
  } catch (const YAML::Exception& e) {
    return fmt::format("YAML at line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, excerpt(e.msg, 160));
  } catch (const std::exception& e) {
    return fmt::format("internal error: {}; please report it with the command that was run", excerpt(e.what(), 200));
  } catch (...) {
    return "internal error: an exception of an unknown type; please report it with the command that was run";
  }
}

}  // namespace leantune
