#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"

namespace lt {

namespace {
// The live read-only file mappings: release_mapped_pages acts only inside one of them (on other
// memory MADV_DONTNEED would zero the data).
std::mutex g_maps_mutex;
std::vector<std::pair<uintptr_t, uintptr_t>> g_maps;
}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  LT_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("{}: cannot mmap: {}", path, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
    std::lock_guard<std::mutex> lock(g_maps_mutex);
    g_maps.push_back({uintptr_t(p), uintptr_t(p) + size_});
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (!data_) return;
  {
    std::lock_guard<std::mutex> lock(g_maps_mutex);
    std::erase(g_maps, std::pair<uintptr_t, uintptr_t>{uintptr_t(data_), uintptr_t(data_) + size_});
  }
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

void release_mapped_pages(const void* data, size_t n) {
  {
    std::lock_guard<std::mutex> lock(g_maps_mutex);
    const uintptr_t b = uintptr_t(data), e = b + n;
    bool mapped = false;
    for (auto [lo, hi] : g_maps) mapped |= lo <= b && e <= hi;
    if (!mapped) return;  // not from a MappedFile: leave it alone
  }
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = (uintptr_t(data) + page - 1) / page * page, end = (uintptr_t(data) + n) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

std::string read_text_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  LT_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail("{}: is a directory, expected a file", path);
  }
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      fail("{}: cannot read: {}", path, std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

}  // namespace lt
