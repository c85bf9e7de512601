// A GGUF file's header, metadata and tensor infos, then its vocabulary as a tokenizer, read as
// the loaders read one.
#include <span>

#include "fuzz_support.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace gemmaserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::MemoryFile file(std::span<const uint8_t>(data, size));
  fuzz::expect_input_errors_only([&] {
    const GgufFile gguf(file.path());
    for (const GgufValue& v : gguf.metadata()) {
      if (v.type() == GgufType::kString) (void)v.as_string();
    }
    const Tokenizer tok = Tokenizer::from_gguf(gguf);
    (void)tok.encode("Hello <bos> world", true, true);
  });
  return 0;
}
