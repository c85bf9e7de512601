// The Gemma 4 reasoning parser fed the same text whole and in random chunks: the streamed
// reasoning and content must add up to the whole-output result.
#include <fuzzer/FuzzedDataProvider.h>

#include <string>

#include "fuzz_support.h"
#include "server/shared/gemma4_reasoning_parser.h"

using namespace gemmaserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool in_channel = in.ConsumeBool();
  const uint64_t split_seed = in.ConsumeIntegral<uint64_t>();
  const std::string text = in.ConsumeRemainingBytesAsString();
  const ReasoningResult whole = extract_gemma4_reasoning(text, in_channel);

  Gemma4ReasoningStream stream(in_channel);
  std::string reasoning, content;
  uint64_t seed = split_seed;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min<size_t>(text.size() - pos, 1 + seed % 7);
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const ReasoningDelta d = stream.feed(std::string_view(text).substr(pos, len));
    reasoning += d.reasoning;
    content += d.content;
    pos += len;
  }
  const ReasoningDelta d = stream.finish();
  reasoning += d.reasoning;
  content += d.content;
  fuzz::check(whole.content == content, "streamed content differs");
  fuzz::check(whole.reasoning.value_or("") == reasoning, "streamed reasoning differs");
  return 0;
}
