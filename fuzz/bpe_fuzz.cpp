// BPE encode/decode of arbitrary bytes with the demo model's tokenizer: byte strings must
// round-trip through encode + decode_bytes, and any in-vocabulary ids must decode.
#include <fuzzer/FuzzedDataProvider.h>

#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

using namespace gemmaserve;

namespace {

const Tokenizer& demo_tokenizer() {
  static const Tokenizer t = Tokenizer::from_path(fuzz::source_root() / "models/gemma4-demo");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = demo_tokenizer();
  FuzzedDataProvider in(data, size);
  const bool parse_special = in.ConsumeBool();
  const bool skip_special = in.ConsumeBool();
  const std::string text = in.ConsumeRandomLengthString(4096);
  const std::vector<int32_t> ids = tok.encode(text, false, parse_special);
  // U+2581 is the tokenizer's own space mark: decoding turns it into a space, as in HF's.
  if (!parse_special && text.find("\xe2\x96\x81") == std::string::npos) {
    const std::string back = tok.decode_bytes(ids, false);
    fuzz::check(back == text, "decode_bytes(encode(s)) != s: " + fuzz::escaped(text) + " -> " +
                                  fuzz::escaped(back));
  }
  // Arbitrary ids: decode and stream them; out-of-vocabulary ones are InputErrors.
  std::vector<int32_t> random_ids;
  while (in.remaining_bytes() >= 2) {
    random_ids.push_back(
        in.ConsumeIntegralInRange<int32_t>(0, static_cast<int32_t>(tok.vocab_size()) + 2));
  }
  fuzz::expect_input_errors_only([&] {
    const std::string whole = tok.decode(random_ids, skip_special);
    IncrementalDetokenizer detok(tok, skip_special);
    std::string streamed;
    for (int32_t id : random_ids) streamed += detok.feed(id);
    streamed += detok.finish();
    (void)whole;
  });
  return 0;
}
