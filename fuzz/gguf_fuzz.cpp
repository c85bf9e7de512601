// A GGUF file's header, metadata and tensor infos, the first row of each tensor of a known type
// through the dequantizers, then its vocabulary as a tokenizer, read as the loaders read one.
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "fuzz_support.h"
#include "io/gguf.h"
#include "kernels/cpu/convert.h"
#include "tokenizer/tokenizer.h"

using namespace gemmaserve;

namespace {

// At most 4096 values of each tensor's first row (bounded work): hostile scales and indices
// must give some floats, never undefined behaviour.
void dequantize_first_rows(const GgufFile& gguf) {
  std::vector<float> out;
  for (const GgufTensorInfo& t : gguf.tensors()) {
    const std::optional<DType> dtype = dtype_of_ggml_type(t.ggml_type);
    if (!dtype || t.dims.empty() || !t.byte_size) continue;
    if (!dtype_is_block(*dtype) && *dtype != DType::kF32 && *dtype != DType::kF16 &&
        *dtype != DType::kBF16) {
      continue;
    }
    const auto block = static_cast<uint64_t>(dtype_block_elems(*dtype));
    const uint64_t n = std::min<uint64_t>(t.dims[0], 4096) / block * block;
    if (n == 0 || dtype_row_bytes(*dtype, static_cast<int64_t>(n)) > *t.byte_size) continue;
    out.resize(n);
    cpu::to_f32(*dtype, t.data, out.data(), n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::MemoryFile file(std::span<const uint8_t>(data, size));
  fuzz::expect_input_errors_only([&] {
    const GgufFile gguf(file.path());
    for (const GgufValue& v : gguf.metadata()) {
      if (v.type() == GgufType::kString) (void)v.as_string();
    }
    dequantize_first_rows(gguf);
    const Tokenizer tok = Tokenizer::from_gguf(gguf);
    (void)tok.encode("Hello <bos> world", true, true);
  });
  return 0;
}
