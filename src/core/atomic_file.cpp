// write_file_atomic: mkstemp in the same directory, write, fflush + fsync, rename, fsync the
// directory. The temporary file is unlinked on every failure path.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace lt {

namespace {

std::string parent_dir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void fsync_dir(const std::string& dir, const std::string& path) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  LT_CHECK(fd >= 0, "{}: cannot open directory '{}' to fsync it: {}", path, dir, std::strerror(errno));
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  // Some file systems do not support fsync on directories (EINVAL); the rename already happened.
  LT_CHECK(rc == 0 || e == EINVAL, "{}: fsync of directory '{}' failed: {}", path, dir, std::strerror(e));
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write) {
  LT_CHECK(!path.empty() && path.back() != '/', "cannot write to '{}': not a file path", path);
  std::string tmpl = path + ".tmp.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = ::mkstemp(buf.data());
  LT_CHECK(fd >= 0, "{}: cannot create a temporary file in '{}': {}", path, parent_dir(path), std::strerror(errno));
  std::string tmp(buf.data());
  ::fchmod(fd, 0644);  // mkstemp creates 0600; checkpoints should be readable like ordinary files
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("{}: fdopen failed: {}", path, std::strerror(e));
  }
  try {
    write(f);
    LT_CHECK(std::fflush(f) == 0 && !std::ferror(f), "{}: write failed: {}", path, std::strerror(errno));
    LT_CHECK(::fsync(::fileno(f)) == 0, "{}: fsync failed: {}", path, std::strerror(errno));
  } catch (...) {
    std::fclose(f);
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("{}: close failed: {}", path, std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot rename the temporary file '{}' over it: {}", path, tmp, std::strerror(e));
  }
  fsync_dir(parent_dir(path), path);
}

void write_text_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, [&](std::FILE* f) {
    if (!content.empty())
      LT_CHECK(std::fwrite(content.data(), 1, content.size(), f) == content.size(), "{}: write failed: {}", path,
               std::strerror(errno));
  });
}

}  // namespace lt
