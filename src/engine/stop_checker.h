// Decides when a sequence ends and what text it shows: stop token ids, stop strings matched on
// the detokenized text across token boundaries (held back while they may still be forming),
// min_tokens, max_tokens and the model length.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "gemmaserve/sampling_params.h"

namespace gemmaserve {

class Tokenizer;
class IncrementalDetokenizer;

struct StopUpdate {
  bool finished = false;
  std::optional<std::string> finish_reason;  // "stop" | "length"
  std::optional<std::string> stop_reason_text;
  std::optional<int32_t> stop_reason_token;
  std::string text_delta;  // new text that is final (safe to stream)
};

class StopChecker {
 public:
  // `stop_ids`: eos ids (unless ignore_eos) plus the request's stop_token_ids.
  // `tokenizer` may be null (token-id only models: no text, stop strings ignored); it must
  // outlive this object. `max_total_tokens`: the model length limit for prompt + output (<= 0:
  // none). As vLLM, the tokenizer's own eos (unless ignore_eos) ends with stop_reason unset.
  StopChecker(const SamplingParams& params, std::set<int32_t> stop_ids, const Tokenizer* tokenizer,
              int prompt_len, int max_total_tokens);
  ~StopChecker();

  // Records the next generated token and returns what changed. A stop token id is kept in the
  // token ids but not shown as text (unless include_stop_str_in_output, as in vLLM); a stop
  // string is cut from the text (unless include_stop_str_in_output) with everything after it.
  // While fewer than min_tokens were generated nothing stops the sequence except the model
  // length. Throws std::logic_error once finished.
  StopUpdate append(int32_t token);

  // All text shown so far.
  const std::string& text() const { return text_; }
  int num_generated() const { return generated_; }

 private:
  SamplingParams params_;
  std::set<int32_t> stop_ids_;
  std::unique_ptr<IncrementalDetokenizer> detok_;
  int prompt_len_;
  int max_total_tokens_;
  int generated_ = 0;
  std::string text_;               // emitted (final) text
  std::string pending_;            // decoded text held back because a stop string may start in it
  std::set<int32_t> primary_eos_;  // the tokenizer's eos: stop_reason stays unset (vLLM)
  size_t hold_chars_ = 0;          // longest stop string - 1, in code points (vLLM)
  size_t max_stop_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace gemmaserve
