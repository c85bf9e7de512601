// Per-request generation settings, named as in vLLM's SamplingParams.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gemmaserve {

// What the answer must be, as vLLM's structured outputs would enforce it. The answer starts at
// the first generated token, or after a leading span from `lead_open` to `lead_close` (a thought
// channel) when the output opens with `lead_open` or the prompt left the span open
// (`starts_inside_lead`); the span itself is free.
// - prefix_choices (tool_choice "required" or a named function: the tool-call marker and a
//   tool's name): each answer token is masked to the next tokens of the choices it still
//   matches, until one matches whole; the model writes the rest freely.
// - json_object (response_format {"type": "json_object"}): the answer is one JSON object, then
//   only a stop token; `never` lists tokens it may not contain (marker tokens).
// - structured_kind (vLLM's structured outputs): the answer matches `structured_spec` read as
//   "json" (a JSON Schema's text), "regex", "choice" (a JSON array of strings) or "grammar"
//   (xgrammar's EBNF); once it is whole only a stop token may follow (or more text the grammar
//   takes). The engine compiles the spec (InputError when it cannot).
struct AnswerConstraint {
  std::vector<std::vector<int32_t>> prefix_choices;
  bool json_object = false;
  std::string structured_kind;
  std::string structured_spec;
  std::vector<int32_t> never;
  int32_t lead_open = -1;  // -1 = no leading span
  int32_t lead_close = -1;
  bool starts_inside_lead = false;
};

struct SamplingParams {
  int n = 1;
  int max_tokens = 16;
  int min_tokens = 0;
  double temperature = 1.0;  // 0 = greedy (argmax, ties to the lower id)
  double top_p = 1.0;
  int top_k = 0;  // 0 or -1 = off
  double min_p = 0.0;
  double presence_penalty = 0.0;                          // output tokens only, as in vLLM
  double frequency_penalty = 0.0;                         // output tokens only
  double repetition_penalty = 1.0;                        // prompt and output tokens
  std::map<int32_t, float> logit_bias;                    // added to the logits before sampling
  std::optional<std::vector<int32_t>> allowed_token_ids;  // all others are masked
  std::vector<std::string> bad_words;                     // token sequences never completed
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  // -1 = the whole vocabulary, as in vLLM.
  std::optional<int> logprobs;         // top-K of the raw model distribution per generated token
  std::optional<int> prompt_logprobs;  // top-K per prompt position (first is null)
  bool skip_special_tokens = true;
  // Off (with skip_special_tokens off): an added token right after another is output as its raw
  // content, as vLLM's fast-tokenizer detokenizer does.
  bool spaces_between_special_tokens = true;
  std::optional<AnswerConstraint> answer_constraint;

  // Throws InputError naming the field when a value is out of range (vLLM's messages).
  // `max_logprobs` bounds logprobs/prompt_logprobs as vLLM's --max-logprobs; -1 = vocab_size.
  void validate(int vocab_size, int max_logprobs = -1) const;
};

}  // namespace gemmaserve
