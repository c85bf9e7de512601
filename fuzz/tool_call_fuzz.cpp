// The Gemma 4 tool-call parser fed the same text whole and in random chunks: no crash, and the
// streamed deltas must add up to the whole-output result.
#include <fuzzer/FuzzedDataProvider.h>

#include <string>
#include <vector>

#include "fuzz_support.h"
#include "server/shared/gemma4_tool_parser.h"

using namespace gemmaserve;

namespace {

ToolCallIdGenerator counter_ids() {
  return [n = 0]() mutable { return "call_" + std::to_string(n++); };
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const uint64_t split_seed = in.ConsumeIntegral<uint64_t>();
  const std::string text = in.ConsumeRemainingBytesAsString();
  const ToolParseResult whole = extract_gemma4_tool_calls(text, counter_ids());

  Gemma4ToolCallStream stream(counter_ids());
  std::string content;
  std::vector<ToolCall> calls;
  auto take = [&](const ToolParserDelta& d) {
    content += d.content;
    for (const ToolCallDelta& c : d.tool_calls) {
      fuzz::check(c.index >= 0 && static_cast<size_t>(c.index) <= calls.size(), "delta index");
      if (static_cast<size_t>(c.index) == calls.size()) {
        fuzz::check(c.id.has_value() && c.name.has_value(), "first delta without id and name");
        calls.push_back({*c.id, *c.name, "", false});
      }
      calls[static_cast<size_t>(c.index)].arguments += c.arguments;
    }
  };
  uint64_t seed = split_seed;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min<size_t>(text.size() - pos, 1 + seed % 7);
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    take(stream.feed(std::string_view(text).substr(pos, len)));
    pos += len;
  }
  take(stream.finish());

  fuzz::check(whole.tool_calls.size() == calls.size(), "streamed call count differs");
  for (size_t i = 0; i < calls.size(); ++i) {
    fuzz::check(whole.tool_calls[i].name == calls[i].name, "streamed call name differs");
    fuzz::check(whole.tool_calls[i].arguments == calls[i].arguments, "streamed arguments differ");
    try {
      (void)nlohmann::json::parse(calls[i].arguments);
    } catch (const nlohmann::json::out_of_range&) {
      // An integer past double's range: valid JSON (Python's int, kept exact), nlohmann refuses.
    } catch (const nlohmann::json::parse_error&) {
      fuzz::fail("arguments are not JSON: " + fuzz::escaped(calls[i].arguments));
    }
  }
  if (calls.empty()) {
    fuzz::check(whole.content.value_or("") == content, "streamed content differs");
  }
  return 0;
}
