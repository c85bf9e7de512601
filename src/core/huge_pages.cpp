#include "core/huge_pages.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

#include "core/error.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gemmaserve {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;

bool huge_pages_wanted() {
  const char* env = std::getenv("GEMMASERVE_HUGE_PAGES");
  const std::string v = env ? env : "";
  if (!v.empty() && v != "auto" && v != "off") {
    throw InputError("GEMMASERVE_HUGE_PAGES must be auto or off, got '" + v + "'");
  }
  return v != "off";
}

}  // namespace

std::shared_ptr<std::byte> allocate_huge_page_buffer(size_t bytes) {
  const bool huge = huge_pages_wanted();
  const size_t size =
      (std::max<size_t>(bytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
#if defined(__linux__)
  // Over-reserve by one huge page so the buffer can start on a 2 MiB boundary (only whole,
  // aligned 2 MiB extents can be huge pages); untouched address space costs nothing.
  const size_t reserved = size + kHugePageBytes;
  void* base = ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  const auto start =
      (reinterpret_cast<uintptr_t>(base) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  auto* p = reinterpret_cast<std::byte*>(start);
  // A kernel without transparent huge pages refuses the advice; the buffer still works.
  (void)::madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return std::shared_ptr<std::byte>(p, [base, reserved](std::byte*) { ::munmap(base, reserved); });
#else
  (void)huge;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kHugePageBytes, size));
  if (p == nullptr) throw std::bad_alloc();
  return std::shared_ptr<std::byte>(p, std::free);
#endif
}

}  // namespace gemmaserve
