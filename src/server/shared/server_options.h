// What `gemmaserve serve` was started with, beyond the engine flags (vLLM's names).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/media/media_connector.h"
#include "server/shared/cors.h"
#include "tokenizer/chat_template/content_format.h"

namespace gemmaserve {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;
  std::vector<std::string> served_model_names;  // first is reported in responses
  std::optional<std::string> api_key;           // --api-key, VLLM_API_KEY, GEMMASERVE_API_KEY
  std::optional<std::string> chat_template;     // --chat-template, resolved to template text
  // --chat-template-content-format; nullopt = auto (each template's detected format).
  std::optional<ChatContentFormat> chat_template_content_format;
  bool trust_request_chat_template = false;
  nlohmann::ordered_json default_chat_template_kwargs = nlohmann::ordered_json::object();
  bool enable_auto_tool_choice = false;
  // --structured-outputs-config's disable_any_whitespace, for every request.
  bool disable_any_whitespace = false;
  std::string tool_call_parser;  // "" = gemma4 for Gemma 4 checkpoints, else none
  std::string reasoning_parser;  // "" = gemma4 for Gemma 4 checkpoints, else none
  bool disable_log_requests = false;
  size_t max_request_size_bytes = size_t{64} << 20;
  // Largest audio file the speech-to-text routes take (vLLM's VLLM_MAX_AUDIO_CLIP_FILESIZE_MB).
  size_t max_audio_file_bytes = size_t{25} << 20;
  int max_waiting_requests = 0;   // 0 = 8 x --max-num-seqs
  int max_logprobs = 20;          // vLLM's --max-logprobs default
  int max_connections = 1024;     // open connections (one thread each); more get 503 and close
  double request_timeout_s = 0;   // --request-timeout: a request's deadline once queued; 0 = none
  double shutdown_timeout_s = 0;  // --shutdown-timeout: drain time on SIGTERM (vLLM: 0)
  // --http-timeout: time to send one whole request, and for the client to take each write.
  double http_timeout_s = 30;
  // --max-http-workers: threads serving connections, one per open connection (a stream's for its
  // whole life); a connection that finds none free gets 503 and is closed.
  int max_http_workers = 512;
  // --allowed-local-media-path, --allowed-media-domains, --media-fetch-timeout,
  // --disable-media-url-fetch (and VLLM_MEDIA_URL_ALLOW_REDIRECTS)
  media::MediaConnectorOptions media;
  CorsOptions cors;  // --allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials
  bool enable_request_id_headers = false;       // X-Request-Id on every response
  bool enable_prompt_tokens_details = false;    // usage.prompt_tokens_details.cached_tokens
  bool enable_force_include_usage = false;      // a usage chunk ends every stream
  bool return_tokens_as_token_ids = false;      // a request's return_tokens_as_token_ids default
  bool enable_tokenizer_info_endpoint = false;  // GET /tokenizer_info (shows the chat template)
};

}  // namespace gemmaserve
