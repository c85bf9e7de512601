// What a finished (or streaming) request returns, shaped like vLLM's RequestOutput.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gemmaserve {

// token id -> log-probability, for the top-K tokens (plus the chosen token) at one position.
using TokenLogprobs = std::map<int32_t, float>;

struct CompletionOutput {
  int index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::optional<std::vector<TokenLogprobs>> logprobs;
  std::optional<std::string> finish_reason;  // "stop" | "length"
  // The stop string or stop token id that ended the sequence, if any.
  std::optional<std::string> stop_reason_text;
  std::optional<int32_t> stop_reason_token;
};

struct RequestOutput {
  std::string request_id;
  std::optional<std::string> prompt;
  std::vector<int32_t> prompt_token_ids;
  // One entry per prompt position; the first is nullopt (nothing predicts it).
  std::optional<std::vector<std::optional<TokenLogprobs>>> prompt_logprobs;
  std::vector<CompletionOutput> outputs;
  bool finished = false;
};

}  // namespace gemmaserve
