// Large, long-lived buffers (the model's regrouped weights, the KV cache, the benchmarks' stand-ins
// for them) on transparent huge pages where Linux offers them: a decode step streams every
// weight once, and with 4 KiB pages that stream takes a TLB miss every 4 KiB (2 MiB pages
// streamed 1-3 % faster per core on Zen 5, 15-25 % on an Intel Xeon).
#pragma once

#include <cstddef>
#include <memory>

namespace gemmaserve {

// `bytes` uninitialised bytes, 2 MiB aligned; pages are only backed when first written, so a
// buffer filled piece by piece never holds more memory than it has been given.
// GEMMASERVE_HUGE_PAGES=off keeps 4 KiB pages (it must be auto or off).
std::shared_ptr<std::byte> allocate_huge_page_buffer(size_t bytes);

}  // namespace gemmaserve
