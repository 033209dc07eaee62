// The memory-mapped optimizer-state file (dist/offload.h).
#include "dist/offload.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "core/error.h"
#include "core/memory_plan.h"

namespace lt {

OffloadFile::OffloadFile(const std::string& dir, int rank, size_t bytes) : bytes_(std::max(bytes, size_t(1))) {
  LT_CHECK(!dir.empty(), "offload_optimizer: disk needs offload_dir, a directory for the optimizer state file");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LT_CHECK(!ec, "offload_dir '{}': cannot create the directory: {}", dir, ec.message());
  path_ = (std::filesystem::path(dir) / fmt::format("leantune-optimizer-rank{}.bin", rank)).string();
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  LT_CHECK(fd >= 0, "offload_dir: cannot create {}: {}", path_, std::strerror(errno));
  if (::ftruncate(fd, off_t(bytes_)) != 0) {
    int e = errno;
    ::close(fd);
    fail("offload_dir: cannot size {} to {} bytes: {}", path_, bytes_, std::strerror(e));
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  LT_CHECK(p != MAP_FAILED, "offload_dir: cannot map {} ({} bytes): {}", path_, bytes_, std::strerror(e));
  base_ = static_cast<unsigned char*>(p);
}

OffloadFile::~OffloadFile() {
  if (base_) ::munmap(base_, bytes_);
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void OffloadFile::release(const void* p, size_t n) const {
  auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + n;
  lo = (lo + kPage - 1) / kPage * kPage;
  hi = hi / kPage * kPage;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace lt
