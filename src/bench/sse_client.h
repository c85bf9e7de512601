// The client side of OpenAI-style streaming: a byte-exact Server-Sent Events parser, a reader that
// turns completion/chat-completion chunks into timings (TTFT, inter-token latencies), and the
// blocking HTTP calls `bench serve` makes (one connection per in-flight request).
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gemmaserve::bench {

// One dispatched SSE event: the `event:` name ("" when absent) and its `data:` lines joined by \n.
struct SseEvent {
  std::string event;
  std::string data;
};

// Incremental SSE parser (WHATWG rules): lines end in \n, \r\n or \r, a blank line dispatches,
// `:` lines are comments, one space after the colon is dropped. Bytes may be split anywhere.
class SseParser {
 public:
  std::vector<SseEvent> feed(std::string_view bytes);
  // End of stream: an event whose data was complete but not followed by a blank line (some
  // servers omit the final one) is dispatched; a half line is dropped.
  std::vector<SseEvent> finish();

 private:
  void take_line(std::string_view line, std::vector<SseEvent>& out);
  std::string line_;
  bool after_cr_ = false;  // the last byte was \r: a following \n belongs to the same line end
  std::string event_, data_;
  bool has_data_ = false;
};

// What one streamed request measured, as vLLM's RequestFuncOutput (seconds).
struct RequestOutput {
  bool success = false;
  std::string error;
  std::string generated_text;
  double start_time = 0.0;  // since the benchmark started
  double ttft = 0.0;
  std::vector<double> itl;
  double latency = 0.0;              // request sent -> last token chunk
  std::optional<int> output_tokens;  // usage.completion_tokens when the server sent usage
  std::optional<int> prompt_tokens;  // usage.prompt_tokens
  int content_chunks = 0;            // chunks that carried text
};

// Reads an OpenAI streaming body. Times are seconds since the request was sent. A chunk counts
// as a token when its first choice carries text (completions `text`, chat `delta.content` or
// reasoning); usage chunks fill the token counts; `data: [DONE]` ends the stream; an `error`
// event or a chunk with an "error" object fails the request with that message.
class CompletionStreamReader {
 public:
  explicit CompletionStreamReader(bool chat) : chat_(chat) {}
  void on_bytes(std::string_view bytes, double now);
  void on_end(double now);
  // The finished measurement; `start_time` is left for the caller.
  RequestOutput result() const;
  bool saw_done() const { return done_; }

 private:
  void on_event(const SseEvent& event, double now);
  bool chat_;
  SseParser parser_;
  RequestOutput out_;
  bool first_token_seen_ = false;
  double last_token_time_ = 0.0;
  bool done_ = false;
  std::string failure_;
};

// "http://host:port/prefix" split into what httplib::Client takes and a path prefix.
struct ServerUrl {
  std::string scheme_host_port;  // "http://127.0.0.1:8000"
  std::string path_prefix;       // "" or "/prefix" (no trailing slash)
};
// Throws InputError for URLs that are not http(s)://host[:port][/path].
ServerUrl parse_server_url(const std::string& url);

using HttpHeaders = std::multimap<std::string, std::string>;

// Headers every request carries: Authorization: Bearer KEY when `api_key` is non-empty.
HttpHeaders auth_headers(const std::string& api_key);

struct HttpReply {
  int status = 0;  // 0: no HTTP response (connection error, see `error`)
  std::string body;
  std::string error;
};
HttpReply http_get(const ServerUrl& server, const std::string& path, const HttpHeaders& headers,
                   std::chrono::seconds timeout);
HttpReply http_post_json(const ServerUrl& server, const std::string& path,
                         const nlohmann::json& body, const HttpHeaders& headers,
                         std::chrono::seconds timeout);

// POSTs a streaming request on its own connection and measures it. Never throws: failures are
// reported in the output (HTTP status with the body's message, connection errors, bad chunks).
RequestOutput stream_request(const ServerUrl& server, const std::string& path,
                             const nlohmann::json& body, const HttpHeaders& headers, bool chat,
                             std::chrono::steady_clock::time_point benchmark_start,
                             std::chrono::seconds timeout);

}  // namespace gemmaserve::bench
