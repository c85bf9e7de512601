#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace gemmaserve {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path.string() + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(path.string() + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw InputError(path.string() + ": cannot mmap: " + std::strerror(err));
    }
    data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void release_mapped_pages(const void* p, size_t n) {
#ifdef MADV_PAGEOUT
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
#else
  (void)p;
  (void)n;
#endif
}

void MappedFile::release() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace gemmaserve
