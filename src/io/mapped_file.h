// Read-only memory map of a whole file (RAII).
#pragma once

#include <cstddef>
#include <filesystem>

namespace gemmaserve {

class MappedFile {
 public:
  // Throws InputError naming the path if it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void release();
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Asks the kernel to reclaim the whole pages inside [p, p + n) (MADV_PAGEOUT): clean file-mapped
// pages leave this process's memory and fault back in from the file if read again; anonymous
// pages without swap stay, so no data is lost whatever the range holds. For weights copied
// elsewhere, so the process does not hold both. Best effort: kernels before 5.4 ignore it.
void release_mapped_pages(const void* p, size_t n);

}  // namespace gemmaserve
