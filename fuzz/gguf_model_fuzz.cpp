// A GGUF file as a Gemma 4 model, read as `serve model.gguf` reads one: the file, its tensor
// names mapped to HF's, the config.json its metadata describes, and every weight bound.
#include <span>

#include "fuzz_support.h"
#include "model/config.h"
#include "model/gemma4_gguf.h"
#include "model/weights.h"

using namespace gemmaserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::MemoryFile file(std::span<const uint8_t>(data, size));
  fuzz::expect_input_errors_only([&] {
    const auto ckpt = open_gemma4_gguf(file.path(), std::nullopt);
    (void)parse_model_config(ckpt->config(), ckpt->config_source());
    (void)load_model_weights(file.path());
  });
  return 0;
}
