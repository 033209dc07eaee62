// OffloadFile: optimizer state kept in a file memory-mapped from a directory instead of anonymous
// memory (ZeRO-Infinity's NVMe tier; a GPU build would point the same interface at host memory).
// The optimizer touches one tensor's range at a time and then releases its pages: they leave the
// process's resident set (dirty pages are written back by the kernel), so at most about one
// tensor of the state is resident during the update and none between steps.
// Usage: OffloadFile f(dir, rank, bytes); float* m = f.floats(0); ...; f.release(m, n * 4);
#pragma once
#include <cstddef>
#include <string>

namespace lt {

class OffloadFile {
 public:
  // Creates (truncates) DIR/leantune-optimizer-rank<rank>.bin of `bytes` zero bytes and maps it
  // shared, read-write. lt::Error naming the path when the directory or file cannot be used.
  OffloadFile(const std::string& dir, int rank, size_t bytes);
  ~OffloadFile();  // unmaps and removes the file (checkpoints hold the state)
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  float* floats(size_t byte_offset) const { return reinterpret_cast<float*>(base_ + byte_offset); }
  size_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }
  // Drops the pages wholly inside [p, p + n) from the resident set (their data stays in the file).
  void release(const void* p, size_t n) const;
  void release_all() const { release(base_, bytes_); }

 private:
  std::string path_;
  unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lt
