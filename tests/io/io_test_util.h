// Helpers for the io tests: a temporary directory removed at the end of the test, raw file
// writes, and an assertion that a call throws lt::Error whose message contains given substrings.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace lt::test {

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "leantune_io_XXXXXX").string();
    char* p = ::mkdtemp(t.data());
    EXPECT_NE(p, nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

// The message of the lt::Error thrown by fn (a test failure if none is thrown).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const lt::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected lt::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected lt::Error, nothing was thrown";
  return "";
}

inline void expect_contains(const std::string& msg, std::initializer_list<std::string> parts) {
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

}  // namespace lt::test

// EXPECT_LT_ERROR(statement, {"substr", ...})
#define EXPECT_LT_ERROR(stmt, ...) ::lt::test::expect_contains(::lt::test::error_of([&] { stmt; }), __VA_ARGS__)
