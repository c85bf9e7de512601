// A tokenizer.json (and tokenizer_config.json) read into a tokenizer, which then encodes and
// decodes a little text.
#include <fuzzer/FuzzedDataProvider.h>

#include <string>

#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

using namespace gemmaserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string config_text = in.ConsumeRandomLengthString(512);
  const std::string text = in.ConsumeRandomLengthString(64);
  const std::string tokenizer_text = in.ConsumeRemainingBytesAsString();
  fuzz::expect_input_errors_only([&] {
    const nlohmann::json tokenizer_json = nlohmann::json::parse(tokenizer_text);
    const nlohmann::json config = nlohmann::json::parse(config_text, nullptr, false);
    const Tokenizer tok =
        Tokenizer::from_json(tokenizer_json, config.is_object() ? &config : nullptr, "fuzz");
    const std::vector<int32_t> ids = tok.encode(text, true, true);
    (void)tok.decode(ids, false);
  });
  return 0;
}
