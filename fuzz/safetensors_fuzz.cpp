// A safetensors file's header (8-byte length + JSON) and offsets, read as the loader reads one.
#include <span>

#include "fuzz_support.h"
#include "io/safetensors.h"

using namespace gemmaserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::MemoryFile file(std::span<const uint8_t>(data, size));
  fuzz::expect_input_errors_only([&] {
    const SafetensorsFile st(file.path());
    for (const auto& [name, view] : st.tensors()) {
      // Every view must lie inside the file the loader mapped.
      fuzz::check(view.nbytes <= size, "tensor larger than the file");
      (void)view.shape_string();
    }
  });
  return 0;
}
