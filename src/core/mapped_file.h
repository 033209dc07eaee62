// A read-only memory-mapped file. Throws lt::Error naming the path when it cannot be opened.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lt {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Drops the resident pages wholly inside [data, data + n) of a read-only file mapping (after
// their contents were copied elsewhere), so loading does not hold the file and its copy at once.
// Always safe: a later read faults the pages back in from the file; memory that is not inside a
// live MappedFile (tensors built in memory) is left untouched.
void release_mapped_pages(const void* data, size_t n);

// Reads a whole (small) file into a string; lt::Error naming the path when it is missing,
// unreadable or a directory.
std::string read_text_file(const std::string& path);

}  // namespace lt
