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
  std::optional<std::string> finish_reason;  // "stop" | "length" | "abort" | "error"
  // The stop string or stop token id that ended the sequence, if any.
  std::optional<std::string> stop_reason_text;
  std::optional<int32_t> stop_reason_token;
};

// Why a step failed for one request alone (its completions then end with finish_reason
// "error"); the engine goes on serving the others.
struct RequestError {
  std::string message;
  bool bad_request = false;  // its own parameters caused it (an InputError): a 400, else a 500
};

struct RequestOutput {
  std::string request_id;
  std::optional<std::string> prompt;
  std::vector<int32_t> prompt_token_ids;
  // One entry per prompt position; the first is nullopt (nothing predicts it).
  std::optional<std::vector<std::optional<TokenLogprobs>>> prompt_logprobs;
  std::vector<CompletionOutput> outputs;
  bool finished = false;
  // Prompt tokens whose K/V came from the prefix cache (OpenAI's cached_tokens); -1 before the
  // request was first scheduled.
  int num_cached_tokens = -1;
  std::optional<RequestError> error;  // set with the last delta of a request a step failed
};

// What one engine step added to one completion: the unit a streaming (SSE) server sends.
struct CompletionDelta {
  int index = 0;
  std::string text;                     // newly final text (held-back stop-string text excluded)
  std::vector<int32_t> token_ids;       // newly generated ids
  std::vector<TokenLogprobs> logprobs;  // one per new token, when logprobs were requested
  std::optional<std::string> finish_reason;  // set in the step that ends this completion
  std::optional<std::string> stop_reason_text;
  std::optional<int32_t> stop_reason_token;
};

// The change a step made to a request. Concatenating a completion's deltas gives its final
// text and token ids.
struct RequestOutputDelta {
  std::vector<CompletionDelta> outputs;  // only completions that changed, by index
  // Set once, in the first delta after the prompt was computed, when prompt_logprobs were asked.
  std::optional<std::vector<std::optional<TokenLogprobs>>> prompt_logprobs;
  bool finished = false;  // the last delta of the request
};

}  // namespace gemmaserve
