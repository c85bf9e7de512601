// Storage aligned to a cache line, so whole-vector loads and stores never straddle two lines
// (a misaligned 64-byte load costs two; malloc's large blocks sit 16 bytes past a page).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace gemmaserve {

constexpr size_t kCacheLineBytes = 64;

template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{kCacheLineBytes}); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

struct AlignedDelete {
  void operator()(uint8_t* p) const { ::operator delete (p, std::align_val_t{kCacheLineBytes}); }
};

// `bytes` uninitialised bytes (pages are only touched when written).
using AlignedBytes = std::unique_ptr<uint8_t[], AlignedDelete>;
inline AlignedBytes make_aligned_bytes(size_t bytes) {
  return AlignedBytes(
      static_cast<uint8_t*>(::operator new (bytes, std::align_val_t{kCacheLineBytes})));
}

}  // namespace gemmaserve
