// Atomic file writes: the content goes to a temporary file in the destination's directory, is
// flushed and fsync'ed, renamed over the destination, and the directory is fsync'ed, so a reader
// (or a crash) sees either the old file or the complete new one, never a partial write.
#pragma once
#include <cstdio>
#include <functional>
#include <string>

namespace lt {

// Calls `write(f)` on a temporary file next to `path`, then replaces `path` with it. If `write`
// throws or any I/O step fails, the temporary file is removed and lt::Error (naming `path`) is
// thrown; `path` is left untouched.
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write);

// write_file_atomic with a string as the whole content.
void write_text_file_atomic(const std::string& path, const std::string& content);

}  // namespace lt
