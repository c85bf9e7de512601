// OpenAI/vLLM request bodies parsed into structs (protocol only, no serving logic): field types
// and ranges are checked here with vLLM's messages; engine-level limits are checked when the
// requests are submitted.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gemmaserve/sampling_params.h"
#include "server/shared/server_options.h"

namespace gemmaserve {

// vLLM's 400 when a chat request sets both add_generation_prompt and continue_final_message.
inline constexpr const char* kBothGenerationFlagsMessage =
    "Cannot set both `continue_final_message` and `add_generation_prompt` to True.";

struct StreamOptions {
  bool include_usage = false;
  bool continuous_usage_stats = false;
};

// Fields completions and chat share.
struct GenerationRequest {
  std::optional<std::string> model;
  SamplingParams params;          // the server defaults with the client's fields applied
  std::optional<int> max_tokens;  // nullopt = fill the remaining context
  bool stream = false;
  StreamOptions stream_options;
  int priority = 0;
  std::optional<std::string> cache_salt;
  std::optional<std::string> request_id;
  std::optional<bool> add_special_tokens;
  bool echo = false;
  bool return_token_ids = false;
  bool return_tokens_as_token_ids = false;
  std::optional<int> truncate_prompt_tokens;
  bool truncate_keeps_first = false;        // truncation_side "right": keep the first N tokens
  bool json_object = false;                 // response_format {"type": "json_object"}
  std::string structured_kind;              // json | regex | choice | grammar (structured outputs)
  std::string structured_spec;              // its schema / regex / choices / EBNF text
  std::vector<std::string> ignored_fields;  // unknown fields, logged as vLLM does
  // JSON blank space: structured_outputs.disable_any_whitespace, and structured_outputs' or the
  // legacy guided_whitespace_pattern.
  bool disable_any_whitespace = false;
  std::optional<std::string> whitespace_pattern;
};

// One completions prompt: text or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
};

struct CompletionRequest : GenerationRequest {
  std::vector<PromptInput> prompts;
  std::optional<int> logprobs;  // top-N per token
};

struct ChatRequest : GenerationRequest {
  nlohmann::ordered_json messages;                  // a non-empty array
  nlohmann::ordered_json tools;                     // null or an array
  std::string tool_choice = "none";                 // none | auto | required | function
  std::optional<std::string> tool_choice_function;  // with tool_choice "function"
  bool logprobs = false;
  std::optional<int> top_logprobs;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  std::optional<std::string> chat_template;
  std::optional<std::string> reasoning_effort;
  bool include_reasoning = true;
  nlohmann::ordered_json documents;     // null or an array
  std::vector<std::string> image_urls;  // the image parts' URLs, in message order
  std::vector<std::string> audio_urls;  // the audio parts' URLs (input_audio as data:), in order
  std::vector<std::string> video_urls;  // the video_url parts' URLs, in order
  std::optional<int> max_soft_tokens;   // mm_processor_kwargs.max_soft_tokens
  nlohmann::json mm_processor_kwargs;   // as given (num_frames / fps reach the video loader)
  nlohmann::json media_io_kwargs;       // the request's loader options, over --media-io-kwargs
  bool return_prompt_text = false;      // the rendered prompt as prompt_text
  bool parallel_tool_calls = true;      // false: only the first tool call is returned
};

// `defaults` are the generation-config defaults (Engine::default_sampling_params()).
// Throws ApiError (400, or 501 for features not implemented) naming the field.
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body,
                                           const SamplingParams& defaults);
ChatRequest parse_chat_request(const nlohmann::ordered_json& body, const SamplingParams& defaults);

// The server flags that set a request's defaults, applied after parsing `body` as vLLM does:
// --return-tokens-as-token-ids (unless the request says) and --enable-force-include-usage.
void apply_server_request_defaults(const ServerOptions& options, const nlohmann::ordered_json& body,
                                   GenerationRequest& request);

}  // namespace gemmaserve
