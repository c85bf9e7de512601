// Structured-output specs (JSON schema, regex, choice, EBNF) compiled as a request's are, then a
// matcher run over a few bytes: every spec compiles or is refused within the grammar's budgets.
#include <fuzzer/FuzzedDataProvider.h>

#include <string>

#include "engine/structured/compiled_grammar.h"
#include "engine/structured/grammar_matcher.h"
#include "fuzz_support.h"

using namespace gemmaserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static constexpr const char* kKinds[] = {"json", "regex", "choice", "grammar"};
  FuzzedDataProvider in(data, size);
  const char* kind = kKinds[in.ConsumeIntegralInRange<int>(0, 3)];
  const std::string output = in.ConsumeRandomLengthString(64);
  const std::string spec = in.ConsumeRemainingBytesAsString();
  fuzz::expect_input_errors_only([&] {
    const structured::Grammar g = structured::build_grammar(kind, spec);
    structured::GrammarMatcher matcher(g);
    structured::GrammarState state = matcher.initial();
    (void)matcher.feed(&state, output);
  });
  return 0;
}
