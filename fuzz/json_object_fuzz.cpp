// response_format json_object's byte recogniser: whatever bytes it accepts up to done() must be
// one JSON object that a JSON parser reads.
#include <string>

#include "core/utf8.h"
#include "engine/json_object_grammar.h"
#include "fuzz_support.h"

using namespace gemmaserve;

namespace {

// \uD800-\uDFFF: RFC 8259's grammar allows lone surrogate escapes (Python's json reads them),
// nlohmann's parser refuses them.
bool has_surrogate_escape(const std::string& text) {
  for (size_t i = 0; i + 3 < text.size(); ++i) {
    if (text[i] == '\\' && text[i + 1] == 'u' && (text[i + 2] == 'd' || text[i + 2] == 'D') &&
        std::string_view("89abcdefABCDEF").find(text[i + 3]) != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  JsonObjectMachine machine;
  std::string accepted;
  for (size_t i = 0; i < size; ++i) {
    const std::string before = machine.key();
    if (!machine.feed(data[i])) {
      fuzz::check(machine.key() == before, "a refused byte changed the state");
      continue;
    }
    accepted.push_back(static_cast<char>(data[i]));
    if (machine.done()) break;
  }
  if (machine.done()) {
    // The machine checks JSON's syntax, not UTF-8 nor surrogate pairing, as the RFC's grammar.
    if (utf8::is_valid(accepted) && !has_surrogate_escape(accepted)) {
      try {
        fuzz::check(nlohmann::json::parse(accepted).is_object(),
                    "accepted text is not an object: " + fuzz::escaped(accepted));
      } catch (const nlohmann::json::out_of_range&) {
        // A number past double's range (1e999): valid syntax, Python reads it as inf.
      } catch (const nlohmann::json::parse_error&) {
        fuzz::fail("accepted text is not JSON: " + fuzz::escaped(accepted));
      }
    }
  }
  return 0;
}
